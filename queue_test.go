package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

func TestHandleObject(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	owned := availableDeployment(foo)
	// Foos that ask for the name "shared", which someone else's Deployment holds.
	waiting := modifiedFoo(newFoo("waiting", nil), func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "shared" })
	alsoWaiting := modifiedFoo(newFoo("also-waiting", nil), func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "shared" })
	// other is a Deployment no Foo asks for by name.
	other := func(mutate func(d *appsv1.Deployment)) *appsv1.Deployment {
		return modified(owned, func(d *appsv1.Deployment) { d.Name = "other"; mutate(d) })
	}
	tests := []struct {
		name string
		obj  any
		want []cache.ObjectName
	}{{
		name: "deployment controlled by a foo",
		obj:  owned,
		want: []cache.ObjectName{{Namespace: "default", Name: "web"}},
	}, {
		name: "tombstone of a deployment controlled by a foo",
		obj:  cache.DeletedFinalStateUnknown{Key: "default/web", Obj: owned},
		want: []cache.ObjectName{{Namespace: "default", Name: "web"}},
	}, {
		name: "tombstone holding something else",
		obj:  cache.DeletedFinalStateUnknown{Key: "default/web", Obj: "not an object"},
	}, {
		name: "not an object",
		obj:  42,
	}, {
		name: "no controller",
		obj:  other(func(d *appsv1.Deployment) { d.OwnerReferences = nil }),
	}, {
		name: "owner of kind Foo in another group",
		obj:  foreignDeployment("other", nil),
	}, {
		name: "owner of another kind in our group",
		obj:  other(func(d *appsv1.Deployment) { d.OwnerReferences[0].Kind = "Bar" }),
	}, {
		name: "foo that was replaced by one of the same name",
		obj:  other(func(d *appsv1.Deployment) { d.OwnerReferences[0].UID = "old-uid" }),
	}, {
		name: "foo that no longer exists",
		obj:  other(func(d *appsv1.Deployment) { d.OwnerReferences[0].Name = "gone" }),
	}, {
		// Its predecessor's Deployment, going away, frees the name for it.
		name: "foo recreated under the same name, by its predecessor's deployment",
		obj: cache.DeletedFinalStateUnknown{Key: "default/web", Obj: modified(owned, func(d *appsv1.Deployment) {
			d.OwnerReferences[0].UID = "old-uid"
		})},
		want: []cache.ObjectName{{Namespace: "default", Name: "web"}},
	}, {
		name: "foos waiting for a name, by a deployment of that name someone else controls",
		obj:  foreignDeployment("shared", nil),
		want: []cache.ObjectName{{Namespace: "default", Name: "also-waiting"}, {Namespace: "default", Name: "waiting"}},
	}, {
		name: "foos waiting for a name, and the foo that gives it up",
		obj:  modified(owned, func(d *appsv1.Deployment) { d.Name = "shared" }),
		want: []cache.ObjectName{{Namespace: "default", Name: "also-waiting"}, {Namespace: "default", Name: "waiting"}, {Namespace: "default", Name: "web"}},
	}, {
		name: "a deployment of the same name in another namespace",
		obj:  modified(foreignDeployment("shared", nil), func(d *appsv1.Deployment) { d.Namespace = "elsewhere" }),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []*samplev1alpha1.Foo{foo, waiting, alsoWaiting}, nil, nil)
			_, ctx := ktesting.NewTestContext(t)
			f.controller.handleObject(ctx, tc.obj, true)
			byName := cmpopts.SortSlices(func(a, b cache.ObjectName) bool { return a.String() < b.String() })
			if diff := cmp.Diff(tc.want, queued(f.controller), byName); diff != "" {
				t.Errorf("queued mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandleObjectOwnDeploymentWrite checks that the echo of the controller's own
// Deployment write enqueues neither the Foo that controls the Deployment nor, as one
// that asks for its name, that Foo again; that others asking for the name still learn
// of it; and that the echo still wakes a sync skipped for waiting on it.
func TestHandleObjectOwnDeploymentWrite(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	key := cache.MetaObjectToName(foo)
	// Another Foo asking for the same name, which foo holds.
	rival := modifiedFoo(newFoo("rival", nil), func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web" })
	echo := modified(availableDeployment(foo), func(d *appsv1.Deployment) { d.ResourceVersion = "1001" })
	at := func(rv string) *appsv1.Deployment {
		return modified(echo, func(d *appsv1.Deployment) { d.ResourceVersion = rv })
	}
	_, ctx := ktesting.NewTestContext(t)

	t.Run("the echo", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo, rival}, nil, nil)
		c := f.controller
		c.writes.ExpectWrite(writes.Deployments, key, foo.UID, "1001")
		c.handleObject(ctx, echo, true)
		if diff := cmp.Diff([]cache.ObjectName{{Namespace: "default", Name: "rival"}}, queued(c)); diff != "" {
			t.Errorf("queued mismatch (-want +got):\n%s", diff)
		}
		// An echo is taken for one once: another event at that version is not.
		c.handleObject(ctx, echo, true)
		if got := queued(c); len(got) != 2 {
			t.Errorf("the echo delivered twice queued %v the second time, want both Foos", got)
		}
	})

	t.Run("the echo awaited by a skipped sync", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, []*appsv1.Deployment{at("1000")}, nil)
		c := f.controller
		c.writes.ExpectWrite(writes.Deployments, key, foo.UID, "1001")
		if err := f.sync(foo); !errors.Is(err, errStaleCache) {
			t.Fatalf("sync: err = %v, want errStaleCache", err)
		}
		if err := c.deploymentsIndexer.Update(cachedCopy(echo)); err != nil {
			t.Fatal(err)
		}
		c.handleObject(ctx, cachedCopy(echo), true)
		if diff := cmp.Diff([]cache.ObjectName{key}, queued(c)); diff != "" {
			t.Errorf("queued mismatch (-want +got):\n%s", diff)
		}
	})

	for _, tc := range []struct {
		name    string
		obj     any
		current bool
	}{
		{"someone else's later change", at("1002"), true},
		{"the deletion of what was written", echo, false},
		{"a tombstone of what was written", cache.DeletedFinalStateUnknown{Key: "default/web", Obj: echo}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
			c := f.controller
			c.writes.ExpectWrite(writes.Deployments, key, foo.UID, "1001")
			c.handleObject(ctx, tc.obj, tc.current)
			if diff := cmp.Diff([]cache.ObjectName{key}, queued(c)); diff != "" {
				t.Errorf("queued mismatch (-want +got):\n%s", diff)
			}
			// Nothing is left to await: no other event may come for the Foo.
			if n := c.writes.Len(); n != 0 {
				t.Errorf("%d write tracker entries left, want 0", n)
			}
		})
	}
}

