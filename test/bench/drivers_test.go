package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	samplefake "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
	samplescheme "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/scheme"
)

// The limit's Event is the one our controller's recorder writes when it has created a
// Deployment, but for its name, times and reporting instance.
func TestCreatedEventIsTheRecorders(t *testing.T) {
	foo := newFoo("a", 1)
	foo.ResourceVersion = "5"
	d := reconcile.NewDeployment(foo)
	d.UID, d.ResourceVersion = "d-uid", "7"

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, samplescheme.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(t.Context().Done())
	defer broadcaster.Shutdown()
	broadcaster.NewRecorder(scheme, "sample-controller").
		Eventf(foo, d, corev1.EventTypeNormal, reconcile.EventDeploymentCreated, "Create", "Created Deployment %q", d.Name)

	var recorded []eventsv1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events(foo.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		recorded = list.Items
		return len(recorded) > 0, nil
	})
	if err != nil {
		t.Fatalf("the recorder wrote no Event: %v", err)
	}

	got := createdEvent(foo, d, time.Now())
	if !strings.HasPrefix(got.Name, "a.") || got.Namespace != foo.Namespace {
		t.Errorf("name %s/%s, want %s/a.<time>", got.Namespace, got.Name, foo.Namespace)
	}
	want := &recorded[0]
	for _, e := range []*eventsv1.Event{got, want} {
		e.TypeMeta, e.ObjectMeta = metav1.TypeMeta{}, metav1.ObjectMeta{}
		e.EventTime, e.ReportingInstance = metav1.MicroTime{}, ""
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("createdEvent =\n%s\nthe recorder's =\n%s", gotJSON, wantJSON)
	}
}

// A watching limit follows the spec changes its Foo informer sees, by the Foo's index,
// and not the status writes (its own) or Foos of other sessions.
func TestWatchingLimitFollowsSpecChanges(t *testing.T) {
	foos := []*samplev1alpha1.Foo{newFoo(fooName(0), 1), newFoo(fooName(1), 1)}
	stranger := newFoo("foo-1", 1) // an index's number, but no name of this session
	sample := samplefake.NewClientset(foos[0], foos[1], stranger)
	s := &session{foos: foos}
	run := &limitRun{s: s, watching: true, queue: workqueue.NewTyped[int](), latest: map[int]*samplev1alpha1.Foo{}}
	defer run.queue.ShutDown()
	var mu sync.Mutex
	var seen []string // the Foos the handler passed on, in order
	ctx, cancel := context.WithCancel(t.Context())
	stop, err := startInformers(ctx, fake.NewClientset(), sample, func(foo *samplev1alpha1.Foo) {
		mu.Lock()
		seen = append(seen, foo.Name)
		mu.Unlock()
		run.specChanged(foo)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	defer cancel() // first: the factories' Shutdown waits for their informers to end

	update := func(foo *samplev1alpha1.Foo) {
		t.Helper()
		if err := sample.Tracker().Update(samplev1alpha1.SchemeGroupVersion.WithResource("foos"), foo, foo.Namespace); err != nil {
			t.Fatal(err)
		}
	}
	update(withReadyStatus(foos[0], 1)) // a status write: the generation stays
	changed := foos[1].DeepCopy()
	changed.Generation, changed.Spec.Replicas = 2, ptr.To[int32](5)
	update(changed)
	strangerChanged := stranger.DeepCopy()
	strangerChanged.Generation = 2
	update(strangerChanged)

	// One handler gets the events in order: once it has the stranger's, it has had all.
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen, stranger.Name), nil
	}); err != nil {
		t.Fatalf("the handler saw %q, want the stranger's change too", seen)
	}
	if want := []string{fooName(1), stranger.Name}; !slices.Equal(seen, want) {
		t.Errorf("the handler passed on %q, want the spec changes %q", seen, want)
	}
	if n := run.queue.Len(); n != 1 {
		t.Fatalf("%d Foos queued, want 1", n)
	}
	i, _ := run.queue.Get()
	run.queue.Done(i)
	if got := run.latest[i]; i != 1 || *got.Spec.Replicas != 5 {
		t.Errorf("followed Foo %d with %d replicas, want Foo 1 with 5", i, *got.Spec.Replicas)
	}
}

// The plain limit follows each accepted patch from its response; the watching limit
// does not, its informer does (TestWatchingLimitFollowsSpecChanges).
// The restart case fills the informers and stops them while its session goes on:
// stopping must not wait for the session's context to end.
func TestInformersStopWhileTheContextLives(t *testing.T) {
	stop, err := startInformers(t.Context(), fake.NewClientset(), samplefake.NewClientset(), func(*samplev1alpha1.Foo) {})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("stop did not return within 30 s while the context lived")
	}
}

func TestOnlyThePlainLimitFollowsPatchResponses(t *testing.T) {
	for _, watching := range []bool{false, true} {
		foos := []*samplev1alpha1.Foo{newFoo(fooName(0), 1), newFoo(fooName(1), 1)}
		s := &session{cfg: config{reactionInflight: 2}, foos: foos, sample: samplefake.NewClientset(foos[0], foos[1])}
		s.limit = &limitRun{s: s, watching: watching, queue: workqueue.NewTyped[int](), latest: map[int]*samplev1alpha1.Foo{}}
		if err := s.sendChanges(t.Context(), newLatencyTracker(), 1000, 2); err != nil {
			t.Fatal(err)
		}
		want := 2
		if watching {
			want = 0
		}
		if got := s.limit.queue.Len(); got != want {
			t.Errorf("watching %v: %d Foos queued from the patches' responses, want %d", watching, got, want)
		}
		s.limit.queue.ShutDown()
	}
}
