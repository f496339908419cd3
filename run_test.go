package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
)

// TestRun runs the controller with real informers on fake clientsets, from an empty
// cache to a converged Foo, and checks that cancellation stops it.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](2))
	unrelated := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "default"}}
	kubeclient := k8sfake.NewClientset(unrelated)
	client := fake.NewClientset(foo)
	c, done := runController(t, ctx, kubeclient, client, 2)

	// The controller creates the Deployment and reports on it.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.SamplecontrollerV1alpha1().Foos("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == 1 && got.Status.Selector != "", nil
	}); err != nil {
		t.Fatalf("Foo status was never written: %v", err)
	}
	if _, err := kubeclient.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("Deployment was not created: %v", err)
	}
	// The label selector keeps unrelated Deployments out of the cache.
	if _, err := c.deploymentsLister.Deployments("default").Get("unrelated"); !apierrors.IsNotFound(err) {
		t.Errorf("unrelated Deployment in the cache: err = %v, want NotFound", err)
	}
	// Cached objects carry no managedFields.
	cachedFoo, err := c.foosLister.Foos("default").Get("web")
	if err != nil {
		t.Fatal(err)
	}
	if len(cachedFoo.ManagedFields) != 0 {
		t.Errorf("cached Foo has %d managedFields entries, want 0", len(cachedFoo.ManagedFields))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if !c.workqueue.ShuttingDown() {
		t.Error("work queue still running after Run returned")
	}
}

// TestRunFinishesInFlightSyncs cancels Run while a sync waits on the API server: the
// sync completes, and Run returns only after it.
func TestRunFinishesInFlightSyncs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](1))
	kubeclient := k8sfake.NewClientset()
	client := fake.NewClientset(foo)
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release
		finished.Store(true)
		return false, nil, nil // on to the object tracker
	})
	c, done := runController(t, ctx, kubeclient, client, 1)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync never reached the API server")
	}
	cancel()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.workqueue.ShuttingDown(), nil
	}); err != nil {
		t.Fatal("the queue did not shut down after cancellation")
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if !finished.Load() {
		t.Error("Run returned before its in-flight sync finished")
	}
	if _, err := kubeclient.Tracker().Get(deploymentsResource, "default", "web"); err != nil {
		t.Errorf("the in-flight create did not complete: %v", err)
	}
}

// runController wires a controller to real informers on the fake clientsets, as
// main does, and runs it until ctx is cancelled. Run's result arrives on the channel.
func runController(t *testing.T, ctx context.Context, kubeclient *k8sfake.Clientset, client *fake.Clientset, workers int) (*Controller, <-chan error) {
	t.Helper()
	kubeFactory, sampleFactory := newInformerFactories(kubeclient, client, "", 0)
	c, err := NewController(ctx, kubeclient, client,
		kubeFactory.Apps().V1().Deployments(), sampleFactory.Samplecontroller().V1alpha1().Foos(), events.NewFakeRecorder(100))
	if err != nil {
		t.Fatal(err)
	}
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	t.Cleanup(kubeFactory.Shutdown)
	t.Cleanup(sampleFactory.Shutdown)

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, workers) }()
	return c, done
}
