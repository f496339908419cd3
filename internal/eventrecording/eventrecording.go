// Package eventrecording writes a controller's Events (events.k8s.io/v1): a bounded
// number at once, only inside the replica's tenure, and on shutdown those recorded
// before it.
//
// It does for the controller what client-go's events broadcaster would, without what
// the broadcaster costs here. The broadcaster writes each Event from a goroutine of its
// own, with no bound, and keeps a copy of each for 6 to 12 minutes, to count an Event
// that repeats into a series. This controller records an Event once per action (a
// Deployment created, updated or deleted) and a Warning once per cause (a refusal, a
// holder of the Deployment name), and it refers to objects at their resourceVersion,
// which the broadcaster's series key includes: its Events do not repeat, and at a cold
// start of 100000 Foos the copies took 75 MB.
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

// FlushTimeout is how long a controller's shutdown should wait for its last Events to
// be written.
const FlushTimeout = 5 * time.Second

// Recording writes the controller's Events to the API server, oldest first, and on
// shutdown those of the syncs that finished before it returns: the writes run on a
// context of its own, which the signal that cancelled the controller's does not reach.
type Recording struct {
	sink *countingSink
	// reportingController and reportingInstance say who wrote each Event, as
	// client-go's recorder says it: the component, and the component on this host.
	reportingController, reportingInstance string
	// ctx is the writes', which stop ends.
	ctx  context.Context
	stop context.CancelFunc
	once sync.Once

	// waiting are the Events recorded and not yet being written, oldest first; the pump
	// starts their writes as the sink has room, and wake tells it there is one more.
	// pumped is closed when the pump has stopped, for good, after stopPump is closed.
	mu      sync.Mutex
	waiting []waitingEvent
	// closed is set by Shutdown once it stops taking Events.
	closed           bool
	wake             chan struct{}
	stopPump, pumped chan struct{}
	stopPumpOnce     sync.Once
	// idle, once WhileIdle sets it, tells when the writes may have idleBound in flight,
	// as they may once draining, when nothing records any more.
	idle      func() bool
	idleBound int
	draining  bool
}

// waitingEvent is an Event recorded and not yet being written: the objects reduced to
// references and the note formatted, a few hundred bytes.
type waitingEvent struct {
	regarding, related              *corev1.ObjectReference
	eventtype, reason, action, note string
	at                              time.Time
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
	// DroppedRefused: the API server refused it.
	DroppedRefused = "refused"
)

// An Event write that does not reach the API server (a lost connection, a timeout) is
// tried again retryInterval later, up to maxTries in all, as client-go's broadcaster
// does, while it holds its slot's turn: during an outage the Events behind it wait in
// the recording. Vars for the tests.
var (
	maxTries      = 12
	retryInterval = 10 * time.Second
)

// maxWaiting is how many Events may wait for their turn to be written; the next one is
// dropped. At a cold start the Deployments come faster than their Events can be
// written: at 10000 Foos here, 4700 Events waited at once, and at 100000, 50000. A
// waiting Event takes a few hundred bytes: 100000 are some 40 MB. A var for the tests.
var maxWaiting = 100000

