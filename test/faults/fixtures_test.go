//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/apiproxy"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// proxiedController is a controller whose every request goes through its own API
// proxy, so that its writes are its own in the proxy's log, and that a case can act
// on them.
type proxiedController struct {
	proxy      *apiproxy.Proxy
	kubeconfig string
	args       []string
	// env is added to the controller's environment, every process of it.
	env []string

	mu   sync.Mutex
	proc *localcluster.Controller
}

// proxies counts the proxies started, to name them and their kubeconfigs.
var proxies atomic.Int64

// startProxied starts an API proxy and, behind it, a controller watching ns with
// extra flags. Both stop when t ends, and the proxy's log of writes is kept in
// env.OutDir.
func startProxied(t *testing.T, ns string, args ...string) *proxiedController {
	t.Helper()
	c := newProxied(t, ns, args...)
	c.start(t)
	return c
}

// newProxied starts the API proxy of a controller, without the controller.
func newProxied(t *testing.T, ns string, args ...string) *proxiedController {
	t.Helper()
	return newProxiedOn(t, env.Cluster, env.ControllerKubeconfig, ns, args...)
}

// newProxiedOn is newProxied on another cluster, with the credentials of kubeconfig.
func newProxiedOn(t *testing.T, cluster *localcluster.Cluster, kubeconfig, ns string, args ...string) *proxiedController {
	t.Helper()
	name := fmt.Sprintf("proxy-%d-%s", proxies.Add(1), strings.ReplaceAll(t.Name(), "/", "_"))
	proxy, err := apiproxy.StartForCluster(t.Context(), cluster, name)
	if err != nil {
		t.Fatal(err)
	}
	c := &proxiedController{
		proxy:      proxy,
		kubeconfig: filepath.Join(env.OutDir, name+".kubeconfig"),
		args:       append([]string{"--namespace=" + ns}, args...),
	}
	t.Cleanup(func() {
		proxy.Close()
		var log strings.Builder
		for _, w := range proxy.Writes() {
			fmt.Fprintf(&log, "received %s sent %s answered %v\n", w.Received.Format("15:04:05.000"), w.Sent.Format("15:04:05.000"), w)
		}
		_ = os.WriteFile(filepath.Join(env.OutDir, name+".writes"), []byte(log.String()), 0o644)
	})
	if err := proxy.WriteKubeconfig(kubeconfig, c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return c
}

// start starts the controller, a new process after the first, and returns once it
// serves its probes.
func (c *proxiedController) start(t *testing.T) *localcluster.Controller {
	t.Helper()
	proc := env.StartControllerWith(t, localcluster.ControllerOptions{Kubeconfig: c.kubeconfig, Args: c.args, Env: c.env})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proc = proc
	return proc
}

// process is the controller's current process.
func (c *proxiedController) process() *localcluster.Controller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// writesOf is the proxies' logs of writes of controllers, in their order.
func writesOf(controllers []*proxiedController) [][]apiproxy.Write {
	var logs [][]apiproxy.Write
	for _, c := range controllers {
		logs = append(logs, c.proxy.Writes())
	}
	return logs
}

// objectWrites keeps the writes of Foos and Deployments: Events and Leases are
// written asynchronously, on timers, and say nothing of the controller's decisions.
func objectWrites(writes []apiproxy.Write) []apiproxy.Write {
	return slices.DeleteFunc(writes, func(w apiproxy.Write) bool { return !isObjectWrite(w) })
}

func isObjectWrite(w apiproxy.Write) bool {
	return w.Resource == "foos" || w.Resource == "deployments"
}

// ownedWrites keeps the writes a replica may make only inside its tenure: of Foos,
// Deployments and Events (written apart from the syncs, but through the same
// gate).
func ownedWrites(writes []apiproxy.Write) []apiproxy.Write {
	return slices.DeleteFunc(writes, func(w apiproxy.Write) bool { return !isObjectWrite(w) && w.Resource != "events" })
}

// createFoo creates a Foo as a user would.
func createFoo(t *testing.T, ns, name, deploymentName string, replicas int32) {
	t.Helper()
	foo := &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: deploymentName, Replicas: ptr.To(replicas)},
	}
	if _, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Create(t.Context(), foo, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Foo %s/%s: %v", ns, name, err)
	}
}

