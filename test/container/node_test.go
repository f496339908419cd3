//go:build e2e

package container

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	gate "github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/test/container/node"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// TestDeploymentOnRealNode runs artifacts/deploy's Deployment, as applied, on the
// cluster's real node: a kubelet with containerd, runc and the CNI bridge plugin, which
// runs the image imported from `make image`. Only placement is added, as a user's
// overlay would add it: a nodeSelector for the real node and its toleration. The
// kubelet then does the rest: pulls nothing (IfNotPresent finds the image), mounts the
// ServiceAccount token, sets the Service environment, applies the security context and
// calls the probes.
func TestDeploymentOnRealNode(t *testing.T) {
	ctx := t.Context()
	deployments := env.Kube.AppsV1().Deployments(framework.DeployNamespace)
	d, err := deployments.Get(ctx, "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()
	onRealNode := func(ctx context.Context) ([]corev1.Pod, error) {
		pods, err := env.Kube.CoreV1().Pods(framework.DeployNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: selector,
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String(),
		})
		if err != nil {
			return nil, err
		}
		return pods.Items, nil
	}

	toleration := node.Toleration
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":%q},"tolerations":[{"key":%q,"operator":%q,"value":%q,"effect":%q}]}}}}`,
		node.Name, toleration.Key, toleration.Operator, toleration.Value, toleration.Effect)
	placed := time.Now()
	env.Kubectl(t, "patch", "-n", framework.DeployNamespace, "deployment/sample-controller", "--type=strategic", "-p", patch)
	t.Cleanup(func() {
		// Back to where artifacts/deploy puts it, so that the next test finds the
		// cluster as the suite set it up.
		out, err := env.KubectlRun(context.Background(), "", "patch", "-n", framework.DeployNamespace, "deployment/sample-controller", "--type=json", "-p",
			`[{"op":"remove","path":"/spec/template/spec/nodeSelector"},{"op":"remove","path":"/spec/template/spec/tolerations"}]`)
		if err != nil {
			t.Errorf("undoing the placement: %v\n%s", err, out)
		}
	})

	// Each Pod's time from its container running to Ready, as polled here.
	running := map[string]time.Time{}
	readyAfter := map[string]time.Duration{}
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%d replicas Ready on %s", *d.Spec.Replicas, node.Name), func(ctx context.Context) (bool, string) {
		pods, err := onRealNode(ctx)
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			if _, ok := running[p.Name]; !ok && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
				running[p.Name] = time.Now()
			}
			if _, ok := readyAfter[p.Name]; !ok && podReady(&p) {
				readyAfter[p.Name] = time.Since(running[p.Name])
			}
			states = append(states, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, podReady(&p)))
		}
		ready := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			}
		}
		return ready == int(*d.Spec.Replicas), strings.Join(states, "; ")
	})
	t.Logf("real node: both replicas Ready %v after the placement was applied", time.Since(placed).Round(time.Millisecond))
	for name, after := range readyAfter {
		t.Logf("real node: %s Ready %v after its container was seen running (the kubelet probes every %ds)",
			name, after.Round(time.Millisecond), d.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds)
	}

	pods, err := onRealNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	framework.Eventually(t, framework.Timeout, "a replica on the real node to hold the Lease", func(ctx context.Context) (bool, string) {
		holder, err := leaseHolder(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(&p) && strings.HasPrefix(holder, p.Name+"_") {
				leader = p.Name
			}
		}
		return leader != "", "holder " + holder
	})

	fenceWithComponent(t, pods, leader)

	// nginx Pods have no toleration: they run on the simulated nodes, and the Foo
	// converges from the real node's controller.
	ns := env.NewNamespace(t)
	env.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(env.RepoRoot, "artifacts", "examples", "example-foo.yaml"))
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 1)
	nginx, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(nginx.Items, func(p corev1.Pod) bool { return p.Spec.NodeName == node.Name }); i >= 0 {
		t.Errorf("the Foo's Pod %s runs on the real node", nginx.Items[i].Name)
	}

	// Deleting the leader's Pod is what a drain or a rollout does: the kubelet sends
	// SIGTERM, the controller releases the Lease, and another replica takes it: the
	// standby, or the replacement Pod if it asks first. Without the release it would
	// wait out the lease duration. The Lease's records from before the deletion on
	// show which: the leader's release comes before the successor's record. How soon
	// the kubelet stops the container depends on the machine's load, not on the
	// controller, so the wait is the framework's and the log shows both spans.
	successor, released, took := handOver(t, leader)
	if released < 0 {
		t.Errorf("%s held the Lease %v after the leader's Pod was deleted, without a release by %s: it waited for the Lease to expire",
			successor, took.Round(time.Millisecond), leader)
	} else {
		t.Logf("real node: %s released the Lease %v after its Pod was deleted (the kubelet stops it with SIGTERM); %s held it %v after the release",
			leader, released.Round(time.Millisecond), successor, (took - released).Round(time.Millisecond))
	}
	env.Kubectl(t, "patch", "-n", ns, "foo/example-foo", "--type=merge", "-p", `{"spec":{"replicas":2}}`)
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 2)
}

