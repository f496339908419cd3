//go:build faults

package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// restartFoos is how many Foos converge through the control-plane restarts.
const restartFoos = 1000

// outage is how long a restarted component stays down.
const outage = 5 * time.Second

// idleOutage is how long the apiserver stays down while the controller is idle: long
// enough for a reflector that kept retrying to wait over 5 s between tries.
const idleOutage = 12 * time.Second

// convergeTimeout bounds each wait for the 1000 Foos to converge: the controller
// manager, which makes their Deployments available, has the same 2 cores to share.
const convergeTimeout = 3 * time.Minute

// TestControlPlaneRestarts brings 1000 Foos to convergence through an apiserver
// restart, an etcd restart and cut watch connections, each while the controller has
// work in flight, and measures how soon it acts after an apiserver restart while idle.
// The restarted apiserver's watch cache starts at etcd's current revision, so the
// controller's watches resume with 410 Gone and relist.
//
// It takes down its control plane, so it has one of its own, installed as the suite's
// is. It runs alone, before the other cases: beside them, on two cores, the sharded
// cases' replicas missed their 4 s Lease renewals and traded slots they would have
// kept (CI, 2026-11-25), and this case's timings measured the other cases' load.
func TestControlPlaneRestarts(t *testing.T) {
	own := ownEnv(t, "faults-restarts")
	ns := own.NewNamespace(t)
	c := newProxiedOn(t, own.Cluster, own.ControllerKubeconfig, ns)
	c.start(t)
	if err := c.process().WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	names := make([]string, restartFoos)
	for i := range names {
		names[i] = fmt.Sprintf("foo-%04d", i)
	}
	var report []string
	// The environment's client keeps client-go's default 5 requests a second.
	cfg := own.Cluster.RESTConfig()
	cfg.QPS, cfg.Burst = 200, 400
	sample := clientset.NewForConfigOrDie(cfg)

	// 1000 new Foos, and the apiserver goes down while the controller creates their
	// Deployments.
	began := time.Now()
	forEach(t, names, func(ctx context.Context, name string) error {
		_, err := sample.SamplecontrollerV1alpha1().Foos(ns).Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: new(int32)},
		}, metav1.CreateOptions{})
		return err
	})
	created := time.Since(began)
	down := restart(t, own.Cluster, localcluster.ComponentAPIServer, outage)
	after := waitConverged(t, sample, ns, names)
	t.Logf("apiserver restart: down %v, converged %v after", down, after)
	report = append(report, fmt.Sprintf("apiserver down %.1fs while creating (Foos created in %.1fs): converged %.1fs after it was back",
		down.Seconds(), created.Seconds(), after.Seconds()))

	// 100 of them scaled, and etcd goes down while the controller updates them.
	scaled := names[:100]
	forEach(t, scaled, func(ctx context.Context, name string) error {
		return patchFoo(ctx, sample, ns, name, `{"replicas":1}`)
	})
	down = restart(t, own.Cluster, localcluster.ComponentEtcd, outage)
	after = waitConverged(t, sample, ns, names)
	t.Logf("etcd restart: down %v, converged %v after", down, after)
	report = append(report, fmt.Sprintf("etcd down %.1fs while scaling 100: converged %.1fs after it was back", down.Seconds(), after.Seconds()))

	// Scaled back, with the controller's connections, watches included, cut.
	forEach(t, scaled, func(ctx context.Context, name string) error {
		return patchFoo(ctx, sample, ns, name, `{"replicas":0}`)
	})
	cut := c.proxy.Cut()
	after = waitConverged(t, sample, ns, names)
	report = append(report, fmt.Sprintf("%d connections cut while scaling 100 back: converged in %.1fs", cut, after.Seconds()))

	checkInvariantsIn(t, own, ns, names)

	// Last, with the invariants checked: the apiserver down while the controller is
	// idle, long enough for a reflector that kept retrying to wait over 5 s between
	// tries, and a Foo scaled as soon as it is ready. How soon the controller acts is
	// how soon its informers watch again.
	down = restart(t, own.Cluster, localcluster.ComponentAPIServer, idleOutage)
	acted := actedOn(t, own.Kube, sample, ns, names[0])
	t.Logf("apiserver restart while idle: down %v, acted on a Foo %v after", down, acted)
	report = append(report, fmt.Sprintf("apiserver down %.1fs while idle: a Foo scaled as soon as it was back acted on %.1fs after",
		down.Seconds(), acted.Seconds()))
	if err := c.process().Err(); err != nil {
		t.Errorf("the controller exited: %v", err)
	}

	// Every Deployment is created once, whatever the controller did not hear back.
	counts := map[string]int{}
	for _, w := range objectWrites(c.proxy.Writes()) {
		key := w.Method + " " + w.Resource
		if w.Subresource != "" {
			key += "/" + w.Subresource
		}
		counts[fmt.Sprintf("%s %d", key, w.Code)]++
	}
	if n := counts["POST deployments 201"]; n != restartFoos {
		t.Errorf("%d Deployments created, want %d", n, restartFoos)
	}
	var writes []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		writes = append(writes, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	fmt.Printf("faults: control-plane restarts, %d Foos: %s; controller writes: %s\n",
		restartFoos, strings.Join(report, "; "), strings.Join(writes, ", "))
}