// patchFooSpec merges spec, JSON, into the Foo's spec, as `kubectl patch` does.
func patchFooSpec(t *testing.T, ns, name, spec string) {
	t.Helper()
	patch := []byte(`{"spec":` + spec + `}`)
	if _, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching Foo %s/%s with %s: %v", ns, name, spec, err)
	}
}

// violations lists how the namespace breaks the invariants; none means the controller
// has converged. Every Foo named in want exists and no other; each controls exactly
// one Deployment, by UID, named as its spec says, running its spec's replicas and
// image; its status describes its current generation; its Ready condition is True for
// that generation exactly when every replica of the Deployment is available; and
// every Deployment is controlled by one of the Foos.
func violations(ctx context.Context, ns string, want []string) ([]string, error) {
	return violationsIn(ctx, env.Kube, env.Sample, ns, want)
}

// violationsIn is violations on another cluster; ns "" is every namespace, where the
// Foos' names must be unique.
func violationsIn(ctx context.Context, kube kubernetes.Interface, sample clientset.Interface, ns string, want []string) ([]string, error) {
	foos, err := sample.SamplecontrollerV1alpha1().Foos(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	deployments, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var found []string
	controlled := map[types.UID][]*appsv1.Deployment{}
	for i := range deployments.Items {
		d := &deployments.Items[i]
		if ref := metav1.GetControllerOf(d); ref != nil {
			controlled[ref.UID] = append(controlled[ref.UID], d)
		}
	}
	var broken []string
	for i := range foos.Items {
		foo := &foos.Items[i]
		found = append(found, foo.Name)
		broken = append(broken, fooViolations(foo, controlled[foo.UID])...)
		delete(controlled, foo.UID)
	}
	for _, ds := range controlled {
		for _, d := range ds {
			broken = append(broken, fmt.Sprintf("Deployment %s is controlled by no Foo here (%v)", d.Name, d.OwnerReferences))
		}
	}
	for i := range deployments.Items {
		if d := &deployments.Items[i]; metav1.GetControllerOf(d) == nil {
			broken = append(broken, fmt.Sprintf("Deployment %s has no controller", d.Name))
		}
	}
	slices.Sort(found)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(found, want) {
		broken = append(broken, fmt.Sprintf("Foos %v, want %v", found, want))
	}
	return broken, nil
}

// fooViolations are the invariants one Foo breaks, given the Deployments it controls.
func fooViolations(foo *samplev1alpha1.Foo, owned []*appsv1.Deployment) []string {
	var broken []string
	fail := func(format string, args ...any) {
		broken = append(broken, fmt.Sprintf("Foo %s: ", foo.Name)+fmt.Sprintf(format, args...))
	}
	if foo.Status.ObservedGeneration != foo.Generation {
		fail("status.observedGeneration %d, generation %d", foo.Status.ObservedGeneration, foo.Generation)
	}
	ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != foo.Generation {
		fail("not Ready for generation %d: %+v", foo.Generation, ready)
	}
	if len(owned) != 1 {
		names := make([]string, 0, len(owned))
		for _, d := range owned {
			names = append(names, d.Name)
		}
		fail("controls Deployments %v, want exactly one", names)
		return broken
	}
	d := owned[0]
	if d.Name != foo.Spec.DeploymentName {
		fail("controls Deployment %s, spec says %s", d.Name, foo.Spec.DeploymentName)
	}
	want := reconcile.DesiredReplicas(foo)
	if got := ptr.Deref(d.Spec.Replicas, 1); got != want {
		fail("Deployment %s has %d replicas, spec says %d", d.Name, got, want)
	}
	if images := containerImages(d); !slices.Contains(images, reconcile.ContainerName+"="+reconcile.ContainerImage) {
		fail("Deployment %s runs %v, want %s=%s", d.Name, images, reconcile.ContainerName, reconcile.ContainerImage)
	}
	if d.Status.ObservedGeneration != d.Generation || d.Status.AvailableReplicas != want || foo.Status.AvailableReplicas != d.Status.AvailableReplicas {
		fail("Deployment %s has %d of %d available (generation %d observed %d), the Foo says %d",
			d.Name, d.Status.AvailableReplicas, want, d.Generation, d.Status.ObservedGeneration, foo.Status.AvailableReplicas)
	}
	return broken
}

func containerImages(d *appsv1.Deployment) []string {
	var images []string
	for _, c := range d.Spec.Template.Spec.Containers {
		images = append(images, c.Name+"="+c.Image)
	}
	return images
}

// checkInvariants waits until the namespace holds the invariants of violations, and
// fails the test with what still breaks them after timeout. It returns how long it
// waited.
func checkInvariants(t *testing.T, ns string, want []string) time.Duration {
	t.Helper()
	return checkInvariantsIn(t, env, ns, want)
}

// checkInvariantsIn is checkInvariants on the cluster of another suite environment.
func checkInvariantsIn(t *testing.T, e *framework.Env, ns string, want []string) time.Duration {
	t.Helper()
	began := time.Now()
	var last string
	framework.Eventually(t, timeout, "the invariants to hold in "+ns, func(ctx context.Context) (bool, string) {
		broken, err := violationsIn(ctx, e.Kube, e.Sample, ns, want)
		if err != nil {
			// The last check that could read the namespace says more.
			return false, fmt.Sprintf("%v; before that: %s", err, last)
		}
		last = strings.Join(broken, "; ")
		return len(broken) == 0, last
	})
	return time.Since(began)
}

// endState is what a namespace converged to, without what differs between two runs of
// the same steps: UIDs, times, resource versions.
type endState struct {
	Foos        []fooEnd
	Deployments []deploymentEnd
}

type fooEnd struct {
	Name       string
	Generation int64
	Status     samplev1alpha1.FooStatus
}

type deploymentEnd struct {
	Name, Owner string
	Replicas    int32
	Images      []string
}

// readEndState reads the Foos and Deployments of ns.
func readEndState(ctx context.Context, ns string) (endState, error) {
	var s endState
	foos, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	deployments, err := env.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	deploymentUIDs := map[string]types.UID{}
	for _, d := range deployments.Items {
		deploymentUIDs[d.Name] = d.UID
	}
	names := map[types.UID]string{}
	for _, foo := range foos.Items {
		names[foo.UID] = foo.Name
		status := *foo.Status.DeepCopy()
		// The selector names the Foo's UID, the record its Deployments' UIDs and a
		// token's hash.
		status.Selector = strings.ReplaceAll(status.Selector, string(foo.UID), "<uid>")
		for i := range status.Conditions {
			status.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		for i, r := range status.Deployments {
			switch {
			case r.UID != "" && r.UID == deploymentUIDs[r.Name]:
				status.Deployments[i].UID = "<uid of its Deployment>"
			case r.UID != "":
				status.Deployments[i].UID = "<uid of no Deployment here>"
			}
			if r.Creating != "" {
				status.Deployments[i].Creating = "<token hash>"
			}
		}
		s.Foos = append(s.Foos, fooEnd{Name: foo.Name, Generation: foo.Generation, Status: status})
	}
	for i := range deployments.Items {
		d := &deployments.Items[i]
		owner := "<none>"
		if ref := metav1.GetControllerOf(d); ref != nil {
			owner = ref.Kind + "/" + ref.Name
			if names[ref.UID] != ref.Name {
				owner += " (UID of no Foo here)"
			}
		}
		s.Deployments = append(s.Deployments, deploymentEnd{Name: d.Name, Owner: owner, Replicas: ptr.Deref(d.Spec.Replicas, 1), Images: containerImages(d)})
	}
	return s, nil
}

// ownEnv sets up a suite environment of its own for a case that takes its control
// plane down: a cluster with artifacts/deploy installed, as the suite's, in
// _output/<suite>. It is torn down when the case ends.
func ownEnv(t *testing.T, suite string) *framework.Env {
	t.Helper()
	e, err := framework.Setup(t.Context(), suite)
	if err != nil {
		t.Fatalf("setting up the cluster of %s: %v", suite, err)
	}
	t.Cleanup(func() {
		if err := e.TearDown(); err != nil {
			t.Errorf("stopping the cluster of %s: %v", suite, err)
		}
	})
	return e
}
