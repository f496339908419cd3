//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestShardedReplicasShareTheFoos runs three replicas in sharded mode, with the RBAC of
// the sharded component: the Foos converge, every slot is held by exactly one replica,
// and each replica caches only its own slots' Foos (the local apiserver filters). When
// one replica stops, the others take its slots and act on them.
func TestShardedReplicasShareTheFoos(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)

	const slotCount, foos = 16, 30
	args := []string{
		fmt.Sprintf("--shard-slots=%d", slotCount), "--leader-elect-resource-namespace=" + ns,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	replicas := []*localcluster.Controller{
		env.StartController(t, ns, args...), env.StartController(t, ns, args...), env.StartController(t, ns, args...),
	}

	for i := range foos {
		name := fmt.Sprintf("shared-%d", i)
		_, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To[int32](1)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range foos {
		waitReady(t, ns, fmt.Sprintf("shared-%d", i), 1)
	}

	// Every slot is held once, and every Foo is cached by the one replica of its slot.
	shares := func(ctx context.Context, live []*localcluster.Controller) (held, cached []float64, state string) {
		for _, r := range live {
			m, err := r.Metrics(ctx)
			if err != nil {
				return nil, nil, err.Error()
			}
			held = append(held, m.Sum("sample_controller_slots_held", nil))
			cached = append(cached, m.Sum("sample_controller_cached_objects", map[string]string{"resource": "foos"}))
		}
		return held, cached, fmt.Sprintf("slots held %v, Foos cached %v", held, cached)
	}
	balanced := func(live []*localcluster.Controller) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			held, cached, state := shares(ctx, live)
			if held == nil {
				return false, state
			}
			var slots, objects float64
			for i := range held {
				// Balanced: every replica holds its share, give or take one.
				if share := float64(slotCount) / float64(len(live)); held[i] < share-1 || held[i] > share+1 {
					return false, state
				}
				slots += held[i]
				objects += cached[i]
			}
			return slots == slotCount && objects == foos, state
		}
	}
	var state string
	framework.Eventually(t, timeout, "three replicas to share the slots and the Foos", func(ctx context.Context) (bool, string) {
		ok, s := balanced(replicas)(ctx)
		state = s
		return ok, s
	})
	t.Logf("sharded, 3 replicas: %s", state)
	// Each replica counts the Foos of its slots by readiness; together, every Foo once.
	framework.Eventually(t, timeout, "the replicas to count every Foo Ready once", func(ctx context.Context) (bool, string) {
		var ready []float64
		var total float64
		for _, r := range replicas {
			m, err := r.Metrics(ctx)
			if err != nil {
				return false, err.Error()
			}
			if slots := m.Sum("sample_controller_slots", nil); slots != slotCount {
				return false, fmt.Sprintf("sample_controller_slots %v, want %d", slots, slotCount)
			}
			n := m.Sum("sample_controller_foos", map[string]string{"ready": "True"})
			ready, total = append(ready, n), total+n
		}
		return total == foos, fmt.Sprintf("sample_controller_foos{ready=\"True\"} %v", ready)
	})

	// A replica that stops gives its slots up; the others take them and act on them.
	if err := replicas[0].Stop(localcluster.ControllerStopGrace); err != nil {
		t.Errorf("the stopped replica exited with %v", err)
	}
	framework.Eventually(t, timeout, "two replicas to share the slots and the Foos", func(ctx context.Context) (bool, string) {
		ok, s := balanced(replicas[1:])(ctx)
		state = s
		return ok, s
	})
	t.Logf("sharded, 2 replicas after one stopped: %s", state)
	for i := range foos {
		if i%3 == 0 {
			env.Kubectl(t, "scale", "-n", ns, fmt.Sprintf("foo/shared-%d", i), "--replicas=2")
		}
	}
	for i := range foos {
		if i%3 == 0 {
			waitReady(t, ns, fmt.Sprintf("shared-%d", i), 2)
		}
	}
}

