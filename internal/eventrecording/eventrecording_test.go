package eventrecording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// TestShutdownWritesEverything records Events for many objects, cancels the context
// as a signal does, and checks that shutdown returns only once every Event is written,
// although each write is slow. The API server is an HTTP server, which sees a request
// end when its context does.
func TestShutdownWritesEverything(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	client, written, _ := slowServer(t, 50*time.Millisecond)
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	recorder := recording.Recorder()

	const n = 20
	recordCreated(recorder, n)
	cancel() // SIGTERM
	start := time.Now()
	recording.Shutdown(ctx, 5*time.Second)
	if got := written.Load(); got != n {
		t.Errorf("%d of %d Events written when shutdown returned after %v", got, n, time.Since(start))
	}
}

// TestWritesPendingAtTheDeadlineAreDropped checks that when shutdown gives up, the
// write it stopped is counted as interrupted (it may have been written) and the Event
// still waiting as dropped at shutdown, by the time it returns.
func TestWritesPendingAtTheDeadlineAreDropped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	done := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // never answers
		case <-r.Context().Done():
		case <-done:
		}
	}))
	defer server.Close()
	defer close(done) // before Close, which waits for the handlers

	client, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"written-forever", "waiting"} {
		recording.Recorder().Eventf(newPod(name), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	}
	recording.Shutdown(ctx, 300*time.Millisecond)
	if got := dropped.get(); len(got) != 2 || got[DroppedShutdown] != 1 || got[DroppedInterrupted] != 1 {
		t.Errorf("dropped %v when shutdown returned, want 1 at shutdown and 1 interrupted", got)
	}
}

// TestShutdownIsBounded checks that an API server that never answers
// does not hold shutdown past its timeout.
func TestShutdownIsBounded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, release := blockedClient()
	defer close(release)
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	recording.Recorder().Eventf(newPod("web"), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	start := time.Now()
	recording.Shutdown(ctx, 300*time.Millisecond)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("shutdown took %v with a 300ms timeout", took)
	}
}

// TestEventsWaitingAtShutdownAreDropped checks that Events still waiting for their
// turn to be written when shutdown gives up are counted as dropped at shutdown.
func TestEventsWaitingAtShutdownAreDropped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, release := blockedClient()
	defer close(release)
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 // one written forever, two waiting behind it
	recordCreated(recording.Recorder(), n)
	recording.Shutdown(ctx, 300*time.Millisecond)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return dropped.get()[DroppedShutdown] == n-1, nil
	}); err != nil {
		t.Errorf("dropped %v, want %d at shutdown", dropped.get(), n-1)
	}
}

// TestEventsWaitingAfterTheTenureAreDroppedAsSuch checks that Events still waiting when
// shutdown gives up, the replica's tenure being over by then, are counted as dropped
// for the tenure, whose gate would refuse them, not for the shutdown.
func TestEventsWaitingAfterTheTenureAreDroppedAsSuch(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, release := blockedClient()
	defer close(release)
	dropped := &droppedCounts{}
	over := tenure.New(clock.RealClock{}) // never extended: not valid
	recording, err := Start(ctx, client.EventsV1(), "test-controller", over, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 // one written forever, two waiting behind it
	recordCreated(recording.Recorder(), n)
	recording.Shutdown(ctx, 300*time.Millisecond)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return dropped.get()[DroppedTenureOver] == n-1, nil
	}); err != nil || dropped.get()[DroppedShutdown] != 0 {
		t.Errorf("dropped %v, want %d as %s and none as %s", dropped.get(), n-1, DroppedTenureOver, DroppedShutdown)
	}
	recording.Recorder().Eventf(newPod("late"), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	if got := dropped.get()[DroppedTenureOver]; got != n {
		t.Errorf("an Event recorded after shutdown: %d dropped as %s, want %d", got, DroppedTenureOver, n)
	}
}

