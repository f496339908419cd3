// Package eventrecording records a controller's Events through client-go's events
// broadcaster, writes them only inside the replica's tenure, and on shutdown writes
// those recorded before it, which the broadcaster alone drops.
package eventrecording

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// FlushTimeout is how long a controller's shutdown should wait for its last Events to
// be written.
const FlushTimeout = 5 * time.Second

// settle is how long the sink must have been idle, with no write in flight, for
// shutdown to count every Event as written. client-go's broadcaster hands each Event to
// the sink from its own goroutine and offers no way to wait for them; once it is shut
// down, the Events still queued reach the sink within microseconds.
const settle = 100 * time.Millisecond

// Recording sends the controller's Events to the API server, and on shutdown
// writes those of the syncs that finished before it returns. client-go's broadcaster
// alone drops them: it writes on the context it was started with, which a signal has
// already cancelled when the last syncs finish.
type Recording struct {
	broadcaster events.EventBroadcaster
	sink        *countingSink
	stop        context.CancelFunc

	// recorded counts the Events the controller recorded, and queued those the
	// broadcaster has taken in. The recorder hands each Event over from a goroutine
	// of its own, and the broadcaster drops what comes after its shutdown.
	recorded, queued atomic.Int64
	// took is signalled (without blocking) each time the broadcaster takes one in.
	took chan struct{}
	once sync.Once

	// waiting are the Events recorded and not yet handed to the broadcaster, oldest
	// first; the pump hands them over as the sink has room (feedAhead), and wake tells
	// it there is one more. pumped is closed when the pump has stopped, for good, after
	// stopPump is closed.
	feed             events.EventRecorder
	mu               sync.Mutex
	waiting          []waitingEvent
	wake             chan struct{}
	stopPump, pumped chan struct{}
	stopPumpOnce     sync.Once
}

// waitingEvent is an Event recorded and not yet handed to the broadcaster: what Eventf
// was given, the objects reduced to references and the note formatted, so that one
// waiting costs a few hundred bytes, where one in the broadcaster costs a goroutine
// and two copies of the Event.
type waitingEvent struct {
	regarding, related              runtime.Object
	eventtype, reason, action, note string
}

// Reasons an Event recorded was never written, for Start's dropped.
const (
	// DroppedTenureOver: its write was held back, the replica's tenure being over.
	DroppedTenureOver = "tenure_over"
	// DroppedShutdown: the shutdown's wait for it ended first.
	DroppedShutdown = "shutdown"
	// DroppedBacklog: maxWaiting Events were waiting for their turn already.
	DroppedBacklog = "backlog"
	// DroppedUnreachable: its write failed to reach the API server maxTries times.
	DroppedUnreachable = "unreachable"
)

// An Event write that does not reach the API server (a lost connection, a timeout) is
// tried again retryInterval later, up to maxTries in all, as client-go's broadcaster
// does, but inside the sink, where it still counts as pending: the broadcaster's own
// retries would hold it outside, and during an outage the pump would hand every
// Event waiting to them. Vars for the tests.
var (
	maxTries      = 12
	retryInterval = 10 * time.Second
)

// maxWaiting is how many Events may wait for their turn to be written; the next one is
// dropped. At a cold start the Deployments come faster than their Events can be
// written: at 10000 Foos here, 4700 Events waited at once, and at 100000, 50000. They
// wait in the recording (waitingEvent, a few hundred bytes each: 100000 is some
// 40 MB), not in client-go's broadcaster, where each would hold a goroutine and two
// copies of the Event (50000 of them took 1.2 GB). A var for the tests.
var maxWaiting = 100000

// feedAhead is how many Events, per write the sink has in flight at most, the pump
// keeps handed to the broadcaster and not yet written: enough that a slot that frees
// finds the next Event waiting at the sink.
const feedAhead = 2

// pumpPoll bounds the pump's wait for the sink to change after it handed an Event
// over: an Event of a series the broadcaster already writes never reaches the sink.
const pumpPoll = 10 * time.Millisecond

