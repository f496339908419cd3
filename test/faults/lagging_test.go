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
)

// TestNewLeaderOnALaggingFooWatch runs two replicas with leader election and holds
// the standby's Foo watch (its Deployment watch stays current) while the leader acts on
// three changes: a Foo renamed to another Deployment, a Foo scaled, a Foo deleted and
// created again under its name. Then the leader is killed. The standby takes over with
// a Foo cache from before the changes and Deployments from after them; its watch is
// held until it has tried every Foo.
//
// From its proxy's log, the new leader must write no Deployment while its cache lags:
// the old leader had converged every Foo, so any write is one a current Foo would not
// make (a Deployment under a name given up, a replica count from the past, the delete
// of the Deployment in use). Once the watch delivers, every Foo converges, and the
// Deployments the changes made are the ones that stay, by UID.
func TestNewLeaderOnALaggingFooWatch(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	const lease = "lagging"
	args := []string{
		"--leader-elect", "--leader-elect-resource-namespace=" + ns, "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	replicas := []*proxiedController{startProxied(t, ns, args...), startProxied(t, ns, args...)}
	leader, holder := waitLeaderOf(t, ns, lease, replicas, "")
	standby := replicas[0]
	if standby == leader {
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

	_ = leader.process().Kill()
	killed := time.Now()
	next, _ := waitLeaderOf(t, ns, lease, []*proxiedController{standby}, holder)
	led := time.Since(killed)
	// Every Foo has been tried: each sync ends in a stale skip or in something
	// written, so the syncs' count covers the three.
	framework.Eventually(t, timeout, "the new leader to try every Foo", func(ctx context.Context) (bool, string) {
		m, err := next.process().Metrics(ctx)
		if err != nil {
			return false, err.Error()
		}
		n := m.Sum("sample_controller_syncs_total", nil)
		return n >= float64(len(names)), fmt.Sprintf("%v syncs", n)
	})
	lagged := time.Since(held)
	m, err := next.process().Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	skips := m.Sum("sample_controller_stale_cache_skips_total", map[string]string{"resource": "foos"})
	whileLagging := deploymentWrites(next.proxy.Writes())
	for _, w := range whileLagging {
		t.Errorf("the new leader wrote a Deployment from a Foo cache behind the API server: %v", w)
	}

	standby.proxy.ReleaseWatches()
	// Caught up, the new leader syncs each Foo, and finds nothing to write.
	framework.Eventually(t, timeout, "the new leader's syncs on caches that caught up", func(ctx context.Context) (bool, string) {
		m, err := next.process().Metrics(ctx)
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
			t.Errorf("Deployment %s is %q, want %q, which the leader before made for the changed Foos", name, after[name], uid)
		}
	}
	if extra := deploymentWrites(next.proxy.Writes()); len(extra) > len(whileLagging) {
		t.Errorf("the new leader wrote Deployments once its watch caught up, where every Foo had converged: %v", extra[len(whileLagging):])
	}
	fmt.Printf("faults: new leader on a Foo watch %.1fs behind: led %.1fs after the kill, %d Deployment writes while it lagged, %v stale skips of Foos; the invariants held %.1fs after its syncs on caches caught up\n",
		lagged.Seconds(), led.Seconds(), len(whileLagging), skips, settled.Seconds())
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