// queued drains the controller's queue and returns what it held.
func queued(c *Controller) []cache.ObjectName {
	var keys []cache.ObjectName
	for c.workqueue.Len() > 0 {
		key, _ := c.workqueue.Get()
		keys = append(keys, key)
		c.workqueue.Done(key)
	}
	return keys
}

func TestFooEventHandlers(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	f := newFixture(t, nil, nil, nil)
	c := f.controller

	c.enqueueFoo(foo)
	if diff := cmp.Diff([]cache.ObjectName{{Namespace: "default", Name: "web"}}, queued(c)); diff != "" {
		t.Errorf("enqueueFoo: queued mismatch (-want +got):\n%s", diff)
	}
	c.enqueueFoo("not a foo")
	if got := queued(c); len(got) != 0 {
		t.Errorf("enqueueFoo(non-Foo) queued %v, want nothing", got)
	}
	if !sameResourceVersion(foo, foo.DeepCopy()) {
		t.Errorf("sameResourceVersion(resync) = false, want true")
	}
	if sameResourceVersion(foo, modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.ResourceVersion = "2" })) {
		t.Errorf("sameResourceVersion(change) = true, want false")
	}
}

// TestFooUpdateOwnStatusWrite checks that the echo of the controller's own status write
// does not requeue the Foo, which would undo its backoff, unless a sync skipped for a
// stale cache waits for exactly that echo.
func TestFooUpdateOwnStatusWrite(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	key := cache.MetaObjectToName(foo)
	f := newFixture(t, nil, nil, nil)
	c := f.controller
	echo := modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.ResourceVersion = "1001" })

	c.writes.ExpectWrite(writes.Foos, key, foo.UID, "1001")
	c.onFooUpdate(echo)
	if got := queued(c); len(got) != 0 {
		t.Errorf("own status write queued %v, want nothing", got)
	}

	c.writes.ExpectWrite(writes.Foos, key, foo.UID, "1002")
	if err := c.foosIndexer.Add(echo); err != nil { // the cache is at 1001
		t.Fatal(err)
	}
	if err := f.sync(foo); !errors.Is(err, errStaleCache) {
		t.Fatalf("sync: err = %v, want errStaleCache", err)
	}
	c.onFooUpdate(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.ResourceVersion = "1002" }))
	if diff := cmp.Diff([]cache.ObjectName{key}, queued(c)); diff != "" {
		t.Errorf("echo awaited by a skipped sync: queued mismatch (-want +got):\n%s", diff)
	}

	c.onFooUpdate(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.ResourceVersion = "1003" }))
	if diff := cmp.Diff([]cache.ObjectName{key}, queued(c)); diff != "" {
		t.Errorf("someone else's change: queued mismatch (-want +got):\n%s", diff)
	}
}

