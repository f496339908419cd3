// Package eventrecording writes a controller's Events (events.k8s.io/v1): a bounded
// number at once, only inside the replica's tenure, fairly across namespaces, and on
// shutdown those recorded before it.
//
// client-go's events broadcaster would start a goroutine per Event, with no bound, and
// keep each Event for minutes to count repeats into a series. This controller's Events
// do not repeat (one per action or cause, referring to objects at their
// resourceVersion), so that cache only cost memory: 75 MB at a cold start of 100000
// Foos. Here Events wait in bounded queues, one per namespace, and a few workers write
// them, taking each namespace in turn: a storm of Events in one namespace delays
// another's by at most one write of each namespace with Events waiting.
package eventrecording

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// FlushTimeout is how long a controller's shutdown should wait for its last Events.
const FlushTimeout = 5 * time.Second

// Reasons an Event recorded was never written, for Start's dropped.
const (
	DroppedTenureOver  = "tenure_over" // held back (or left at shutdown), the tenure being over
	DroppedShutdown    = "shutdown"    // the shutdown's wait for it ended first
	DroppedBacklog     = "backlog"     // maxWaiting Events were waiting already, none in a longer queue
	DroppedUnreachable = "unreachable" // its write did not reach the API server maxTries times
	DroppedRefused     = "refused"     // the API server refused it
	// The shutdown's wait ended while its write was sent and not answered: the API
	// server may have written it.
	DroppedInterrupted = "interrupted"
)

// Vars for the tests. A write that does not reach the API server is tried maxTries
// times in all, about retryInterval apart, as client-go's broadcaster does. At most
// maxWaiting Events wait for a worker (a few hundred bytes each; a cold start of
// 100000 Foos had 50000 waiting at once); beyond, the newest Event of the longest
// queue is dropped, so that a storm in one namespace drops its own Events, not
// another's.
var (
	maxTries      = 12
	retryInterval = 10 * time.Second
	maxWaiting    = 100000
)

// Recording writes the controller's Events, oldest first, on a context of its own that
// the controller's cancellation does not reach; Shutdown ends it.
type Recording struct {
	client               eventsv1client.EventsV1Interface
	tenure               *tenure.Tenure
	dropped              func(reason string)
	controller, instance string
	ctx                  context.Context
	stop                 context.CancelFunc // ends the writes in flight
	once                 sync.Once

	mu sync.Mutex
	// more wakes the workers (an Event waits, or they are to quit); settled wakes
	// Shutdown (a write ended, or its wait did).
	more, settled *sync.Cond
	// queues holds the Events waiting, oldest first, by namespace; turns the
	// namespaces with Events waiting, in the order the workers take them.
	queues       map[string][]waitingEvent
	turns        []string
	waiting      int  // Events waiting, in all queues
	writing      int  // Events taken by a worker and not yet counted
	wrote        int  // Events written
	closed, quit bool // no more Events taken; the workers are to return
}

// waitingEvent is an Event recorded and not yet being written.
type waitingEvent struct {
	regarding, related              *corev1.ObjectReference
	eventtype, reason, action, note string
	at                              time.Time
}

// Start starts recording Events through client, as component, with at most inFlight
// writes in flight at once (at least one). With a tenure, Events are written only while
// it is valid (through a tenure.Gate in client). dropped, if set, is told each Event
// recorded and never written, with the reason.
func Start(ctx context.Context, client eventsv1client.EventsV1Interface, component string, leading *tenure.Tenure, dropped func(reason string), inFlight int) (*Recording, error) {
	if dropped == nil {
		dropped = func(string) {}
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming the Events' reporting instance: %w", err)
	}
	r := &Recording{client: client, tenure: leading, dropped: dropped, controller: component, instance: component + "-" + hostname, queues: map[string][]waitingEvent{}}
	// The writes carry the tenure (nil for none) to the gate in client.
	r.ctx, r.stop = context.WithCancel(tenure.NewContext(context.WithoutCancel(ctx), leading))
	r.more, r.settled = sync.NewCond(&r.mu), sync.NewCond(&r.mu)
	for range max(1, inFlight) {
		go r.work()
	}
	return r, nil
}

