//go:build e2e

package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-e6610ed6/sample-controller/test/container/node"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// TestHelmTestOnRealNode moves the suite's kubectl install to the chart, as
// docs/operations.md says (hack/deploy.sh handover, then helm install), with values that
// place the Pods on the real node, and runs helm test there: the test Pod, the
// controller's image under the kubelet, passes on the converged install and fails once
// the controller is scaled to zero. The kubectl install is put back at the end.
func TestHelmTestOnRealNode(t *testing.T) {
	ctx := t.Context()
	const release = "sample-controller"
	ns := framework.DeployNamespace
	values := filepath.Join(t.TempDir(), "values.yaml")
	toleration := node.Toleration
	err := os.WriteFile(values, fmt.Appendf(nil, "nodeSelector: {kubernetes.io/hostname: %s}\ntolerations: [{key: %s, operator: %s, value: %s, effect: %s}]\n",
		node.Name, toleration.Key, toleration.Operator, toleration.Value, toleration.Effect), 0o644)
	if err != nil {
		t.Fatal(err)
	}

	if out, err := env.Deploy(ctx, "handover", ""); err != nil {
		t.Fatalf("hack/deploy.sh handover: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// Back to the kubectl install the suite set up, for the tests after this one.
		ctx := context.Background()
		if out, err := env.HelmRun(ctx, "uninstall", release, "-n", ns, "--wait", "--timeout", "2m"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		if out, err := env.KubectlRun(ctx, "", "delete", "-n", ns, "pod,serviceaccount,role,rolebinding", "-l", "app.kubernetes.io/name=sample-controller-test", "--ignore-not-found"); err != nil {
			t.Errorf("deleting what the failed helm test left: %v\n%s", err, out)
		}
		if out, err := env.KubectlRun(ctx, "", "delete", "clusterrolebinding", "-l", "app.kubernetes.io/name=sample-controller-test", "--ignore-not-found"); err != nil {
			t.Errorf("deleting what the failed helm test left: %v\n%s", err, out)
		}
		if out, err := env.Deploy(ctx, "apply", ""); err != nil {
			t.Errorf("hack/deploy.sh apply: %v\n%s", err, out)
		}
		if err := env.WriteServiceAccountKubeconfig(ctx, ns, framework.ServiceAccount, env.ControllerKubeconfig); err != nil {
			t.Error(err)
		}
	})
	chart := filepath.Join(env.RepoRoot, "artifacts", "chart", "sample-controller")
	env.Helm(t, "install", release, chart, "-n", ns, "-f", values, "--wait", "--timeout", "3m")

	out := env.Helm(t, "test", release, "-n", ns, "--logs", "--timeout", "3m")
	t.Logf("helm test on the converged install:\n%s", out)
	if !strings.Contains(out, "answer an authenticated scrape") {
		t.Errorf("helm test passed without the check's report:\n%s", out)
	}
	// The kubelet passes the container's memory limit (MEMORY_LIMIT, from the downward
	// API), and the controller keeps the Go runtime to 90% of it.
	d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	soft := fmt.Sprintf("softMemoryLimit=%d", int64(float64(d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value())*0.9))
	if log := env.Kubectl(t, "logs", "-n", ns, "deployment/sample-controller"); !strings.Contains(log, soft) {
		t.Errorf("the controller's log does not say %s:\n%s", soft, log)
	}
	pod, err := env.Kube.CoreV1().Pods(ns).Get(ctx, "sample-controller-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != node.Name || pod.Status.Phase != corev1.PodSucceeded {
		t.Errorf("the test Pod ran on %q and is %s, want %s and Succeeded", pod.Spec.NodeName, pod.Status.Phase, node.Name)
	}

	env.Kubectl(t, "scale", "-n", ns, "deployment/sample-controller", "--replicas=0")
	framework.Eventually(t, framework.Timeout, "the controller's Pods to be gone", func(ctx context.Context) (bool, string) {
		pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sample-controller"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d Pods", len(pods.Items))
	})
	out, err = env.HelmRun(ctx, "test", release, "-n", ns, "--timeout", "3m")
	if err == nil {
		t.Fatalf("helm test passed with the controller scaled to zero:\n%s", out)
	}
	log := env.Kubectl(t, "logs", "-n", ns, "pod/sample-controller-test")
	if !strings.Contains(log, "no replica of the controller is Ready") {
		t.Errorf("helm test failed with the controller scaled to zero, but its Pod does not say why:\n%s\n%s", out, log)
	}
	t.Logf("helm test with the controller scaled to zero: %v\n%s", err, log)
	left := env.Kubectl(t, "get", "-n", ns, "pod,serviceaccount,role,rolebinding,clusterrolebinding", "-l", "app.kubernetes.io/name=sample-controller-test", "-o", "name")
	t.Logf("left by the failed helm test, until the next: %s", strings.Join(strings.Fields(left), ", "))
}
