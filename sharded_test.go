package main

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
)

// TestSlotWatch: a slot's controller keeps only its own Foos, whatever the apiserver
// sends (it ignores shard selectors without ShardedListAndWatch), and labels the
// Deployments it writes with the slot.
func TestSlotWatch(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	space, err := slots.NewSpace(4)
	if err != nil {
		t.Fatal(err)
	}
	scope, err := newSlotWatch(space, 2)
	if err != nil {
		t.Fatal(err)
	}
	mine, others := 0, 0
	for range 200 {
		foo := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "f", UID: uuid.NewUUID()}}
		if got, want := scope.inSlot(logger, foo), space.Of(foo.UID) == 2; got != want {
			t.Fatalf("owns(Foo of slot %d) = %v", space.Of(foo.UID), got)
		} else if got {
			mine++
		} else {
			others++
		}
	}
	if mine == 0 || others == 0 || !scope.outside.Load() {
		t.Errorf("%d Foos of the slot, %d of others, said so: %v", mine, others, scope.outside.Load())
	}

	labels := map[string]string{SlotLabel: scope.value}
	d := &appsv1.Deployment{}
	if !setLabels(d, labels) || d.Labels[SlotLabel] != "2" {
		t.Errorf("labels %v after labelling, want %s=2", d.Labels, SlotLabel)
	}
	if setLabels(d, labels) {
		t.Error("labelling a labelled Deployment changed it")
	}
	d.Labels[SlotLabel] = "3"
	if !setLabels(d, labels) || d.Labels[SlotLabel] != "2" {
		t.Errorf("a Deployment labelled for another slot kept %v", d.Labels)
	}
}

// TestSlotInformerDropsOtherSlotsFoos runs a slot's informers against a fake
// apiserver that ignores shard selectors, as one without ShardedListAndWatch does: the
// cache holds the slot's Foos only, listed and watched alike, and the replica says once
// that it was sent others.
func TestSlotInformerDropsOtherSlotsFoos(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	space, err := slots.NewSpace(4)
	if err != nil {
		t.Fatal(err)
	}
	scope, err := newSlotWatch(space, 1)
	if err != nil {
		t.Fatal(err)
	}
	newFoo := func(i int) *samplev1alpha1.Foo {
		return &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("foo-%d", i), Namespace: "ns", UID: uuid.NewUUID()}}
	}
	var objects []runtime.Object
	want := map[string]bool{}
	for i := range 40 {
		foo := newFoo(i)
		objects = append(objects, foo)
		want[foo.Name] = space.Of(foo.UID) == 1
	}
	sampleClient := fake.NewClientset(objects...)
	opened := fakeapiserver.WatchesOpened(sampleClient, "foos")
	informers := newInformers(Config{KubeClient: k8sfake.NewClientset(), SampleClient: sampleClient, FooListWatch: scope.fooListWatch(sampleClient, "")})
	informer := informers.foos.Informer()
	informers.start(ctx)
	defer informers.shutdown()
	defer cancel() // before Shutdown, which waits for the informers to stop
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the cache did not sync")
	}
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the informer opened no watch")
	}
	// Then some more through the watch.
	for i := 40; i < 80; i++ {
		foo := newFoo(i)
		if err := sampleClient.Tracker().Add(foo); err != nil {
			t.Fatal(err)
		}
		want[foo.Name] = space.Of(foo.UID) == 1
	}
	var mine []string
	for name, in := range want {
		if in {
			mine = append(mine, "ns/"+name)
		}
	}
	slices.Sort(mine)
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(slices.Sorted(slices.Values(informer.GetStore().ListKeys())), mine), nil
	})
	if err != nil {
		t.Fatalf("cached %q, want the slot's %q", slices.Sorted(slices.Values(informer.GetStore().ListKeys())), mine)
	}
	if len(mine) == 0 || len(mine) == len(want) || !scope.outside.Load() {
		t.Errorf("%d of %d Foos in the slot; said it was sent others: %v", len(mine), len(want), scope.outside.Load())
	}
}