// Start starts recording Events through client, as component, with at most inFlight
// of their writes in flight at once (at least one). client-go's broadcaster writes
// each Event from a goroutine of its own, with no bound: at a cold start, as many
// Events at once as syncs recorded, competing with the Deployment writes they report.
// The recording outlives ctx; Shutdown ends it. With a tenure, the Events are written
// only while it is valid (through a tenure.Gate in client) and dropped otherwise:
// they belong to the syncs of that tenure. dropped, if set, is told each Event
// recorded and never written, with the reason (DroppedTenureOver, DroppedShutdown,
// DroppedBacklog).
func Start(ctx context.Context, client eventsv1client.EventsV1Interface, component string, held *tenure.Tenure, dropped func(reason string), inFlight int) (*Recording, error) {
	if dropped == nil {
		dropped = func(string) {}
	}
	sink := &countingSink{
		EventSink: &events.EventSinkImpl{Interface: client}, tenure: held, idle: make(chan struct{}), dropped: dropped,
		slots: make(chan struct{}, max(1, inFlight)), changed: make(chan struct{}, 1),
	}
	recordCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	broadcaster := events.NewBroadcaster(sink)
	if err := broadcaster.StartRecordingToSinkWithContext(recordCtx); err != nil {
		stop()
		return nil, fmt.Errorf("starting the event recorder: %w", err)
	}
	r := &Recording{
		broadcaster: broadcaster, sink: sink, stop: stop, took: make(chan struct{}, 1),
		feed: broadcaster.NewRecorder(scheme.Scheme, component),
		wake: make(chan struct{}, 1), stopPump: make(chan struct{}), pumped: make(chan struct{}),
	}
	if _, err := broadcaster.StartEventWatcher(func(runtime.Object) {
		r.queued.Add(1)
		select {
		case r.took <- struct{}{}:
		default:
		}
	}); err != nil {
		stop()
		return nil, fmt.Errorf("watching the event recorder: %w", err)
	}
	go r.pump()
	return r, nil
}

// Recorder returns the recorder the controller reports through. The objects it
// reports on must be in client-go's scheme.Scheme.
func (r *Recording) Recorder() events.EventRecorder {
	return (*waitingRecorder)(r)
}

// waitingRecorder records an Event by putting it at the end of the recording's
// waiting Events, or dropping it when maxWaiting wait already.
type waitingRecorder Recording