// Start starts recording Events through client, as component, with at most inFlight
// of their writes in flight at once (at least one), so that at a cold start they do
// not compete with the Deployment writes they report. The recording outlives ctx;
// Shutdown ends it. With a tenure, the Events are written only while it is valid
// (through a tenure.Gate in client) and dropped otherwise: they belong to the syncs of
// that tenure. dropped, if set, is told each Event recorded and never written, with
// the reason (DroppedTenureOver, DroppedShutdown, DroppedBacklog, DroppedUnreachable,
// DroppedRefused).
func Start(ctx context.Context, client eventsv1client.EventsV1Interface, component string, held *tenure.Tenure, dropped func(reason string), inFlight int) (*Recording, error) {
	if dropped == nil {
		dropped = func(string) {}
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming the Events' reporting instance: %w", err)
	}
	sink := &countingSink{
		client: client, tenure: held, dropped: dropped, bound: max(1, inFlight),
		changed: make(chan struct{}, 1), idle: make(chan struct{}, 1),
	}
	writeCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &Recording{
		sink: sink, reportingController: component, reportingInstance: component + "-" + hostname,
		ctx: writeCtx, stop: stop,
		wake: make(chan struct{}, 1), stopPump: make(chan struct{}), pumped: make(chan struct{}),
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
	// The API server would refuse it: refused here, with the reason, as client-go's
	// recorder refuses it.
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
	if related != nil {
		// Written without it, as client-go's recorder writes it.
		if e.related, err = reference.GetReference(scheme.Scheme, related); err != nil {
			klog.Background().V(4).Info("An Event's related object has no reference", "reason", reason, "err", err)
		}
	}
	r.mu.Lock()
	closed, full := r.closed, len(r.waiting) >= maxWaiting
	if !closed && !full {
		r.waiting = append(r.waiting, e)
	}
	r.mu.Unlock()
	switch {
	case closed:
		// After Shutdown: nothing would write it.
		r.sink.dropped(r.sink.stopReason())
		return
	case full:
		r.sink.dropped(DroppedBacklog)
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// event is the Event e records, as client-go's recorder makes it: named for the object
// it regards and its time (or a UUID, where that would be too long a name), in that
// object's namespace.
func (r *Recording) event(e waitingEvent) *eventsv1.Event {
	namespace := e.regarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(e.regarding.Name, e.at.UnixNano()), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(e.at),
		ReportingController: r.reportingController,
		ReportingInstance:   r.reportingInstance,
		Action:              e.action,
		Reason:              e.reason,
		Regarding:           *e.regarding,
		Related:             e.related,
		Note:                e.note,
		Type:                e.eventtype,
	}
}

// pump starts the writes of the waiting Events, oldest first, while fewer than the
// bound (boundLocked) are pending, until stopPump is closed.
func (r *Recording) pump() {
	defer close(r.pumped)
	for {
		var wait <-chan struct{}
		r.mu.Lock()
		switch {
		case len(r.waiting) == 0:
			wait = r.wake
		case r.sink.pendingCount() >= r.boundLocked():
			// The next write that ends looks again: the bound may have risen
			// meanwhile.
			wait = r.sink.changed
		default:
			e := r.waiting[0]
			r.waiting[0] = waitingEvent{}
			r.waiting = r.waiting[1:]
			if len(r.waiting) == 0 {
				r.waiting = nil // lets go of the array a cold start grew
			}
			// Pending from here, under the lock that drain reads both under: an
			// Event is always either waiting or pending until it is done.
			r.sink.begin()
			go r.sink.write(r.ctx, r.event(e))
		}
		r.mu.Unlock()
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-r.stopPump:
			return
		}
	}
}

// haltPump stops the pump and waits for it; the Events still waiting stay so.
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
	logger := klog.FromContext(ctx)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// Nothing records any more: the writes may take the idle bound, and the pump,
	// which may be waiting at the busy one, looks again.
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	select {
	case r.sink.changed <- struct{}{}:
	default:
	}
	for {
		r.mu.Lock()
		waiting, pending := len(r.waiting), r.sink.pendingCount()
		r.mu.Unlock()
		if waiting == 0 && pending == 0 {
			_, written := r.sink.state()
			logger.V(2).Info("Events written", "count", written)
			break
		}
		select {
		case <-r.sink.idle:
			continue
		case <-time.After(10 * time.Millisecond):
			continue
		case <-deadline.C:
		}
		logger.Info("Gave up waiting for Events to be written", "waiting", waiting, "pending", pending, "timeout", timeout)
		break
	}
	r.mu.Lock()
	r.closed = true
	left := len(r.waiting)
	r.waiting = nil
	r.mu.Unlock()
	r.haltPump()
	// What still waits is dropped, and so are the writes still pending, which end once
	// stopped: all for the reason that holds now, before the caller (a leader
	// releasing its Lease) changes it.
	reason := r.sink.stopReason()
	for range left {
		r.sink.dropped(reason)
	}
	r.sink.stopping(reason)
	r.stop()
	if pending, _ := r.sink.state(); pending > 0 {
		select {
		case <-r.sink.idle:
		case <-time.After(stoppedWritesWait):
		}
	}
}