// TestFooReplacedWhileTheWatchWasDown: a Foo deleted and created again under the same
// name while the Foo watch was down comes back in the relist as an update of the first
// Foo, not as a delete and an add. What the controller remembers of the first Foo, a
// write whose event has not come yet and a refusal, must neither hold up the second
// nor stay behind: the event of that write would enqueue the first Foo, not the second.
func TestFooReplacedWhileTheWatchWasDown(t *testing.T) {
	first := newFoo("web", ptr.To[int32](1))
	second := modifiedFoo(first, func(f *samplev1alpha1.Foo) {
		f.UID, f.ResourceVersion, f.Spec.DeploymentName = "web-uid-2", "20", "web-2"
	})
	// Any Deployment of the controller's, to put the Deployment cache at 5.
	other := availableDeployment(newFoo("other", ptr.To[int32](1)))
	other.ResourceVersion = "5"
	f := newFixture(t, []*samplev1alpha1.Foo{first}, []*appsv1.Deployment{other}, nil)
	c := f.controller
	key := cache.MetaObjectToName(first)
	c.writes.ExpectWrite(writes.Deployments, key, first.UID, "10")
	c.writes.Report(key, first.UID, "a quota")

	if err := c.foosIndexer.Update(second); err != nil {
		t.Fatal(err)
	}
	c.updateFoo(first, second)
	if diff := cmp.Diff([]cache.ObjectName{key}, queued(c)); diff != "" {
		t.Errorf("queued mismatch (-want +got):\n%s", diff)
	}
	if n := c.writes.Len(); n != 0 {
		t.Errorf("the first Foo's record (its write, its refusal) outlived it: %d records", n)
	}
	if err := f.sync(second); errors.Is(err, errStaleCache) {
		t.Errorf("the second Foo's sync waits for the first Foo's write: %v", err)
	}
}