// TestFilteredWatchEndsWhenStopped stops a filtered watch while an event it kept waits
// for a reader that is gone, as a reflector leaves its watch: its goroutine ends.
// apimachinery's watch.Filter would block on the event for good.
func TestFilteredWatchEndsWhenStopped(t *testing.T) {
	before := goruntime.NumGoroutine()
	upstream := watch.NewFake()
	w := newFilteredWatch(upstream, func(e watch.Event) bool {
		return e.Object.(*samplev1alpha1.Foo).Name != "dropped"
	})
	upstream.Add(&samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "dropped"}})
	upstream.Add(&samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "kept"}})
	if e := <-w.ResultChan(); e.Object.(*samplev1alpha1.Foo).Name != "kept" {
		t.Fatalf("got %v, want only the kept Foo", e.Object)
	}
	// Taken from upstream, then it waits for a reader that never comes.
	upstream.Add(&samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "unread"}})
	w.Stop()
	w.Stop() // twice is fine
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return goruntime.NumGoroutine() <= before, nil
	})
	if err != nil {
		t.Fatalf("%d goroutines after Stop, %d before the watch: its goroutine is still blocked", goruntime.NumGoroutine(), before)
	}
}

// TestSlotsHeldCountsSyncedSlots checks that a slot counts in slots_held only once its
// caches have synced, until it is given up, and not at all when it is given up first.
func TestSlotsHeldCountsSyncedSlots(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	held := func() float64 { return testutil.ToFloat64(slotsHeld) }
	before := held()

	synced := make(chan struct{})
	waitSynced := func(ctx context.Context) bool {
		select {
		case <-synced:
			return true
		case <-ctx.Done():
			return false
		}
	}
	uncount := countHeldOnceSynced(ctx, waitSynced)
	time.Sleep(200 * time.Millisecond)
	if got := held() - before; got != 0 {
		t.Errorf("slots_held rose by %v before the caches synced, want 0", got)
	}
	close(synced)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return held()-before == 1, nil
	}); err != nil {
		t.Errorf("slots_held rose by %v once the caches synced, want 1", held()-before)
	}
	uncount()
	if got := held() - before; got != 0 {
		t.Errorf("slots_held is %v above where it was after the slot was given up, want 0", got)
	}

	givenUp, cancel := context.WithCancel(ctx)
	uncount = countHeldOnceSynced(givenUp, func(ctx context.Context) bool { <-ctx.Done(); return false })
	cancel()
	uncount()
	time.Sleep(200 * time.Millisecond)
	if got := held() - before; got != 0 {
		t.Errorf("slots_held rose by %v for a slot given up before it synced, want 0", got)
	}
}

// TestSyncHandlerInSlot checks that syncHandler reaches sharded mode through the
// controller's Config alone: a Foo of the slot gets a Deployment with the slot's label,
// and a Foo of another slot, which an apiserver that ignores shard selectors sends, is
// left alone.
func TestSyncHandlerInSlot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	space, err := slots.NewSpace(4)
	if err != nil {
		t.Fatal(err)
	}
	mine, other := newFoo("mine", ptr.To[int32](1)), newFoo("other", ptr.To[int32](1))
	other.UID = mine.UID + "-x"
	for space.Of(other.UID) == space.Of(mine.UID) {
		other.UID += "x"
	}
	slot := space.Of(mine.UID)
	watch, err := newSlotWatch(space, slot)
	if err != nil {
		t.Fatal(err)
	}
	kubeClient, sampleClient := k8sfake.NewClientset(), fake.NewClientset(mine, other)
	controller, err := NewController(ctx, Config{KubeClient: kubeClient, SampleClient: sampleClient, Recorder: events.NewFakeRecorder(10),
		DeploymentLabels: map[string]string{SlotLabel: watch.value}, FooListWatch: watch.fooListWatch(sampleClient, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer controller.ShutdownInformers()
	defer cancel() // before ShutdownInformers, which waits for the informers to stop
	controller.StartInformers(ctx)
	if !controller.waitForCaches(ctx) {
		t.Fatal("the caches did not sync")
	}

	// The informer queued both Foos: the new Foo's status waits behind them.
	if err := controller.syncHandler(ctx, cache.MetaObjectToName(mine)); !errors.Is(err, errDeferred) {
		t.Fatalf("sync of the slot's new Foo = %v, want %v", err, errDeferred)
	}
	d, err := kubeClient.AppsV1().Deployments(mine.Namespace).Get(ctx, mine.Spec.DeploymentName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the slot's Foo got no Deployment: %v", err)
	}
	if got := d.Labels[SlotLabel]; got != strconv.Itoa(slot) {
		t.Errorf("Deployment labelled %s=%q, want %q", SlotLabel, got, strconv.Itoa(slot))
	}

	kubeClient.ClearActions()
	sampleClient.ClearActions()
	if err := controller.syncHandler(ctx, cache.MetaObjectToName(other)); err != nil {
		t.Fatal(err)
	}
	for _, action := range append(kubeClient.Actions(), sampleClient.Actions()...) {
		if action.GetVerb() != "list" && action.GetVerb() != "watch" {
			t.Errorf("another slot's Foo was acted on: %v", action)
		}
	}
}