// WhileIdle raises the bound on the writes in flight to inFlight whenever idle says
// no more work waits that the Events would compete with (a controller's queue empty,
// its last syncs maybe under way), and during Shutdown, so that the Events left
// waiting at the end of a cold start are written as fast as the Deployments they
// report were. idle is called with the recording's lock held: it must not record.
func (r *Recording) WhileIdle(inFlight int, idle func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idle, r.idleBound = idle, max(r.sink.bound, inFlight)
}

// boundLocked is how many writes may be in flight now. r.mu must be held.
func (r *Recording) boundLocked() int {
	if r.idle != nil && (r.draining || r.idle()) {
		return r.idleBound
	}
	return r.sink.bound
}

// stoppedWritesWait bounds Shutdown's wait, after it gave up, for the writes it stopped
// to end: a write on a connection that does not answer ends only with its timeout.
const stoppedWritesWait = time.Second

// countingSink writes Events: it counts the writes pending and done, and holds them to
// a tenure. The pump keeps at most bound pending.
type countingSink struct {
	client  eventsv1client.EventsV1Interface
	tenure  *tenure.Tenure
	dropped func(reason string)
	bound   int
	// changed is signalled (without blocking) each time a write ends, and idle each
	// time the last one pending ends.
	changed, idle chan struct{}

	mu               sync.Mutex
	pending, written int
	// stoppedAs is the reason the writes stopped by Shutdown are dropped for.
	stoppedAs string
}

// stopping sets the reason the writes stopped from now on are dropped for.
func (s *countingSink) stopping(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stoppedAs = reason
}

// begin counts a write pending, until its end.
func (s *countingSink) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending++
}

// end counts a write done, written or not.
func (s *countingSink) end(written bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if written {
		s.written++
	}
	signal(s.changed)
	if s.pending == 0 {
		signal(s.idle)
	}
}

// signal signals c without blocking: a signal already waiting stands for both.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// pendingCount is how many writes are pending.
func (s *countingSink) pendingCount() int {
	pending, _ := s.state()
	return pending
}

// state returns the writes pending and those done.
func (s *countingSink) state() (pending, written int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.written
}

// write writes event within the tenure, begun, and ends it. A write that does not
// reach the API server is tried again, maxTries in all, about retryInterval apart,
// while the tenure lasts; one the tenure's gate held back is dropped, counted as such
// (not as written), since it could only be written in a tenure it does not belong to.
// A drop is counted before the write ends, so that Shutdown, once nothing is pending,
// has every count.
func (s *countingSink) write(ctx context.Context, event *eventsv1.Event) {
	logger := klog.FromContext(ctx).WithValues("reason", event.Reason, "regarding", klog.KRef(event.Regarding.Namespace, event.Regarding.Name))
	if s.tenure != nil {
		ctx = tenure.NewContext(ctx, s.tenure)
	}
	create := func() error {
		_, err := s.client.Events(event.Namespace).Create(ctx, event, metav1.CreateOptions{})
		return err
	}
	err := create()
	for tries := 1; unreachable(err); tries++ {
		switch {
		case tries == maxTries:
			logger.Info("Dropped an Event: the API server was not reached", "tries", tries, "err", err)
			s.drop(DroppedUnreachable)
			return
		case s.tenure != nil && !s.tenure.Valid():
			s.drop(DroppedTenureOver)
			return
		case !sleep(ctx, wait.Jitter(retryInterval, 0.25)):
			// Shutdown gave up waiting for this one.
			s.drop(s.stopped())
			return
		}
		if err = create(); apierrors.IsAlreadyExists(err) {
			err = nil // an earlier try was written, its answer lost
		}
	}
	switch {
	case err == nil:
		s.end(true)
	case errors.Is(err, tenure.ErrNotHeld):
		logger.V(2).Info("Dropped an Event: this replica's tenure is over")
		s.drop(DroppedTenureOver)
	case ctx.Err() != nil:
		s.drop(s.stopped())
	default:
		logger.Error(err, "The API server refused an Event")
		s.drop(DroppedRefused)
	}
}

// drop counts a write dropped for reason, and then its end.
func (s *countingSink) drop(reason string) {
	s.dropped(reason)
	s.end(false)
}

// stopped is the reason a write that Shutdown stopped is dropped for.
func (s *countingSink) stopped() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stoppedAs != "" {
		return s.stoppedAs
	}
	return DroppedShutdown
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
