//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-e6610ed6/sample-controller/test/apiproxy"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestNewHolderOnALaggingFooWatch runs two replicas, with leader election or sharded
// in one slot, and holds the standby's Foo watch (its Deployment watch stays current)
// while the active replica acts on three changes: a Foo renamed to another Deployment,
// a Foo scaled, a Foo deleted and created again under its name. Then the active replica
// is killed, and the standby takes over with Foos from before the changes: a leader's
// warm cache, or the first list of the slot's informers, held. Its watch is held until
// it has tried every Foo, or, sharded, until its slot's Foo watch has started. The
// sharded case keeps a slot's hand-over as safe as it was before leaders checked their
// caches: its informers start afresh, and it acts only once they have synced.
//
// From its proxy's log, the new holder must write no Deployment while its cache lags:
// the replica before had converged every Foo, so any write is one a current Foo would
// not make (a Deployment under a name given up, a replica count from the past, the
// delete of the Deployment in use). Once the watch delivers, every Foo converges, and
// the Deployments the changes made are the ones that stay, by UID.
func TestNewHolderOnALaggingFooWatch(t *testing.T) {
	t.Parallel()
	const lease = "lagging"
	timings := []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	for _, mode := range []struct {
		name string
		args []string
		// acts tells whether c is the replica that acts on the Foos, from its metrics.
		acts func(m localcluster.Metrics) bool
		// tookOver tells whether c, which took over, has done what it does on a
		// lagging cache.
		tookOver func(c *proxiedController, m localcluster.Metrics) (bool, string)
	}{{
		name: "leader",
		args: append([]string{"--leader-elect", "--leader-elect-resource-name=" + lease}, timings...),
		acts: func(m localcluster.Metrics) bool {
			return m.Sum("leader_election_master_status", map[string]string{"name": lease}) == 1
		},
		// Each sync ends in a stale skip or in something written, so the syncs' count
		// covers the three Foos.
		tookOver: func(_ *proxiedController, m localcluster.Metrics) (bool, string) {
			n := m.Sum("sample_controller_syncs_total", nil)
			return n >= 3, fmt.Sprintf("%v syncs", n)
		},
	}, {
		name: "sharded",
		args: append([]string{"--shard-slots=1"}, timings...),
		acts: func(m localcluster.Metrics) bool { return m.Sum("sample_controller_slots_held", nil) == 1 },
		// The slot's informers list and watch afresh, through the held Foo watch.
		tookOver: func(c *proxiedController, m localcluster.Metrics) (bool, string) {
			taken, held := m.Sum("sample_controller_slot_acquisitions_total", nil), c.proxy.HeldWatches()
			return taken >= 1 && held >= 1, fmt.Sprintf("%v slots taken, %d Foo watches held", taken, held)
		},
	}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ns := env.NewNamespace(t)
			env.GrantShardedLeases(t, ns)
			args := append([]string{"--leader-elect-resource-namespace=" + ns}, mode.args...)
			replicas := []*proxiedController{startProxied(t, ns, args...), startProxied(t, ns, args...)}
			active := waitActing(t, replicas, mode.acts)
			standby := replicas[0]
			if standby == active {
				standby = replicas[1]
			}
			names := []string{"ren", "sca", "rec"}
			createFoo(t, ns, "ren", "ren-a", 1)
			createFoo(t, ns, "sca", "sca", 3)
			createFoo(t, ns, "rec", "rec", 1)
			checkInvariants(t, ns, names)
			recUID := fooUID(t, ns, "rec")

			standby.proxy.HoldWatches("foos")
			held := time.Now()
			patchFooSpec(t, ns, "ren", `{"deploymentName":"ren-b"}`)
			patchFooSpec(t, ns, "sca", `{"replicas":5}`)
			recreateFoo(t, ns, "rec", recUID)
			checkInvariants(t, ns, names)
			made := deploymentUIDs(t, ns)

			_ = active.process().Kill()
			killed := time.Now()
			framework.Eventually(t, timeout, "the standby to take over on its lagging Foo watch", func(ctx context.Context) (bool, string) {
				m, err := standby.process().Metrics(ctx)
				if err != nil {
					return false, err.Error()
				}
				return mode.tookOver(standby, m)
			})
			tookOver, lagged := time.Since(killed), time.Since(held)
			m, err := standby.process().Metrics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			skips := m.Sum("sample_controller_stale_cache_skips_total", map[string]string{"resource": "foos"})
			whileLagging := deploymentWrites(standby.proxy.Writes())
			for _, w := range whileLagging {
				t.Errorf("the new holder wrote a Deployment from a Foo cache behind the API server: %v", w)
			}

			standby.proxy.ReleaseWatches()
			// Caught up, the new holder syncs each Foo, and finds nothing to write.
			framework.Eventually(t, timeout, "the new holder's syncs on caches that caught up", func(ctx context.Context) (bool, string) {
				m, err := standby.process().Metrics(ctx)
				if err != nil {
					return false, err.Error()
				}
				n := m.Sum("sample_controller_syncs_total", map[string]string{"result": "success"})
				return n >= float64(len(names)), fmt.Sprintf("%v successful syncs", n)
			})
			settled := checkInvariants(t, ns, names)
			after := deploymentUIDs(t, ns)
			for name, uid := range made {
				if after[name] != uid {
					t.Errorf("Deployment %s is %q, want %q, which the replica before made for the changed Foos", name, after[name], uid)
				}
			}
			if extra := deploymentWrites(standby.proxy.Writes()); len(extra) > len(whileLagging) {
				t.Errorf("the new holder wrote Deployments once its watch caught up, where every Foo had converged: %v", extra[len(whileLagging):])
			}
			fmt.Printf("faults: new holder (%s) on a Foo watch %.1fs behind: took over %.1fs after the kill, %d Deployment writes while it lagged, %v stale skips of Foos; the invariants held %.1fs after its syncs on caches caught up\n",
				mode.name, lagged.Seconds(), tookOver.Seconds(), len(whileLagging), skips, settled.Seconds())
		})
	}
}