// TestBacklogIsBounded checks that Events wait in the recording while the writes in
// flight are stuck: no more than the bound are pending; beyond maxWaiting the next are
// dropped, counted as such; once the writes go through, every Event that waited is
// written.
func TestBacklogIsBounded(t *testing.T) {
	defer func(old int) { maxWaiting = old }(maxWaiting)
	maxWaiting = 5
	_, ctx := ktesting.NewTestContext(t)
	var written atomic.Int32
	client, release := blockedClient()
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		written.Add(1)
		return false, nil, nil
	})
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	record := func(name string) {
		recording.Recorder().Eventf(newPod(name), nil, corev1.EventTypeNormal, "Created", "Create", "Created %q", name)
	}
	record("first") // its write stuck
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return recording.pending() == 1, nil
	}); err != nil {
		t.Fatalf("%d Events pending, want 1", recording.pending())
	}
	const n = 9 // five waiting in the recording, four dropped
	for i := range n {
		record(fmt.Sprintf("web-%d", i))
	}
	if got := dropped.get(); got[DroppedBacklog] != n-maxWaiting || len(got) != 1 {
		t.Errorf("dropped %v, want %d for the backlog", got, n-maxWaiting)
	}
	time.Sleep(50 * time.Millisecond)
	if got := recording.pending(); got != 1 {
		t.Errorf("%d Events pending with the writes stuck, want 1: the rest wait in the recording", got)
	}
	close(release)
	recording.Shutdown(ctx, 5*time.Second)
	if got, want := int(written.Load()), 1+maxWaiting; got != want {
		t.Errorf("%d Events written, want %d: every one that was not dropped", got, want)
	}
	if got := dropped.get(); len(got) != 1 || got[DroppedBacklog] != n-maxWaiting {
		t.Errorf("dropped %v after every write was let through, want only the %d of the backlog", got, n-maxWaiting)
	}
}

// TestEventsAreFairAcrossNamespaces checks that a storm of Events in one namespace
// neither drops another namespace's Events nor delays them behind its own: when the
// waiting are at the bound, the storm's newest make room, and the workers take each
// namespace in turn.
func TestEventsAreFairAcrossNamespaces(t *testing.T) {
	defer func(old int) { maxWaiting = old }(maxWaiting)
	maxWaiting = 10
	_, ctx := ktesting.NewTestContext(t)
	client, release := k8sfake.NewClientset(), make(chan struct{})
	var mu sync.Mutex
	var order []string
	client.PrependReactor("create", "events", func(action core.Action) (bool, runtime.Object, error) {
		<-release
		e := action.(core.CreateAction).GetObject().(*eventsv1.Event)
		mu.Lock()
		order = append(order, e.Namespace+"/"+e.Regarding.Name)
		mu.Unlock()
		return false, nil, nil
	})
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	record := func(ns, name string) {
		pod := newPod(name)
		pod.Namespace = ns
		recording.Recorder().Eventf(pod, nil, corev1.EventTypeNormal, "Created", "Create", "Created %q", name)
	}
	record("storm", "stuck") // its write waits for release
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return recording.pending() == 1, nil
	}); err != nil {
		t.Fatalf("%d Events pending, want 1", recording.pending())
	}
	for i := range maxWaiting {
		record("storm", fmt.Sprintf("storm-%d", i))
	}
	record("quiet", "quiet-0")
	record("quiet", "quiet-1")
	record("storm", "storm-late") // the storm's queue is the longest: dropped
	if got := dropped.get(); len(got) != 1 || got[DroppedBacklog] != 3 {
		t.Errorf("dropped %v, want 3 for the backlog: the storm's two newest and its late one", got)
	}
	close(release)
	recording.Shutdown(ctx, 5*time.Second)
	want := []string{"storm/stuck", "storm/storm-0", "quiet/quiet-0", "storm/storm-1", "quiet/quiet-1",
		"storm/storm-2", "storm/storm-3", "storm/storm-4", "storm/storm-5", "storm/storm-6", "storm/storm-7"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Errorf("written in the order %q, want %q", order, want)
	}
}

// TestUnreachableWritesAreRetried checks that a write that does not reach the API
// server is tried again by its worker, where it still counts as pending (so that no
// more writes start meanwhile), and dropped after maxTries, counted as
// unreachable.
func TestUnreachableWritesAreRetried(t *testing.T) {
	defer func(tries int, interval time.Duration) { maxTries, retryInterval = tries, interval }(maxTries, retryInterval)
	maxTries, retryInterval = 3, 20*time.Millisecond
	_, ctx := ktesting.NewTestContext(t)
	var failures, tries atomic.Int32
	failures.Store(2) // the first Event's first two tries
	client := k8sfake.NewClientset()
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		tries.Add(1)
		if failures.Add(-1) >= 0 {
			return true, nil, errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
		}
		return false, nil, nil
	})
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	recording.Recorder().Eventf(newPod("web"), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		written := recording.written()
		return written == 1, nil
	}); err != nil {
		t.Fatalf("the Event was not written after its first two tries failed: %d tries, dropped %v", tries.Load(), dropped.get())
	}
	if got := tries.Load(); got != 3 {
		t.Errorf("%d tries, want 3", got)
	}

	// The API server gone for good: every Event is tried maxTries times, then dropped;
	// no more than the bound are pending meanwhile, and the rest wait.
	failures.Store(1 << 30)
	tries.Store(0)
	const n = 12
	for i := range n {
		recording.Recorder().Eventf(newPod(fmt.Sprintf("web-%d", i)), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	}
	most := 0
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		most = max(most, recording.pending())
		return dropped.get()[DroppedUnreachable] == n, nil
	}); err != nil {
		t.Fatalf("dropped %v, want %d unreachable", dropped.get(), n)
	}
	if got := tries.Load(); got != n*int32(maxTries) {
		t.Errorf("%d tries, want %d: %d for each of %d Events", got, n*maxTries, maxTries, n)
	}
	if most > 1 {
		t.Errorf("%d writes pending at once, want at most the bound, 1", most)
	}
	recording.Shutdown(ctx, 5*time.Second)
	if got := dropped.get(); len(got) != 1 {
		t.Errorf("dropped %v, want only unreachable ones", got)
	}
}

