package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/pkg/reconcile"
)

// TestEventRecordingShutdownWritesEverything records Events for many Foos, cancels
// the context as a signal does, and checks that shutdown returns only once every
// Event is written, although each write is slow.
func TestEventRecordingShutdownWritesEverything(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	client := k8sfake.NewClientset()
	var written atomic.Int32
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		time.Sleep(50 * time.Millisecond)
		written.Add(1)
		return false, nil, nil
	})
	recording, err := startEventRecording(ctx, client.EventsV1(), nil)
	if err != nil {
		t.Fatal(err)
	}
	recorder := recording.recorder()

	const n = 20
	for i := range n {
		// One Foo each: Events about the same Foo and reason would form a series.
		foo := newFoo(fmt.Sprintf("web-%d", i), ptr.To[int32](1))
		recorder.Eventf(foo, nil, corev1.EventTypeNormal, reconcile.EventDeploymentCreated, "Create", "Created Deployment %q", foo.Name)
	}
	cancel() // SIGTERM
	start := time.Now()
	recording.shutdown(ctx, 5*time.Second)
	if got := written.Load(); got != n {
		t.Errorf("%d of %d Events written when shutdown returned after %v", got, n, time.Since(start))
	}
}

// TestEventRecordingShutdownIsBounded checks that an API server that never answers
// does not hold shutdown past its timeout.
func TestEventRecordingShutdownIsBounded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := k8sfake.NewClientset()
	release := make(chan struct{})
	defer close(release)
	client.PrependReactor("create", "events", func(core.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	recording, err := startEventRecording(ctx, client.EventsV1(), nil)
	if err != nil {
		t.Fatal(err)
	}
	foo := newFoo("web", ptr.To[int32](1))
	recording.recorder().Eventf(foo, nil, corev1.EventTypeNormal, reconcile.EventDeploymentCreated, "Create", "Created")
	start := time.Now()
	recording.shutdown(ctx, 300*time.Millisecond)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("shutdown took %v with a 300ms timeout", took)
	}
}
