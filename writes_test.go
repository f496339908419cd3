package main

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/fakeapiserver"
)

// storeAt is a store that has applied everything up to its resourceVersion.
type storeAt struct{ rv string }

func (s *storeAt) LastStoreSyncResourceVersion() string { return s.rv }

func TestWriteTracker(t *testing.T) {
	web := cache.ObjectName{Namespace: "default", Name: "web"}

	t.Run("a Foo the controller never wrote for is caught up", func(t *testing.T) {
		w := newWriteTracker(&storeAt{"5"}, &storeAt{"5"})
		if _, ok := w.caughtUp(web); !ok {
			t.Error("caughtUp = false, want true")
		}
	})

	t.Run("waits for each resource until its store reaches the write", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newWriteTracker(foos, deployments)
		w.wroteDeployment(web, "uid-1", "11")
		w.wroteStatus(web, "uid-1", "12")
		if behind, ok := w.caughtUp(web); ok || behind != resourceFoos {
			t.Errorf("caughtUp = %q, %v; want foos, false", behind, ok)
		}
		foos.rv = "12"
		if behind, ok := w.caughtUp(web); ok || behind != resourceDeployments {
			t.Errorf("caughtUp = %q, %v; want deployments, false", behind, ok)
		}
		// A store past the write, as after events for other objects, has it too.
		deployments.rv = "20"
		if behind, ok := w.caughtUp(web); !ok {
			t.Errorf("caughtUp = %q, false; want true", behind)
		}
		// The status write's echo is still to come.
		if own, _ := w.observed(web, "uid-1", "12"); !own {
			t.Error("observed(own status write) = false, want true")
		}
		if n := w.len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("keeps the newest write of a resource", func(t *testing.T) {
		deployments := &storeAt{"12"}
		w := newWriteTracker(&storeAt{"1"}, deployments)
		w.wroteDeployment(web, "uid-1", "13")
		w.wroteDeployment(web, "uid-1", "9") // an answer that arrived late
		if _, ok := w.caughtUp(web); ok {
			t.Error("caughtUp = true before the store reached 13")
		}
	})

	t.Run("the echo of the status write wakes a skipped sync", func(t *testing.T) {
		foos := &storeAt{"10"}
		w := newWriteTracker(foos, &storeAt{"10"})
		w.wroteStatus(web, "uid-1", "12")
		if _, ok := w.caughtUp(web); ok {
			t.Fatal("caughtUp = true before the echo")
		}
		foos.rv = "12"
		own, wake := w.observed(web, "uid-1", "12")
		if !own || !wake {
			t.Errorf("observed = own %v, wake %v; want true, true", own, wake)
		}
	})

	t.Run("an echo without a skipped sync wakes nothing", func(t *testing.T) {
		w := newWriteTracker(&storeAt{"12"}, &storeAt{"12"})
		w.wroteStatus(web, "uid-1", "12")
		if own, wake := w.observed(web, "uid-1", "12"); !own || wake {
			t.Errorf("observed = own %v, wake %v; want true, false", own, wake)
		}
		// Someone else's change is not the controller's write.
		if own, _ := w.observed(web, "uid-1", "13"); own {
			t.Error("observed(another write) = own, want not")
		}
	})

	t.Run("a Foo recreated under the same name starts afresh", func(t *testing.T) {
		w := newWriteTracker(&storeAt{"10"}, &storeAt{"10"})
		w.wroteStatus(web, "uid-1", "12")
		if own, _ := w.observed(web, "uid-2", "12"); own {
			t.Error("observed(other UID) = own, want not")
		}
		w.forget(web, "uid-2") // the delete of another Foo leaves this one's entry
		if n := w.len(); n != 1 {
			t.Errorf("%d entries after forgetting another UID, want 1", n)
		}
		w.wroteDeployment(web, "uid-2", "13")
		if own, _ := w.observed(web, "uid-1", "12"); own {
			t.Error("the entry of uid-1 survived a write for uid-2")
		}
		w.forget(web, "")
		if n := w.len(); n != 0 {
			t.Errorf("%d entries after forget, want 0", n)
		}
	})

	t.Run("stands aside when the store cannot tell", func(t *testing.T) {
		// "" is what client-go's stores answer with the AtomicFIFO feature off, and
		// a version that does not parse is not from a real API server.
		for _, store := range []string{"", "not-a-number"} {
			w := newWriteTracker(&storeAt{store}, &storeAt{store})
			w.wroteStatus(web, "uid-1", "12")
			if _, ok := w.caughtUp(web); !ok {
				t.Errorf("store at %q: caughtUp = false, want true", store)
			}
		}
	})
}

// TestSyncHandlerWaitsForItsOwnWrites runs two syncs of a scaled Foo before the
// informers deliver the first one's writes. The second would update the Deployment
// again from its stale copy, and fail on a conflict; it must do nothing until the
// caches hold what the first wrote.
func TestSyncHandlerWaitsForItsOwnWrites(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	d := availableDeployment(foo)
	foo = withStatus(foo, d)
	scaled := modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.Replicas = ptr.To[int32](3); f.Generation = 2 })
	f := newFixture(t, []*samplev1alpha1.Foo{scaled}, []*appsv1.Deployment{d}, nil)
	fakeapiserver.Versioned(f.kubeclient, deploymentsResource)
	fakeapiserver.Versioned(f.client, foosResource)
	skips := func() float64 { return testutil.ToFloat64(staleSkipsTotal.WithLabelValues(resourceFoos)) }

	if err := f.sync(scaled); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if got := len(f.kubeclient.Actions()) + len(f.client.Actions()); got != 2 {
		t.Fatalf("first sync made %d requests, want 2 (the Deployment update, the status)", got)
	}
	f.kubeclient.ClearActions()
	f.client.ClearActions()

	before := skips()
	err := f.sync(scaled)
	if !errors.Is(err, errStaleCache) {
		t.Errorf("second sync on stale caches: err = %v, want errStaleCache", err)
	}
	f.checkActions(nil)
	if got := skips() - before; got != 1 {
		t.Errorf("stale skips counted = %v, want 1", got)
	}

	// The informers deliver the writes: the Deployment first, then the status.
	deliver := func(indexer cache.Indexer, obj any) {
		t.Helper()
		if err := indexer.Update(obj); err != nil {
			t.Fatal(err)
		}
	}
	server, err := f.kubeclient.Tracker().Get(deploymentsResource, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	deliver(f.controller.deploymentsIndexer, server)
	if err := f.sync(scaled); !errors.Is(err, errStaleCache) {
		t.Errorf("sync with the Foo cache still behind: err = %v, want errStaleCache", err)
	}
	written, err := f.client.Tracker().Get(foosResource, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	deliver(f.controller.foosIndexer, written)
	if err := f.sync(written.(*samplev1alpha1.Foo)); err != nil {
		t.Errorf("sync once the caches caught up: %v", err)
	}
	f.checkActions(nil)
}