func (w *waitingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r := (*Recording)(w)
	select {
	case <-r.pumped:
		// After Shutdown: nothing would hand it over.
		r.sink.dropped(r.sink.stopReason())
		return
	default:
	}
	// What the broadcaster's recorder would refuse, and only log, is refused here,
	// before it counts as recorded: Shutdown would wait for it in vain.
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		klog.Background().Error(nil, "Refused an Event of an unknown type", "type", eventtype, "reason", reason)
		return
	}
	e := waitingEvent{eventtype: eventtype, reason: reason, action: action, note: fmt.Sprintf(note, args...)}
	var err error
	if e.regarding, err = reference.GetReference(scheme.Scheme, regarding); err == nil && related != nil {
		e.related, err = reference.GetReference(scheme.Scheme, related)
	}
	if err != nil {
		klog.Background().Error(err, "Refused an Event: no reference to its object", "reason", reason)
		return
	}
	r.recorded.Add(1)
	r.mu.Lock()
	full := len(r.waiting) >= maxWaiting
	if !full {
		r.waiting = append(r.waiting, e)
	}
	r.mu.Unlock()
	if full {
		// Never handed over: counted as taken in, so that Shutdown does not wait for it.
		r.queued.Add(1)
		r.sink.dropped(DroppedBacklog)
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pump hands the waiting Events to the broadcaster, oldest first, while the sink has
// fewer than feedAhead per slot in flight, until stopPump is closed.
func (r *Recording) pump() {
	defer close(r.pumped)
	ahead := feedAhead * cap(r.sink.slots)
	for {
		r.mu.Lock()
		var next *waitingEvent
		if len(r.waiting) > 0 {
			e := r.waiting[0]
			next = &e
		}
		r.mu.Unlock()
		var wait <-chan struct{}
		var poll <-chan time.Time
		switch {
		case next == nil:
			wait = r.wake
		case r.sink.pending() >= ahead:
			wait = r.sink.changed
		default:
			r.feed.Eventf(next.regarding, next.related, next.eventtype, next.reason, next.action, "%s", next.note)
			r.mu.Lock()
			r.waiting[0] = waitingEvent{}
			r.waiting = r.waiting[1:]
			if len(r.waiting) == 0 {
				r.waiting = nil // lets go of the array a cold start grew
			}
			r.mu.Unlock()
			// Until the sink has it (or for an Event of a series, which it never will).
			wait, poll = r.sink.changed, time.After(pumpPoll)
		}
		select {
		case <-wait:
		case <-poll:
		case <-r.stopPump:
			return
		}
	}
}

// haltPump stops the pump and waits for it; the Events still waiting stay unhanded.
func (r *Recording) haltPump() {
	r.stopPumpOnce.Do(func() { close(r.stopPump) })
	<-r.pumped
}

// Shutdown stops taking Events, and waits up to timeout for those already recorded to
// be written. Call it once nothing records any more; calls after the first return at
// once.
func (r *Recording) Shutdown(ctx context.Context, timeout time.Duration) {
	r.once.Do(func() { r.drain(ctx, timeout) })
}

// drain is Shutdown's, once.
func (r *Recording) drain(ctx context.Context, timeout time.Duration) {
	defer r.stop()
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(timeout)
	// Every Event recorded must be in the broadcaster before it shuts down.
	for r.queued.Load() < r.recorded.Load() {
		select {
		case <-r.took:
		case <-time.After(time.Until(deadline)):
			r.haltPump()
			logger.Info("Gave up waiting for Events to be queued", "recorded", r.recorded.Load(), "queued", r.queued.Load(), "timeout", timeout)
			reason := r.sink.stopReason()
			for range r.recorded.Load() - r.queued.Load() {
				r.sink.dropped(reason)
			}
			r.broadcaster.Shutdown()
			return
		}
	}
	// Every Event waiting has been handed over: the pump has no more to do.
	r.haltPump()
	// Hands every queued Event to the recording goroutine.
	r.broadcaster.Shutdown()
	handed := time.Now()
	for {
		written, inFlight, quiet := r.sink.state()
		// Events handed over just now may not have reached the sink yet.
		quiet = min(quiet, time.Since(handed))
		if inFlight == 0 && quiet >= settle {
			logger.V(2).Info("Events written", "count", written)
			return
		}
		if time.Now().After(deadline) {
			logger.Info("Gave up waiting for Events to be written", "inFlight", inFlight, "timeout", timeout)
			return
		}
		wait := settle - quiet
		if inFlight > 0 {
			wait = 10 * time.Millisecond
		}
		select {
		case <-time.After(wait):
		case <-r.sink.idle:
		}
	}
}

// countingSink is an EventSink that knows how many writes are in flight and when the
// last one ended, bounds how many are sent at once, and holds its writes to a tenure.
type countingSink struct {
	events.EventSink
	tenure  *tenure.Tenure
	dropped func(reason string)
	// slots holds a token for each write in flight: its capacity is the bound.
	slots chan struct{}
	// changed is signalled (without blocking) each time a write begins or ends.
	changed chan struct{}

	mu       sync.Mutex
	inFlight int
	written  int
	last     time.Time
	// idle is signalled (without blocking) each time the last write in flight ends.
	idle chan struct{}
}

// begin counts a write in flight, from its wait for a slot on.
func (s *countingSink) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight++
	s.last = time.Now()
	s.signalChanged()
}