// TestRefusedEventsDoNotHoldShutdown records Events that cannot be written (an unknown
// type, an object without a reference) beside a good one: they are refused when
// recorded, and Shutdown does not wait for them.
func TestRefusedEventsDoNotHoldShutdown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var written atomic.Int32
	client := k8sfake.NewClientset()
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		written.Add(1)
		return false, nil, nil
	})
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	recording.Recorder().Eventf(newPod("typed"), nil, "Bogus", "Created", "Create", "Created")
	recording.Recorder().Eventf(&unregistered{ObjectMeta: metav1.ObjectMeta{Name: "unknown"}}, nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	recording.Recorder().Eventf(newPod("good"), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	began := time.Now()
	recording.Shutdown(ctx, 5*time.Second)
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Shutdown took %v", took)
	}
	if got := written.Load(); got != 1 {
		t.Errorf("%d Events written, want the good one", got)
	}
}

// TestEventsHeldBackAreDropped records Events whose writes the tenure's gate holds
// back, the replica's tenure being over: each is counted as dropped, with its reason,
// and none as written.
func TestEventsHeldBackAreDropped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset()
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("POST events: %w", tenure.ErrHeldBack)
	})
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 4)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	recordCreated(recording.Recorder(), n)
	recording.Shutdown(ctx, 5*time.Second)
	if got := dropped.get(); got[DroppedTenureOver] != n || len(got) != 1 {
		t.Errorf("dropped %v, want %d %s", got, n, DroppedTenureOver)
	}
	if written := recording.written(); written != 0 {
		t.Errorf("%d Events counted as written, want 0", written)
	}
}

// TestEventsAreWrittenAsTheRecorderMakesThem checks what an Event written says: the
// fields client-go's recorder fills, its time the time it was recorded, and no series.
func TestEventsAreWrittenAsTheRecorderMakesThem(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset()
	var sent []*eventsv1.Event
	client.PrependReactor("create", "events", func(action core.Action) (bool, runtime.Object, error) {
		sent = append(sent, action.(core.CreateAction).GetObject().(*eventsv1.Event).DeepCopy())
		return false, nil, nil
	})
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	regarding, related := newPod("web"), newPod("other")
	regarding.ResourceVersion = "7"
	before := time.Now()
	recording.Recorder().Eventf(regarding, related, corev1.EventTypeWarning, "Taken", "Sync", "Name %q is taken", "web")
	after := time.Now()
	recording.Shutdown(ctx, 5*time.Second)

	if len(sent) != 1 {
		t.Fatalf("%d Events written, want 1", len(sent))
	}
	got := *sent[0]
	hostname, _ := os.Hostname()
	want := eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("web.%x", got.EventTime.UnixNano()), Namespace: "default"},
		EventTime:           got.EventTime,
		ReportingController: "test-controller",
		ReportingInstance:   "test-controller-" + hostname,
		Action:              "Sync",
		Reason:              "Taken",
		Regarding:           corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "web", UID: "web", ResourceVersion: "7"},
		Related:             &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "other", UID: "other"},
		Note:                `Name "web" is taken`,
		Type:                corev1.EventTypeWarning,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Event written (-want +got):\n%s", diff)
	}
	if at := got.EventTime.Time; at.Before(before.Truncate(time.Microsecond)) || at.After(after) {
		t.Errorf("eventTime %v, want the time it was recorded, between %v and %v", at, before, after)
	}
}

// TestRefusedWritesAreDropped checks that an Event the API server refuses is counted
// as dropped, as refused, and not tried again.
func TestRefusedWritesAreDropped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var tries atomic.Int32
	client := k8sfake.NewClientset()
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		tries.Add(1)
		return true, nil, apierrors.NewInvalid(eventsv1.SchemeGroupVersion.WithKind("Event").GroupKind(), "web.1", nil)
	})
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	recording.Recorder().Eventf(newPod("web"), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	recording.Shutdown(ctx, 5*time.Second)
	if got := dropped.get(); len(got) != 1 || got[DroppedRefused] != 1 {
		t.Errorf("dropped %v, want 1 %s", got, DroppedRefused)
	}
	if got := tries.Load(); got != 1 {
		t.Errorf("%d tries, want 1", got)
	}
}