// Recorder returns the recorder to report through, about objects in scheme.Scheme.
func (r *Recording) Recorder() events.EventRecorder { return (*recorder)(r) }

type recorder Recording

// Eventf queues the Event, or drops it after Shutdown, or when maxWaiting wait already
// and its namespace's queue is the longest (else the newest of the longest is dropped
// for it). One the API server would refuse is refused here and logged, as client-go's
// is.
func (w *recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r := (*Recording)(w)
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		klog.Background().Error(nil, "Refused an Event of an unknown type", "type", eventtype, "reason", reason)
		return
	}
	e := waitingEvent{eventtype: eventtype, reason: reason, action: action, note: fmt.Sprintf(note, args...), at: time.Now()}
	var err error
	if e.regarding, err = reference.GetReference(scheme.Scheme, regarding); err != nil {
		klog.Background().Error(err, "Refused an Event: no reference to its object", "reason", reason)
		return
	}
	if related != nil { // written without it when it has no reference, as client-go does
		if e.related, err = reference.GetReference(scheme.Scheme, related); err != nil {
			klog.Background().V(4).Info("An Event's related object has no reference", "reason", reason, "err", err)
		}
	}
	ns := e.regarding.Namespace
	r.mu.Lock()
	closed, full := r.closed, !r.closed && r.waiting >= maxWaiting
	if !closed && (!full || r.evictLocked(ns)) {
		if len(r.queues[ns]) == 0 {
			r.turns = append(r.turns, ns)
		}
		r.queues[ns] = append(r.queues[ns], e)
		r.waiting++
		r.more.Signal()
	}
	r.mu.Unlock()
	switch {
	case closed:
		r.dropped(r.stopReason())
	case full:
		r.dropped(DroppedBacklog) // this Event, or the one evicted for it
	}
}

// evictLocked drops the newest Event of the longest queue, r.mu held, to make room for
// one of ns, and tells whether it did: not when ns's queue is the longest.
func (r *Recording) evictLocked(ns string) bool {
	longest := ns
	for other, q := range r.queues {
		if len(q) > len(r.queues[longest]) {
			longest = other
		}
	}
	if longest == ns {
		return false
	}
	q := r.queues[longest]
	q[len(q)-1] = waitingEvent{}
	r.queues[longest] = q[:len(q)-1] // never empty: longer than ns's
	r.waiting--
	return true
}

// work writes the oldest waiting Event of the namespace whose turn it is, one after
// another, until quit.
func (r *Recording) work() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for r.waiting == 0 && !r.quit {
			r.more.Wait()
		}
		if r.quit {
			return
		}
		ns := r.turns[0]
		r.turns[0] = ""
		r.turns = r.turns[1:]
		q := r.queues[ns]
		e := q[0]
		q[0] = waitingEvent{}
		if q = q[1:]; len(q) == 0 {
			delete(r.queues, ns) // and with it the array a storm grew
		} else {
			r.queues[ns] = q
			r.turns = append(r.turns, ns)
		}
		r.waiting--
		r.writing++
		r.mu.Unlock()
		reason := r.write(r.event(e))
		if reason != "" {
			r.dropped(reason) // counted before writing falls, for Shutdown's sake
		}
		r.mu.Lock()
		r.writing--
		if reason == "" {
			r.wrote++
		}
		r.settled.Broadcast()
	}
}

// event is the Event e records, as client-go's recorder makes it.
func (r *Recording) event(e waitingEvent) *eventsv1.Event {
	namespace := e.regarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(e.regarding.Name, e.at.UnixNano()), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(e.at),
		ReportingController: r.controller,
		ReportingInstance:   r.instance,
		Action:              e.action,
		Reason:              e.reason,
		Regarding:           *e.regarding,
		Related:             e.related,
		Note:                e.note,
		Type:                e.eventtype,
	}
}