// waitActing waits until one of replicas acts on the Foos, as acts tells from its
// metrics, and returns it.
func waitActing(t *testing.T, replicas []*proxiedController, acts func(localcluster.Metrics) bool) *proxiedController {
	t.Helper()
	var active *proxiedController
	framework.Eventually(t, timeout, "a replica to act", func(ctx context.Context) (bool, string) {
		for _, c := range replicas {
			if m, err := c.process().Metrics(ctx); err == nil && acts(m) {
				active = c
				return true, ""
			}
		}
		return false, "none acts"
	})
	return active
}

// deploymentWrites keeps the writes of Deployments.
func deploymentWrites(writes []apiproxy.Write) []apiproxy.Write {
	return slices.DeleteFunc(writes, func(w apiproxy.Write) bool { return w.Resource != "deployments" })
}

// fooUID is the UID of the Foo ns/name.
func fooUID(t *testing.T, ns, name string) types.UID {
	t.Helper()
	foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return foo.UID
}

// recreateFoo deletes the Foo ns/name, whose UID is uid, waits until it is gone, and
// creates it again with its Deployment's name and two replicas.
func recreateFoo(t *testing.T, ns, name string, uid types.UID) {
	t.Helper()
	foos := env.Sample.SamplecontrollerV1alpha1().Foos(ns)
	if err := foos.Delete(t.Context(), name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, timeout, "Foo "+name+" to be gone", func(ctx context.Context) (bool, string) {
		_, err := foos.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	createFoo(t, ns, name, name, 2)
}

// deploymentUIDs are the UIDs of the Deployments in ns, by name.
func deploymentUIDs(t *testing.T, ns string) map[string]types.UID {
	t.Helper()
	list, err := env.Kube.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, d := range list.Items {
		uids[d.Name] = d.UID
	}
	return uids
}