func TestProcessNextWorkItem(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	key := cache.MetaObjectToName(foo)

	t.Run("requeues with backoff on error", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		})
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		clk := f.useQueueClock()
		c.workqueue.Add(key)
		if !c.processNextWorkItem(ctx) {
			t.Fatal("processNextWorkItem() = false, want true")
		}
		if got := c.workqueue.NumRequeues(key); got != 1 {
			t.Errorf("NumRequeues = %d, want 1", got)
		}
		// The retry waits out its backoff, 5 ms, rather than coming straight back.
		f.waitRequeued(ctx, clk, 5*time.Millisecond)
		// Another failure backs off further: 10 ms.
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 2 {
			t.Errorf("NumRequeues after another failure = %d, want 2", got)
		}
		f.waitRequeued(ctx, clk, 10*time.Millisecond)
	})

	t.Run("a conflict waits for the cache's event, not a backoff", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(appsv1.Resource("deployments"), "web", errors.New("the object has been modified"))
		})
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		clk := f.useQueueClock()
		c.workqueue.Add(key)
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 0 {
			t.Errorf("NumRequeues = %d, want 0: a conflict is no failure to back off from", got)
		}
		// Only the fallback brings it back without an event.
		f.waitRequeued(ctx, clk, conflictRecheckInterval)
	})

	t.Run("forgets the key on success", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		c.workqueue.AddRateLimited(key) // as if an earlier attempt had failed
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return c.workqueue.Len() == 1, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !c.processNextWorkItem(ctx) {
			t.Fatal("processNextWorkItem() = false, want true")
		}
		if got := c.workqueue.NumRequeues(key); got != 0 {
			t.Errorf("NumRequeues = %d, want 0", got)
		}
		if got := c.workqueue.Len(); got != 0 {
			t.Errorf("queue length = %d, want 0", got)
		}
	})

	t.Run("returns false once the queue shuts down", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil)
		_, ctx := ktesting.NewTestContext(t)
		f.controller.workqueue.ShutDown()
		if f.controller.processNextWorkItem(ctx) {
			t.Error("processNextWorkItem() = true after shutdown, want false")
		}
	})

	t.Run("a refused write is retried with backoff", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		refuse(f, "create")
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		clk := f.useQueueClock()
		rejected, failed := testutil.ToFloat64(syncsTotal.WithLabelValues(syncRejected)), testutil.ToFloat64(syncsTotal.WithLabelValues(syncError))
		c.workqueue.Add(key)
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 1 {
			t.Errorf("NumRequeues = %d, want 1", got)
		}
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncRejected)) - rejected; got != 1 {
			t.Errorf("rejected syncs counted = %v, want 1", got)
		}
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncError)) - failed; got != 0 {
			t.Errorf("error syncs counted for a refusal = %v, want 0", got)
		}
		f.waitRequeued(ctx, clk, 5*time.Millisecond)
	})

	t.Run("a fenced write is counted as fenced and retried with backoff", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
			return true, nil, fencedError()
		})
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		clk := f.useQueueClock()
		fenced, failed := testutil.ToFloat64(syncsTotal.WithLabelValues(syncFenced)), testutil.ToFloat64(syncsTotal.WithLabelValues(syncError))
		c.workqueue.Add(key)
		c.processNextWorkItem(ctx)
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncFenced)) - fenced; got != 1 {
			t.Errorf("fenced syncs counted = %v, want 1", got)
		}
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncError)) - failed; got != 0 {
			t.Errorf("error syncs counted for a fenced write = %v, want 0", got)
		}
		f.waitRequeued(ctx, clk, 5*time.Millisecond)
	})

	t.Run("a refused write waits at most a minute between tries", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil)
		c := f.controller
		if got := c.rejectedBackoff(key); got != 5*time.Millisecond {
			t.Errorf("first backoff = %v, want 5ms", got)
		}
		var got time.Duration
		for range 30 {
			got = c.rejectedBackoff(key)
		}
		if got != rejectedRecheckInterval {
			t.Errorf("backoff after 31 refusals = %v, want %v", got, rejectedRecheckInterval)
		}
	})

	t.Run("a taken name is looked at again later, not in a tight loop", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, []*appsv1.Deployment{foreignDeployment("web", map[string]string{reconcile.FooUIDLabel: "x"})}, nil)
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		c.workqueue.Add(key)
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 0 {
			t.Errorf("NumRequeues = %d, want 0 (not an error)", got)
		}
		if got := c.workqueue.Len(); got != 0 {
			t.Errorf("queue length = %d, want 0 (the recheck waits %v)", got, notOwnedRecheckInterval)
		}
	})
}

func TestSameController(t *testing.T) {
	owned := availableDeployment(newFoo("web", nil))
	orphan := modified(owned, func(d *appsv1.Deployment) { d.OwnerReferences = nil })
	adopted := modified(owned, func(d *appsv1.Deployment) { d.OwnerReferences[0].UID = "other-uid" })
	notController := modified(owned, func(d *appsv1.Deployment) { d.OwnerReferences[0].Controller = nil })
	tests := []struct {
		name     string
		old, new any
		want     bool
	}{
		{"unchanged", owned, modified(owned, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) }), true},
		{"owner reference removed", owned, orphan, false},
		{"adopted", orphan, owned, false},
		{"handed to another foo", owned, adopted, false},
		{"no longer the controller", owned, notController, false},
		{"no controller either way", orphan, notController, true},
		{"not objects", 1, 2, false},
	}
	for _, tt := range tests {
		if got := sameController(tt.old, tt.new); got != tt.want {
			t.Errorf("%s: sameController() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRateLimiterAfterOutage fails every Foo of a large cluster at once, as an
// apiserver outage does, and checks that none waits long for its first retry. The
// default controller rate limiter of client-go, 10 a second after a burst of 100,
// made the last of 1000 wait 90 s.
func TestRateLimiterAfterOutage(t *testing.T) {
	limiter := newRateLimiter()
	var longest time.Duration
	for i := range 1000 {
		longest = max(longest, limiter.When(cache.ObjectName{Namespace: "default", Name: fmt.Sprintf("foo-%d", i)}))
	}
	if longest > time.Second {
		t.Errorf("after 1000 Foos failed at once, the last retries in %v, want at most 1s", longest)
	}
	// One Foo that keeps failing still backs off exponentially.
	key := cache.ObjectName{Namespace: "default", Name: "failing"}
	var delay time.Duration
	for range 12 {
		delay = limiter.When(key)
	}
	if want := retryBaseDelay << 11; delay < want {
		t.Errorf("12th retry of one Foo in %v, want at least %v", delay, want)
	}
}