// write writes event within the tenure, and returns why it was dropped, or "" once
// written. A write that does not reach the API server is tried again while the tenure
// lasts; an AlreadyExists on a retry means an earlier try was written.
func (r *Recording) write(event *eventsv1.Event) string {
	ctx := r.ctx
	logger := klog.FromContext(ctx).WithValues("reason", event.Reason, "regarding", klog.KRef(event.Regarding.Namespace, event.Regarding.Name))
	_, err := r.client.Events(event.Namespace).Create(ctx, event, metav1.CreateOptions{})
	for tries := 1; unreachable(err); tries++ {
		switch {
		case tries == maxTries:
			logger.Info("Dropped an Event: the API server was not reached", "tries", tries, "err", err)
			return DroppedUnreachable
		case r.tenure != nil && !r.tenure.Valid():
			return DroppedTenureOver
		}
		select {
		case <-time.After(wait.Jitter(retryInterval, 0.25)):
		case <-ctx.Done():
			return DroppedInterrupted // the last try went unanswered: it may be written
		}
		if _, err = r.client.Events(event.Namespace).Create(ctx, event, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			err = nil // an earlier try was written, its answer lost
		}
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, tenure.ErrHeldBack):
		logger.V(2).Info("Dropped an Event: this replica's tenure is over")
		return DroppedTenureOver
	case ctx.Err() != nil:
		return DroppedInterrupted // stopped by Shutdown before its answer came
	}
	logger.Error(err, "The API server refused an Event")
	return DroppedRefused
}

// Shutdown stops taking Events, waits up to timeout for those recorded to be written,
// then cancels the writes still going and drops what is left. Calls after the first
// return at once.
func (r *Recording) Shutdown(ctx context.Context, timeout time.Duration) {
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		if r.waitLocked(timeout, func() bool { return r.waiting == 0 && r.writing == 0 }) {
			klog.FromContext(ctx).V(2).Info("Events written", "count", r.wrote)
		} else {
			klog.FromContext(ctx).Info("Gave up waiting for Events to be written", "waiting", r.waiting, "writing", r.writing, "timeout", timeout)
		}
		// What is left is dropped for the reason that holds now, before the caller (a
		// leader releasing its Lease) changes it.
		reason, left := r.stopReason(), r.waiting
		r.queues, r.turns, r.waiting, r.quit = nil, nil, 0, true
		r.more.Broadcast()
		r.mu.Unlock()
		for range left {
			r.dropped(reason)
		}
		r.stop()
		r.mu.Lock() // a write to a server that does not answer may outlast its cancel
		r.waitLocked(time.Second, func() bool { return r.writing == 0 })
		r.mu.Unlock()
	})
}

// waitLocked waits, r.mu held, until done or d has passed, and tells whether done.
func (r *Recording) waitLocked(d time.Duration, done func() bool) bool {
	expired := false
	t := time.AfterFunc(d, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		expired = true
		r.settled.Broadcast()
	})
	defer t.Stop()
	for !done() && !expired {
		r.settled.Wait()
	}
	return done()
}

// stopReason is why an Event the recording's end kept from its write is dropped: the
// tenure being over, when it is (its gate would refuse the write), or the shutdown.
func (r *Recording) stopReason() string {
	if r.tenure != nil && !r.tenure.Valid() {
		return DroppedTenureOver
	}
	return DroppedShutdown
}

// unreachable tells whether err is a failure to reach the API server, worth retrying:
// not an answer of the server's, nor a request that could not be built, nor the gate.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, tenure.ErrHeldBack) {
		return false
	}
	var status apierrors.APIStatus
	var construction *rest.RequestConstructionError
	var unexpected *apierrors.UnexpectedObjectError
	return !errors.As(err, &status) && !errors.As(err, &construction) && !errors.As(err, &unexpected)
}

// pending is for the tests: the writes under way.
func (r *Recording) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writing
}

// written is for the tests: the Events written.
func (r *Recording) written() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wrote
}