// TestRecreatedFooWaitsForCollection deletes a Foo whose Deployment a finalizer holds,
// and creates the Foo again under its name: the new Foo waits for the garbage
// collector without a Warning, and owns a new Deployment once the finalizer is removed,
// woken by the Deployment's deletion, not by the minute's recheck. In sharded mode the
// new Foo is in another slot than the old one (recreated until it is), whose replica
// alone caches the old Deployment: the deletion must still reach the new Foo.
// Single-leader mode is the same case without slots.
//
// The new Deployment's creationTimestamp tells which woke the Foo: the recheck comes a
// minute after the Foo first found its name taken, so no sooner than a minute after the
// Foo's own creationTimestamp. Both are the API server's clock, so neither a loaded
// machine nor this test's polling moves the verdict.
func TestRecreatedFooWaitsForCollection(t *testing.T) {
	t.Parallel()
	const slotCount = 8
	for _, mode := range []string{"single", "sharded"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			ns := env.NewNamespace(t)
			space, err := slots.NewSpace(slotCount)
			if err != nil {
				t.Fatal(err)
			}
			if mode == "sharded" {
				env.GrantShardedLeases(t, ns)
				args := []string{
					fmt.Sprintf("--shard-slots=%d", slotCount), "--leader-elect-resource-namespace=" + ns,
					"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
				}
				env.StartController(t, ns, args...)
				env.StartController(t, ns, args...)
			} else {
				env.StartController(t, ns)
			}
			foos := env.Sample.SamplecontrollerV1alpha1().Foos(ns)
			create := func() *samplev1alpha1.Foo {
				t.Helper()
				foo, err := foos.Create(ctx, &samplev1alpha1.Foo{
					ObjectMeta: metav1.ObjectMeta{Name: "phoenix"},
					Spec:       samplev1alpha1.FooSpec{DeploymentName: "phoenix", Replicas: ptr.To[int32](1)},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return foo
			}
			old := create()
			waitReady(t, ns, "phoenix", 1)
			env.Kubectl(t, "patch", "deployment", "phoenix", "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":["e2e.samplecontroller.k8s.io/hold"]}}`)
			held := getDeployment(t, ns, "phoenix")

			// Deleted, and created again until it is in another slot than before.
			var recreated *samplev1alpha1.Foo
			for range 30 {
				if err := foos.Delete(ctx, "phoenix", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				framework.Eventually(t, timeout, "the Foo to be gone", func(ctx context.Context) (bool, string) {
					_, err := foos.Get(ctx, "phoenix", metav1.GetOptions{})
					return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
				})
				recreated = create()
				if mode == "single" || space.Of(recreated.UID) != space.Of(old.UID) {
					break
				}
			}
			if mode == "sharded" && space.Of(recreated.UID) == space.Of(old.UID) {
				t.Fatalf("the Foo came back in slot %d thirty times", space.Of(old.UID))
			}
			framework.Eventually(t, timeout, "the held Deployment to be deleted by the garbage collector", func(ctx context.Context) (bool, string) {
				d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "phoenix", metav1.GetOptions{})
				return err == nil && d.DeletionTimestamp != nil, fmt.Sprintf("get: %v", err)
			})
			framework.Eventually(t, timeout, "the new Foo to see the name taken", func(ctx context.Context) (bool, string) {
				foo, err := foos.Get(ctx, "phoenix", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return foo.UID == recreated.UID && foo.Status.ObservedGeneration == foo.Generation, fmt.Sprintf("status %+v", foo.Status)
			})

			// A second less: creationTimestamp drops the fraction.
			recheck := recreated.CreationTimestamp.Add(notOwnedRecheck - time.Second)
			released := time.Now()
			if !released.Before(recheck) {
				t.Fatalf("the old Deployment is released only at %v, after the recheck could come (%v): the test cannot tell what wakes the Foo", released, recheck)
			}
			env.Kubectl(t, "patch", "deployment", "phoenix", "-n", ns, "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
			var owning *appsv1.Deployment
			framework.Eventually(t, timeout, "the new Foo to own a new Deployment", func(ctx context.Context) (bool, string) {
				d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "phoenix", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				owning = d
				return d.UID != held.UID && metav1.IsControlledBy(d, recreated), fmt.Sprintf("owners %+v", d.OwnerReferences)
			})
			owned := time.Since(released)
			waitReady(t, ns, "phoenix", 1)
			if !owning.CreationTimestamp.Time.Before(recheck) {
				t.Errorf("the new Foo's Deployment was created at %v, not before the recheck could come (%v): nothing shows that the old one's deletion woke the Foo",
					owning.CreationTimestamp.Time, recheck)
			}
			warnings, err := env.Kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=DeploymentNotOwned"})
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings.Items) > 0 {
				t.Errorf("%d DeploymentNotOwned Warnings for a name that only waited for the garbage collector: %s", len(warnings.Items), warnings.Items[0].Note)
			}
			fmt.Printf("e2e: recreated Foo (%s): owned a new Deployment %.1fs after the old one's finalizer was removed\n", mode, owned.Seconds())
		})
	}
}