// handOver deletes leader's Pod and watches the Lease until another replica holds it.
// It returns that replica, how long after the deletion the leader's release was
// recorded (-1 if no release by it came first) and how long after the deletion the
// other replica held the Lease.
func handOver(t *testing.T, leader string) (successor string, released, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), framework.Timeout)
	defer cancel()
	leases := env.Kube.CoordinationV1().Leases(framework.DeployNamespace)
	lease, err := leases.Get(ctx, "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", lease.Name).String(),
		ResourceVersion: lease.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deleted := time.Now()
	if err := env.Kube.CoreV1().Pods(framework.DeployNamespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	released = -1
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("no replica but %s held the Lease %v after its Pod was deleted; last record: holder %q, released by %q",
				leader, time.Since(deleted).Round(time.Millisecond), ptr.Deref(lease.Spec.HolderIdentity, ""), lease.Annotations[election.ReleasedByAnnotation])
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatal("the watch of the Lease ended")
			}
			if ev.Type == watch.Error {
				t.Fatalf("watching the Lease: %v", apierrors.FromObject(ev.Object))
			}
			next, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			lease = next
			if by, ok := election.ReleasedBy(lease); ok && released < 0 && strings.HasPrefix(by, leader+"_") {
				released = time.Since(deleted)
			}
			if holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_"); holder != "" && holder != leader {
				return holder, released, time.Since(deleted)
			}
		}
	}
}

// fenceWithComponent installs the fencing component's policy and binding as shipped,
// until t ends, and checks it in force on the replicas the kubelet runs: a write with
// the token of leader's Pod is admitted, one with the token of another replica's Pod or
// a token bound to no Pod is refused. From then on every write of the controller goes
// through it, the Foo's and the hand-over's that follow.
func fenceWithComponent(t *testing.T, pods []corev1.Pod, leader string) {
	t.Helper()
	policy, shipped := env.Fencing(t)
	policies := env.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := env.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := policies.Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })
	for _, binding := range shipped {
		if _, err := bindings.Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{}) })
	}

	// Labelled as the controller's own: the policy's binding matches only those.
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fencing-probe", Labels: map[string]string{reconcile.FooUIDLabel: "probe"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fencing-probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "fencing-probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
	// A Deployment created as a dry run: through admission, stored nowhere.
	write := func(c kubernetes.Interface) error {
		_, err := c.AppsV1().Deployments(framework.DeployNamespace).Create(t.Context(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	token, err := framework.ServiceAccountToken(t.Context(), env.Kube, framework.DeployNamespace, framework.ServiceAccount)
	if err != nil {
		t.Fatal(err)
	}
	unboundPath := filepath.Join(env.OutDir, "unbound.kubeconfig")
	if err := framework.WriteTokenKubeconfig(env.Kubeconfig, framework.DeployNamespace, framework.ServiceAccount, token, unboundPath); err != nil {
		t.Fatal(err)
	}
	unbound := framework.KubeconfigClient(t, unboundPath)
	// The API server takes up a new policy within a second or so.
	framework.Eventually(t, framework.Timeout, "the fencing policy to refuse a token bound to no Pod", func(context.Context) (bool, string) {
		err := write(unbound)
		return gate.Fenced(err), fmt.Sprint(err)
	})
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		err := write(env.PodTokenKubeconfig(t, &p, filepath.Join(env.OutDir, p.Name+".kubeconfig")))
		switch {
		case p.Name == leader && err != nil:
			t.Errorf("a write with the token of the leader's Pod %s: %v, want it admitted", p.Name, err)
		case p.Name != leader && !gate.Fenced(err):
			t.Errorf("a write with the token of the standby's Pod %s: %v, want the fencing policy's refusal", p.Name, err)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
