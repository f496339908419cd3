//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/localcluster"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
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