// TestLongNamesGetEvents records an Event about an object whose name leaves no room
// for the Event's time: its name is still one the API server accepts.
func TestLongNamesGetEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset()
	var names []string
	client.PrependReactor("create", "events", func(action core.Action) (bool, runtime.Object, error) {
		names = append(names, action.(core.CreateAction).GetObject().(*eventsv1.Event).Name)
		return false, nil, nil
	})
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	recording.Recorder().Eventf(newPod(strings.Repeat("a", 250)), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	recording.Shutdown(ctx, 5*time.Second)
	if len(names) != 1 {
		t.Fatalf("%d Events written, want 1", len(names))
	}
	if errs := validation.NameIsDNSSubdomain(names[0], false); len(errs) > 0 {
		t.Errorf("Event name %q: %v", names[0], errs)
	}
}

// TestAnEarlierTryWrittenCountsAsWritten: a write whose answer was lost, and whose
// retry finds the Event there already, counts as written.
func TestAnEarlierTryWrittenCountsAsWritten(t *testing.T) {
	defer func(interval time.Duration) { retryInterval = interval }(retryInterval)
	retryInterval = 10 * time.Millisecond
	_, ctx := ktesting.NewTestContext(t)
	var tries atomic.Int32
	client := k8sfake.NewClientset()
	client.PrependReactor("create", "events", func(action core.Action) (bool, runtime.Object, error) {
		if tries.Add(1) == 1 {
			return true, nil, errors.New("http2: client connection lost") // after the server wrote it
		}
		name := action.(core.CreateAction).GetObject().(*eventsv1.Event).Name
		return true, nil, apierrors.NewAlreadyExists(eventsv1.Resource("events"), name)
	})
	dropped := &droppedCounts{}
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, dropped.add, 1)
	if err != nil {
		t.Fatal(err)
	}
	recording.Recorder().Eventf(newPod("web"), nil, corev1.EventTypeNormal, "Created", "Create", "Created")
	recording.Shutdown(ctx, 5*time.Second)
	if written := recording.written(); written != 1 || len(dropped.get()) != 0 || tries.Load() != 2 {
		t.Errorf("%d written, dropped %v, in %d tries; want 1 written, none dropped, in 2 tries", written, dropped.get(), tries.Load())
	}
}

// TestEventWritesAreBounded records many Events at once against an API server whose
// every answer is slow, and checks that no more than the bound are ever in flight
// together, and that every one is written. (The fake clientset runs its reactors one
// at a time, so this takes an HTTP server.)
func TestEventWritesAreBounded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, written, most := slowServer(t, 20*time.Millisecond)
	const bound, n = 3, 30
	recording, err := Start(ctx, client.EventsV1(), "test-controller", nil, nil, bound)
	if err != nil {
		t.Fatal(err)
	}
	recordCreated(recording.Recorder(), n)
	recording.Shutdown(ctx, 10*time.Second)
	if got := written.Load(); got != n {
		t.Errorf("%d of %d Events written", got, n)
	}
	if got := most.Load(); got > bound || got < 2 {
		t.Errorf("at most %d Event writes were in flight together, want 2 to %d", got, bound)
	}
}

// slowServer is an API server that answers every request after delay, as if it had
// written what was sent, and counts the writes and the most in flight at once.
func slowServer(t *testing.T, delay time.Duration) (client kubernetes.Interface, written, most *atomic.Int32) {
	var inFlight atomic.Int32
	written, most = &atomic.Int32{}, &atomic.Int32{}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for seen := most.Load(); now > seen && !most.CompareAndSwap(seen, now); seen = most.Load() {
		}
		body, _ := io.ReadAll(r.Body)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		written.Add(1)
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body) // the Event as sent
	}))
	t.Cleanup(server.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return client, written, most
}

// droppedCounts counts the Events Start's dropped is told of, by reason.
type droppedCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

func (d *droppedCounts) add(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]int{}
	}
	d.counts[reason]++
}

// get is a copy of the counts so far.
func (d *droppedCounts) get() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.counts)
}

// blockedClient is a clientset whose Event creates wait until release is closed.
func blockedClient() (client *k8sfake.Clientset, release chan struct{}) {
	client, release = k8sfake.NewClientset(), make(chan struct{})
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	return client, release
}

// unregistered is an object of a kind no scheme knows: the recorder cannot refer to it.
type unregistered struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func (u *unregistered) DeepCopyObject() runtime.Object {
	c := *u
	return &c
}

// recordCreated records a Created Event about each of n Pods, web-0 to web-<n-1>.
func recordCreated(recorder events.EventRecorder, n int) {
	for i := range n {
		pod := newPod(fmt.Sprintf("web-%d", i))
		recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Created", "Create", "Created %q", pod.Name)
	}
}

func newPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)}}
}
