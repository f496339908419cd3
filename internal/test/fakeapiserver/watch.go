// Watches of the fake API server that open, lag and coalesce as real ones can.

package fakeapiserver

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// faultyWatch passes on the events of a watch of the fake API server late, and
// drops those its fault says. It reads its source at once, whatever the lag: the
// fake's watch panics when 100 events wait.
type faultyWatch struct {
	server *Server
	source watch.Interface
	result chan watch.Event
	stop   chan struct{}
	halt   sync.Once

	mu      sync.Mutex
	pending []lateEvent
	ended   bool
	arrived chan struct{}
}

type lateEvent struct {
	watch.Event
	due time.Time
}

func newFaultyWatch(server *Server, source watch.Interface) *faultyWatch {
	w := &faultyWatch{
		server:  server,
		source:  source,
		result:  make(chan watch.Event),
		stop:    make(chan struct{}),
		arrived: make(chan struct{}, 1),
	}
	go w.receive()
	go w.deliver()
	return w
}

func (w *faultyWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *faultyWatch) Stop() {
	w.halt.Do(func() {
		close(w.stop)
		w.source.Stop()
	})
}

func (w *faultyWatch) receive() {
	for e := range w.source.ResultChan() {
		e = w.server.deletionEvent(e)
		w.mu.Lock()
		w.pending = append(w.pending, lateEvent{Event: e, due: time.Now().Add(w.server.fault.Lag)})
		w.mu.Unlock()
		w.signal()
	}
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.signal()
}

func (w *faultyWatch) signal() {
	select {
	case w.arrived <- struct{}{}:
	default:
	}
}

func (w *faultyWatch) deliver() {
	defer close(w.result)
	for {
		w.mu.Lock()
		if len(w.pending) == 0 {
			ended := w.ended
			w.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-w.arrived:
				continue
			case <-w.stop:
				return
			}
		}
		next := w.pending[0]
		w.mu.Unlock()
		if wait := time.Until(next.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-w.stop:
				return
			}
		}
		w.mu.Lock()
		w.pending = w.pending[1:]
		superseded := w.server.fault.Coalesce && next.Type == watch.Modified &&
			len(w.pending) > 0 && sameObject(next.Object, w.pending[0].Object)
		w.mu.Unlock()
		if superseded {
			w.server.dropped.Add(1)
			continue
		}
		select {
		case w.result <- next.Event:
		case <-w.stop:
			return
		}
	}
}

func sameObject(a, b runtime.Object) bool {
	ma, err1 := meta.Accessor(a)
	mb, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && ma.GetUID() == mb.GetUID()
}

// copyingWatch passes on the events of a watch of the tracker, each with a copy of its
// object. Unlike watch.Filter's, its Stop also ends a send that no one receives any
// more, so that a stopped watch leaves no goroutine behind.
type copyingWatch struct {
	source watch.Interface
	result chan watch.Event
	stop   chan struct{}
	halt   sync.Once
}

func newCopyingWatch(source watch.Interface) *copyingWatch {
	w := &copyingWatch{source: source, result: make(chan watch.Event), stop: make(chan struct{})}
	go w.copy()
	return w
}

func (w *copyingWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *copyingWatch) Stop() {
	w.halt.Do(func() {
		close(w.stop)
		w.source.Stop()
	})
}

func (w *copyingWatch) copy() {
	defer close(w.result)
	for e := range w.source.ResultChan() {
		if e.Object != nil {
			e.Object = e.Object.DeepCopyObject()
		}
		select {
		case w.result <- e:
		case <-w.stop:
			return
		}
	}
}
