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

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
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
	component   string
	sink        *countingSink
	stop        context.CancelFunc

	// recorded counts the Events the controller recorded, and queued those the
	// broadcaster has taken in. The recorder hands each Event over from a goroutine
	// of its own, and the broadcaster drops what comes after its shutdown.
	recorded, queued atomic.Int64
	// took is signalled (without blocking) each time the broadcaster takes one in.
	took chan struct{}
	once sync.Once
}

// Reasons an Event recorded was never written, for Start's dropped.
const (
	// DroppedTenureOver: its write was held back, the replica's tenure being over.
	DroppedTenureOver = "tenure_over"
	// DroppedShutdown: the shutdown's wait for it ended first.
	DroppedShutdown = "shutdown"
	// DroppedBacklog: maxWaiting Events were waiting for their turn already.
	DroppedBacklog = "backlog"
)

// maxWaiting is how many Events may wait for their turn to be written, beyond those in
// flight; the next one is dropped. Each waits in a goroutine of the broadcaster's,
// with its copy of the Event: with no bound, a cold start of 100000 Foos, whose
// Deployments come faster than their Events can be written, held 50000 of them at
// once (1.2 GB). client-go's broadcaster bounds its own queue at 1000 alike. A var for
// the tests.
var maxWaiting = 1000

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
		slots: make(chan struct{}, max(1, inFlight)),
	}
	recordCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	broadcaster := events.NewBroadcaster(sink)
	if err := broadcaster.StartRecordingToSinkWithContext(recordCtx); err != nil {
		stop()
		return nil, fmt.Errorf("starting the event recorder: %w", err)
	}
	r := &Recording{broadcaster: broadcaster, component: component, sink: sink, stop: stop, took: make(chan struct{}, 1)}
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
	return r, nil
}

// Recorder returns the recorder the controller reports through. The objects it
// reports on must be in client-go's scheme.Scheme.
func (r *Recording) Recorder() events.EventRecorder {
	return &countingRecorder{EventRecorder: r.broadcaster.NewRecorder(scheme.Scheme, r.component), count: &r.recorded}
}

// countingRecorder counts the Events recorded through it.
type countingRecorder struct {
	events.EventRecorder
	count *atomic.Int64
}

func (r *countingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.count.Add(1)
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
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
			logger.Info("Gave up waiting for Events to be queued", "recorded", r.recorded.Load(), "queued", r.queued.Load(), "timeout", timeout)
			for range r.recorded.Load() - r.queued.Load() {
				r.sink.dropped(DroppedShutdown)
			}
			r.broadcaster.Shutdown()
			return
		}
	}
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

	mu       sync.Mutex
	inFlight int
	written  int
	last     time.Time
	// idle is signalled (without blocking) each time the last write in flight ends.
	idle chan struct{}
}

// begin counts a write in flight, unless maxWaiting writes wait for a slot already.
func (s *countingSink) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight >= cap(s.slots)+maxWaiting {
		return false
	}
	s.inFlight++
	s.last = time.Now()
	return true
}

func (s *countingSink) end(written bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	if written {
		s.written++
	}
	s.last = time.Now()
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
	// In flight from here, for Shutdown, while it waits for a slot too; dropped, and
	// reported to the broadcaster as done, when too many wait already.
	if !s.begin() {
		s.dropped(DroppedBacklog)
		return event, nil
	}
	if !s.acquire(ctx) {
		// The recording was stopped: Shutdown gave up waiting for this one. Reported
		// to the broadcaster as done, which it would otherwise log as an error.
		s.end(false)
		s.dropped(DroppedShutdown)
		return event, nil
	}
	defer func() { <-s.slots }()
	if s.tenure != nil {
		ctx = tenure.NewContext(ctx, s.tenure)
	}
	written, err := do(ctx)
	s.end(err == nil)
	if errors.Is(err, tenure.ErrNotHeld) {
		klog.FromContext(ctx).V(2).Info("Dropped an Event: this replica's tenure is over", "reason", event.Reason, "regarding", klog.KRef(event.Regarding.Namespace, event.Regarding.Name))
		s.dropped(DroppedTenureOver)
		return event, nil
	}
	return written, err
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