func (s *countingSink) signalChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// pending is how many writes are in flight, or waiting for a slot.
func (s *countingSink) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

func (s *countingSink) end(written bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	if written {
		s.written++
	}
	s.last = time.Now()
	s.signalChanged()
	if s.inFlight == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// state returns the writes done, those in flight, and how long the sink has been idle.
func (s *countingSink) state() (written, inFlight int, quiet time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.inFlight, time.Since(s.last)
}

// write makes one write of the sink within the tenure. A write the tenure's gate held
// back is dropped, counted as such (not as written), and reported to the broadcaster
// as done: it would retry any other error, 12 times 10 s apart, and could write the
// Event in a tenure it does not belong to.
func (s *countingSink) write(ctx context.Context, event *eventsv1.Event, do func(context.Context) (*eventsv1.Event, error)) (*eventsv1.Event, error) {
	// In flight from here, for Shutdown, while it waits for a slot too.
	s.begin()
	if !s.acquire(ctx) {
		// The recording was stopped: Shutdown gave up waiting for this one. Reported
		// to the broadcaster as done, which it would otherwise log as an error.
		s.end(false)
		s.dropped(s.stopReason())
		return event, nil
	}
	if s.tenure != nil {
		ctx = tenure.NewContext(ctx, s.tenure)
	}
	written, err := do(ctx)
	for tries := 1; unreachable(err); tries++ {
		<-s.slots // others may try meanwhile
		if tries == maxTries {
			s.end(false)
			klog.FromContext(ctx).Info("Dropped an Event: the API server was not reached", "tries", tries, "reason", event.Reason, "regarding", klog.KRef(event.Regarding.Namespace, event.Regarding.Name), "err", err)
			s.dropped(DroppedUnreachable)
			return event, nil
		}
		if !sleep(ctx, retryInterval) || !s.acquire(ctx) {
			s.end(false)
			s.dropped(s.stopReason())
			return event, nil
		}
		written, err = do(ctx)
	}
	<-s.slots
	s.end(err == nil)
	if errors.Is(err, tenure.ErrNotHeld) {
		klog.FromContext(ctx).V(2).Info("Dropped an Event: this replica's tenure is over", "reason", event.Reason, "regarding", klog.KRef(event.Regarding.Namespace, event.Regarding.Name))
		s.dropped(DroppedTenureOver)
		return event, nil
	}
	return written, err
}

// stopReason is why an Event that the recording's end kept from its write is dropped:
// the replica's tenure being over, when it is (the gate would refuse the write), or the
// shutdown.
func (s *countingSink) stopReason() string {
	if s.tenure != nil && !s.tenure.Valid() {
		return DroppedTenureOver
	}
	return DroppedShutdown
}

// unreachable tells whether err is a write's failure to reach the API server, which
// client-go's broadcaster would retry: not an answer of the server's, nor a request
// that could not be built, nor the tenure's gate.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, tenure.ErrNotHeld) {
		return false
	}
	var status apierrors.APIStatus
	var construction *rest.RequestConstructionError
	var unexpected *apierrors.UnexpectedObjectError
	return !errors.As(err, &status) && !errors.As(err, &construction) && !errors.As(err, &unexpected)
}

// sleep waits d, and tells whether ctx lived that long.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// acquire waits for a slot to write in, and tells whether it got one before ctx ended.
func (s *countingSink) acquire(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case s.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *countingSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, event, func(ctx context.Context) (*eventsv1.Event, error) { return s.EventSink.Create(ctx, event) })
}

func (s *countingSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, event, func(ctx context.Context) (*eventsv1.Event, error) { return s.EventSink.Update(ctx, event) })
}

func (s *countingSink) Patch(ctx context.Context, event *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.write(ctx, event, func(ctx context.Context) (*eventsv1.Event, error) { return s.EventSink.Patch(ctx, event, data) })
}