// restart stops a component of the control plane, leaves it down for the time given,
// starts it again and returns how long it was down, until it was ready again.
func restart(t *testing.T, cluster *localcluster.Cluster, component string, downFor time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	if err := cluster.Component(component).Stop(20 * time.Second); err != nil {
		t.Logf("stopping %s: %v", component, err)
	}
	time.Sleep(downFor)
	if err := cluster.Restart(t.Context(), component); err != nil {
		t.Fatalf("starting %s again: %v", component, err)
	}
	return time.Since(began)
}

// actedOn scales the Foo named to one replica and returns how long the controller took
// to give its Deployment that replica count.
func actedOn(t *testing.T, kube kubernetes.Interface, sample clientset.Interface, ns, name string) time.Duration {
	t.Helper()
	began := time.Now()
	if err := patchFoo(t.Context(), sample, ns, name, `{"replicas":1}`); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, convergeTimeout, "the controller to scale the Deployment of "+name, func(ctx context.Context) (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Spec.Replicas != nil && *d.Spec.Replicas == 1, fmt.Sprintf("replicas %v", d.Spec.Replicas)
	})
	return time.Since(began)
}

// waitConverged waits until every Foo named has a status for its generation with Ready
// True, and returns how long that took. It reads one list each time: checkInvariants
// reads more and is for the end.
func waitConverged(t *testing.T, sample clientset.Interface, ns string, names []string) time.Duration {
	t.Helper()
	began := time.Now()
	framework.Eventually(t, convergeTimeout, fmt.Sprintf("%d Foos to converge", len(names)), func(ctx context.Context) (bool, string) {
		list, err := sample.SamplecontrollerV1alpha1().Foos(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for i := range list.Items {
			foo := &list.Items[i]
			if foo.Status.ObservedGeneration == foo.Generation &&
				meta.IsStatusConditionTrue(foo.Status.Conditions, samplev1alpha1.ConditionReady) {
				done++
			}
		}
		return done == len(names), fmt.Sprintf("%d of %d converged", done, len(names))
	})
	return time.Since(began)
}

// forEach runs do for every name, eight at a time, and fails the test on the first error.
func forEach(t *testing.T, names []string, do func(ctx context.Context, name string) error) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for name := range work {
				if err := do(t.Context(), name); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// patchFoo merges spec, JSON, into the Foo's spec.
func patchFoo(ctx context.Context, sample clientset.Interface, ns, name, spec string) error {
	_, err := sample.SamplecontrollerV1alpha1().Foos(ns).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"spec":`+spec+`}`), metav1.PatchOptions{})
	return err
}
