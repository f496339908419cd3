//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/gitops"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// fooYAML is a Foo manifest as a user writes it.
func fooYAML(name, deploymentName string, replicas int) string {
	return fmt.Sprintf(`apiVersion: samplecontroller.k8s.io/v1alpha1
kind: Foo
metadata:
  name: %s
spec:
  deploymentName: %s
  replicas: %d
`, name, deploymentName, replicas)
}

// waitReady waits until the Foo's status describes its current generation, with the
// Ready condition True and want replicas available, and returns the Foo.
func waitReady(t *testing.T, ns, name string, want int32) *samplev1alpha1.Foo {
	t.Helper()
	return waitReadyWithin(t, timeout, ns, name, want)
}

// waitReadyWithin is waitReady with its own deadline.
func waitReadyWithin(t *testing.T, within time.Duration, ns, name string, want int32) *samplev1alpha1.Foo {
	t.Helper()
	return env.WaitFooReady(t, within, ns, name, want)
}

// liveFoo is the Foo as the API server serves it to tools that do not know its type.
func liveFoo(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	raw, err := env.Sample.SamplecontrollerV1alpha1().RESTClient().Get().
		Namespace(ns).Resource("foos").Name(name).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	foo := &unstructured.Unstructured{}
	if err := foo.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return foo
}

// checkKStatus reads the Foo as the API server serves it, as Flux, Helm's --wait and kpt
// read it (kstatus) and as Argo CD does with artifacts/argocd's health check, and fails
// the test unless they read it as want.
func checkKStatus(t *testing.T, ns, name string, want kstatus.Status) {
	t.Helper()
	foo := liveFoo(t, ns, name)
	got, message, err := gitops.KStatus(foo)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("kstatus reads Foo %s as %s (%s), want %s", name, got, message, want)
	}
	script, err := gitops.ReadHealthCheck(env.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	health, err := gitops.ArgoCDHealth(script, foo)
	if err != nil {
		t.Fatal(err)
	}
	if wantHealth := gitops.HealthOf[want]; health.Status != wantHealth {
		t.Errorf("the Argo CD health check reads Foo %s as %s (%s), want %s", name, health.Status, health.Message, wantHealth)
	}
}

// getDeployment returns the Deployment, failing the test on error.
func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting Deployment %s/%s: %v", ns, name, err)
	}
	return d
}

// runningPods returns the Running Pods that the Foo's status selector selects.
func runningPods(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	return running, nil
}

func waitRunningPods(t *testing.T, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	framework.Eventually(t, timeout, fmt.Sprintf("%d Running Pods for %q", want, selector), func(ctx context.Context) (bool, string) {
		var err error
		pods, err = runningPods(ctx, ns, selector)
		if err != nil {
			return false, err.Error()
		}
		return len(pods) == want, fmt.Sprintf("%d Running", len(pods))
	})
	return pods
}

// TestExampleFoo follows the README: apply the example Foo, see its Deployment and
// Pods come up, look at it with kubectl, and scale it.
func TestExampleFoo(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(env.RepoRoot, "artifacts", "examples", "example-foo.yaml"))

	foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(t.Context(), "example-foo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, timeout, "the Deployment owned by the Foo", func(ctx context.Context) (bool, string) {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "example-foo", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(d, foo), fmt.Sprintf("owner references %v", d.OwnerReferences)
	})

	env.Kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=90s", "foo/example-foo")
	foo = waitReady(t, ns, "example-foo", 1)
	checkKStatus(t, ns, "example-foo", kstatus.CurrentStatus)
	pods := waitRunningPods(t, ns, foo.Status.Selector, 1)
	if node := pods[0].Spec.NodeName; !strings.HasPrefix(node, "kwok-") {
		t.Errorf("Pod %s runs on node %q, want a kwok node", pods[0].Name, node)
	}

	t.Run("kubectl get shows the printer columns, by short name and category too", func(t *testing.T) {
		header := regexp.MustCompile(`NAME\s+DEPLOYMENT\s+DESIRED\s+AVAILABLE\s+READY\s+REASON\s+AGE`)
		row := regexp.MustCompile(`example-foo\s+example-foo\s+1\s+1\s+True\s+DeploymentAvailable\s+\S+`)
		for _, resource := range []string{"foo", "fo", "samplecontroller"} {
			out := env.Kubectl(t, "get", resource, "-n", ns)
			if !header.MatchString(out) || !row.MatchString(out) {
				t.Errorf("kubectl get %s:\n%s\nwant the columns DEPLOYMENT DESIRED AVAILABLE READY REASON AGE filled in", resource, out)
			}
		}
	})

	t.Run("the Argo CD health check installs as docs/operations.md says", func(t *testing.T) {
		// A stand-in for Argo CD's own ConfigMap, patched by the documented command.
		env.Kubectl(t, "create", "configmap", "argocd-cm", "-n", ns)
		key := "resource.customizations.health.samplecontroller.k8s.io_Foo"
		patch := env.Kubectl(t, "create", "configmap", "argocd-cm", "--dry-run=client", "-o", "json",
			"--from-file="+key+"="+filepath.Join(env.RepoRoot, gitops.HealthCheckPath))
		env.Kubectl(t, "patch", "configmap", "argocd-cm", "-n", ns, "--type", "merge", "--patch", patch)
		cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "argocd-cm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		health, err := gitops.ArgoCDHealth(cm.Data[key], liveFoo(t, ns, "example-foo"))
		if err != nil || health.Status != "Healthy" {
			t.Errorf("the health check from argocd-cm reads the ready Foo as %+v (%v), want Healthy", health, err)
		}
	})

	t.Run("kubectl explain shows the field docs", func(t *testing.T) {
		out := env.Kubectl(t, "explain", "foo.spec")
		for _, want := range []string{"deploymentName", "<string> -required-", "valid DNS-1123 subdomain", "replicas", "Defaults to 1"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl explain foo.spec does not mention %q:\n%s", want, out)
			}
		}
	})

	t.Run("kubectl scale reaches the Deployment and the Pods", func(t *testing.T) {
		env.Kubectl(t, "scale", "-n", ns, "foo/example-foo", "--replicas=3")
		foo := waitReady(t, ns, "example-foo", 3)
		if got := *getDeployment(t, ns, "example-foo").Spec.Replicas; got != 3 {
			t.Errorf("Deployment replicas = %d, want 3", got)
		}
		waitRunningPods(t, ns, foo.Status.Selector, 3)
		out := env.Kubectl(t, "get", "foo/example-foo", "-n", ns, "-o", "jsonpath={.spec.replicas} {.status.replicas} {.status.selector}")
		if want := "3 3 " + foo.Status.Selector; out != want {
			t.Errorf("scale fields = %q, want %q", out, want)
		}
	})
}

// TestDriftIsReverted edits the Deployment by hand the ways users do.
func TestDriftIsReverted(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.KubectlIn(t, fooYAML("drift", "drift", 2), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "drift", 2)

	waitSpec := func(what string) *appsv1.Deployment {
		t.Helper()
		var d *appsv1.Deployment
		framework.Eventually(t, timeout, what, func(ctx context.Context) (bool, string) {
			var err error
			d, err = env.Kube.AppsV1().Deployments(ns).Get(ctx, "drift", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := d.Spec.Template.Spec.Containers[0]
			return *d.Spec.Replicas == 2 && c.Name == "nginx" && c.Image == "nginx:latest",
				fmt.Sprintf("replicas %d, container %s image %s", *d.Spec.Replicas, c.Name, c.Image)
		})
		return d
	}

	env.Kubectl(t, "scale", "-n", ns, "deployment/drift", "--replicas=5")
	waitSpec("replicas to be reverted to 2")

	env.Kubectl(t, "set", "image", "-n", ns, "deployment/drift", "nginx=httpd:2")
	waitSpec("the image to be reverted to nginx:latest")

	env.Kubectl(t, "rollout", "restart", "-n", ns, "deployment/drift")
	restartedAt := getDeployment(t, ns, "drift").Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"]
	if restartedAt == "" {
		t.Fatal("kubectl rollout restart left no restartedAt annotation")
	}
	// Make the controller act on the Deployment once more after the restart, and check
	// that the restart survived it.
	env.Kubectl(t, "scale", "-n", ns, "deployment/drift", "--replicas=4")
	d := waitSpec("replicas to be reverted to 2 after a rollout restart")
	if got := d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"]; got != restartedAt {
		t.Errorf("restartedAt annotation = %q, want %q kept", got, restartedAt)
	}
	waitReady(t, ns, "drift", 2)
}

// TestDeletingFooDeletesDeployment relies on the owner reference and the garbage collector.
func TestDeletingFooDeletesDeployment(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.KubectlIn(t, fooYAML("gc", "gc-deploy", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "gc", 1)

	env.Kubectl(t, "delete", "-n", ns, "foo/gc")
	framework.Eventually(t, timeout, "the Deployment to be garbage collected", func(ctx context.Context) (bool, string) {
		_, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "gc-deploy", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

// TestForeignDeploymentIsLeftAlone gives a Foo the name of a Deployment it does not own.
func TestForeignDeploymentIsLeftAlone(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.Kubectl(t, "create", "deployment", "taken", "-n", ns, "--image=httpd:2", "--replicas=2")
	// Let the Deployment settle first, so that nothing but the controller could change it.
	var before *appsv1.Deployment
	framework.Eventually(t, timeout, "the foreign Deployment to settle", func(ctx context.Context) (bool, string) {
		var err error
		before, err = env.Kube.AppsV1().Deployments(ns).Get(ctx, "taken", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return before.Status.ObservedGeneration == before.Generation && before.Status.AvailableReplicas == 2,
			fmt.Sprintf("status %+v", before.Status)
	})

	env.KubectlIn(t, fooYAML("intruder", "taken", 1), "apply", "-n", ns, "-f", "-")
	framework.Eventually(t, timeout, "Ready=False DeploymentNotOwned on the Foo", func(ctx context.Context) (bool, string) {
		foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(ctx, "intruder", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == samplev1alpha1.ReasonDeploymentNotOwned,
			fmt.Sprintf("conditions %+v", foo.Status.Conditions)
	})
	waitWarning(t, ns, "intruder", "DeploymentNotOwned", `Deployment "taken" already exists and is not controlled by this Foo`)
	// What kubectl wait and the GitOps tools see: Stalled, so kstatus reads Failed.
	env.Kubectl(t, "wait", "-n", ns, "--for=condition=Stalled", "--timeout=10s", "foo/intruder")
	checkKStatus(t, ns, "intruder", kstatus.FailedStatus)

	after := getDeployment(t, ns, "taken")
	beforeJSON, _ := json.Marshal(before)
	afterJSON, _ := json.Marshal(after)
	if string(beforeJSON) != string(afterJSON) {
		t.Errorf("the foreign Deployment changed:\nbefore: %s\nafter:  %s", beforeJSON, afterJSON)
	}

	// The foreign Deployment is not in the controller's cache, which holds only those
	// it labelled: its deletion reaches the Foo through a watch of its name, at once,
	// not at the minute's recheck (notOwnedRecheckInterval). Ready also waits for the
	// controller manager, the scheduler and kwok, on two cores shared with the other
	// suites' clusters: half the recheck still tells the two apart.
	env.Kubectl(t, "delete", "deployment", "taken", "-n", ns)
	deleted := time.Now()
	waitReadyWithin(t, 30*time.Second, ns, "intruder", 1)
	checkKStatus(t, ns, "intruder", kstatus.CurrentStatus)
	fmt.Printf("e2e: a Foo whose Deployment name a foreign Deployment held was Ready %.1fs after that Deployment was deleted\n", time.Since(deleted).Seconds())
}

// policyRule is one validation of an admission policy: a CEL expression that must
// hold, and the message when it does not.
type policyRule struct{ expression, message string }

// admissionPolicy is a ValidatingAdmissionPolicy and its binding, both named name, that
// refuse to create or update Deployments in the namespace ns unless every rule holds.
func admissionPolicy(name, ns string, rules ...policyRule) string {
	var validations strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&validations, "  - expression: %q\n    message: %q\n", r.expression, r.message)
	}
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: %[1]s
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  validations:
%[3]s---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: %[1]s
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: %[2]s
`, name, ns, validations.String())
}

// applyPolicy applies an admission policy, deletes it when the test ends, and waits
// until it refuses probe, a Deployment manifest it must refuse with want.
func applyPolicy(t *testing.T, ns, policy, probe, want string) {
	t.Helper()
	env.KubectlIn(t, policy, "apply", "-f", "-")
	t.Cleanup(func() {
		if out, err := env.KubectlRun(context.Background(), policy, "delete", "--ignore-not-found", "-f", "-"); err != nil {
			t.Logf("deleting the policy: %v\n%s", err, out)
		}
	})
	framework.Eventually(t, timeout, "the policy to refuse Deployments", func(ctx context.Context) (bool, string) {
		out, err := env.KubectlRun(ctx, probe, "create", "-n", ns, "--dry-run=server", "-f", "-")
		return err != nil && strings.Contains(out, want), out
	})
}

// probeDeployment is a Deployment manifest named name with one container of image.
func probeDeployment(name, image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
      - name: app
        image: %[2]s
`, name, image)
}

// waitWarning waits until kubectl shows a Warning event with reason on the Foo name
// whose message begins with message.
func waitWarning(t *testing.T, ns, name, reason, message string) {
	t.Helper()
	framework.Eventually(t, timeout, fmt.Sprintf("a Warning event %s on Foo %s", reason, name), func(ctx context.Context) (bool, string) {
		out, err := env.KubectlRun(ctx, "", "get", "events", "-n", ns, "--field-selector", "type=Warning,reason="+reason,
			"-o", "jsonpath={range .items[*]}{.involvedObject.kind}/{.involvedObject.name}: {.message}{\"\\n\"}{end}")
		return err == nil && strings.Contains(out, "Foo/"+name+": "+message), out
	})
}

// waitRejected waits until the Foo reports Ready=False DeploymentRejected for its
// current generation, with a Warning event, and returns the condition's message.
func waitRejected(t *testing.T, ns, name string) string {
	t.Helper()
	var message string
	framework.Eventually(t, timeout, fmt.Sprintf("Ready=False DeploymentRejected on Foo %s", name), func(ctx context.Context) (bool, string) {
		foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != samplev1alpha1.ReasonDeploymentRejected || c.ObservedGeneration != foo.Generation {
			return false, fmt.Sprintf("generation %d, conditions %+v", foo.Generation, foo.Status.Conditions)
		}
		message = c.Message
		return true, ""
	})
	waitWarning(t, ns, name, "DeploymentRejected", message)
	checkKStatus(t, ns, name, kstatus.FailedStatus)
	return message
}

// noHotLoop watches the controller's failed syncs for a few seconds and fails the test
// if they grow like a tight loop's: the per-item backoff doubles from 5 ms, so a few
// seconds hold about ten tries where a loop would make thousands.
func noHotLoop(t *testing.T, p *localcluster.Controller) {
	t.Helper()
	const window, most = 5 * time.Second, 20
	failed := func() float64 {
		failed, rejected := failedSyncs(t, p)
		return failed + rejected
	}
	before := failed()
	deadline := time.Now().Add(window)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		if n := failed() - before; n > most {
			t.Fatalf("%v failed syncs within %v: the refused Foo is retried in a tight loop", n, window)
		}
	}
}

// TestRefusedDeploymentIsReported has admission policies refuse a Foo's Deployment: its
// creation, a scale-up, and the revert of a hand edit. Each time the Foo says why, in
// its Ready condition and a Warning event; the controller retries with backoff, not in
// a loop; and once the policy is gone the Foos converge without anyone touching them.
func TestRefusedDeploymentIsReported(t *testing.T) {
	t.Parallel()
	ns, p := env.NamespaceWithController(t)
	const (
		refusedName   = "Deployments named refused-* are not allowed in this namespace"
		capped        = "Deployments named capped-* may have at most 2 replicas"
		latestRefused = "Deployments named pinned-* must not run :latest images"
	)
	policy := admissionPolicy("e2e-"+ns, ns,
		policyRule{"!object.metadata.name.startsWith('refused-')", refusedName},
		policyRule{"!object.metadata.name.startsWith('capped-') || object.spec.replicas <= 2", capped})
	applyPolicy(t, ns, policy, probeDeployment("refused-probe", "nginx"), refusedName)

	// A refused create.
	_, rejectedBefore := failedSyncs(t, p)
	env.KubectlIn(t, fooYAML("refused", "refused-web", 1), "apply", "-n", ns, "-f", "-")
	message := waitRejected(t, ns, "refused")
	// The sync that wrote that status is counted when it returns, a moment after.
	framework.Eventually(t, timeout, "the refused sync to be counted", func(context.Context) (bool, string) {
		_, rejected := failedSyncs(t, p)
		return rejected > rejectedBefore, fmt.Sprintf(`sample_controller_syncs_total{result="rejected"} at %v, %v before the refusal`, rejected, rejectedBefore)
	})
	for _, want := range []string{`The API server refused to write Deployment "refused-web"`, refusedName} {
		if !strings.Contains(message, want) {
			t.Errorf("Ready message %q does not contain %q", message, want)
		}
	}
	noHotLoop(t, p)

	// A refused update of a new spec: the Deployment keeps running its 2 replicas, and
	// the Foo reports them.
	env.KubectlIn(t, fooYAML("capped", "capped-web", 2), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "capped", 2)
	env.Kubectl(t, "scale", "-n", ns, "foo/capped", "--replicas=3")
	if message := waitRejected(t, ns, "capped"); !strings.Contains(message, capped) {
		t.Errorf("Ready message %q does not name the policy's rule", message)
	}
	noHotLoop(t, p)
	foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(t.Context(), "capped", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if foo.Status.AvailableReplicas != 2 {
		t.Errorf("availableReplicas = %d while the scale-up is refused, want the 2 that run", foo.Status.AvailableReplicas)
	}

	// A refused revert of a hand edit, while the edited Deployment is itself available.
	env.KubectlIn(t, fooYAML("pinned", "pinned-web", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "pinned", 1)
	pinned := admissionPolicy("e2e-"+ns+"-pinned", ns,
		policyRule{"!object.metadata.name.startsWith('pinned-') || object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))", latestRefused})
	applyPolicy(t, ns, pinned, probeDeployment("pinned-probe", "nginx:latest"), latestRefused)
	env.Kubectl(t, "set", "image", "-n", ns, "deployment/pinned-web", "nginx=httpd:2")
	if message := waitRejected(t, ns, "pinned"); !strings.Contains(message, latestRefused) {
		t.Errorf("Ready message %q does not name the policy's rule", message)
	}
	framework.Eventually(t, timeout, "the hand-edited Deployment to roll out", func(ctx context.Context) (bool, string) {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "pinned-web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return s.ObservedGeneration == d.Generation && s.Replicas == 1 && s.UpdatedReplicas == 1 && s.AvailableReplicas == 1,
			fmt.Sprintf("image %s, status %+v", d.Spec.Template.Spec.Containers[0].Image, s)
	})
	noHotLoop(t, p)

	// A refused Foo retries at least once a minute (rejectedRecheckInterval), and
	// nothing else brings it back when a policy goes away: allow that minute on top.
	env.KubectlIn(t, policy, "delete", "-f", "-")
	env.KubectlIn(t, pinned, "delete", "-f", "-")
	recovery := time.Minute + timeout
	waitReadyWithin(t, recovery, ns, "refused", 1)
	waitReadyWithin(t, recovery, ns, "capped", 3)
	waitReadyWithin(t, recovery, ns, "pinned", 1)
	if image := getDeployment(t, ns, "pinned-web").Spec.Template.Spec.Containers[0].Image; image != "nginx:latest" {
		t.Errorf("pinned-web runs %s once the policy is gone, want the Foo's nginx:latest", image)
	}
}

// TestInvalidFoosAreRejected checks the CRD's validation messages.
func TestInvalidFoosAreRejected(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	tests := []struct {
		name     string
		manifest string
		want     []string
	}{{
		name:     "missing deploymentName",
		manifest: "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata:\n  name: bad\nspec:\n  replicas: 1\n",
		want:     []string{"spec.deploymentName: Required value"},
	}, {
		name:     "deploymentName not a DNS-1123 subdomain",
		manifest: fooYAML("bad", "Not_A_Name", 1),
		want:     []string{"spec.deploymentName: Invalid value", "must be a valid DNS-1123 subdomain"},
	}, {
		name:     "deploymentName too long",
		manifest: fooYAML("bad", strings.Repeat("a", 254), 1),
		want:     []string{"spec.deploymentName: Too long", "253"},
	}, {
		name:     "negative replicas",
		manifest: fooYAML("bad", "ok", -1),
		want:     []string{"spec.replicas: Invalid value: -1", "greater than or equal to 0"},
	}, {
		name:     "replicas beyond int32",
		manifest: strings.Replace(fooYAML("bad", "ok", 1), "replicas: 1", "replicas: 2147483648", 1),
		want:     []string{"spec.replicas: Invalid value: 2147483648"},
	}, {
		name:     "replicas of the wrong type",
		manifest: strings.Replace(fooYAML("bad", "ok", 1), "replicas: 1", `replicas: "three"`, 1),
		want:     []string{"spec.replicas: Invalid value", "must be of type integer"},
	}, {
		name:     "deploymentName of the wrong type",
		manifest: strings.Replace(fooYAML("bad", "ok", 1), "deploymentName: ok", "deploymentName: 42", 1),
		want:     []string{"spec.deploymentName: Invalid value", "must be of type string"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := env.KubectlRun(t.Context(), tc.manifest, "apply", "-n", ns, "-f", "-")
			if err == nil {
				t.Fatalf("kubectl apply accepted the Foo:\n%s", out)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("error does not contain %q:\n%s", want, out)
				}
			}
		})
	}

	t.Run("defaults replicas to 1", func(t *testing.T) {
		env.KubectlIn(t, "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata:\n  name: defaulted\nspec:\n  deploymentName: defaulted\n", "apply", "-n", ns, "-f", "-")
		if out := env.Kubectl(t, "get", "foo/defaulted", "-n", ns, "-o", "jsonpath={.spec.replicas}"); out != "1" {
			t.Errorf("spec.replicas = %q, want 1", out)
		}
	})
}

// TestRenamingDeployment changes deploymentName and expects one Deployment, under the new name.
func TestRenamingDeployment(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.KubectlIn(t, fooYAML("renamed", "first", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "renamed", 1)

	env.KubectlIn(t, fooYAML("renamed", "second", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "renamed", 1)
	framework.Eventually(t, timeout, "only the Deployment under the new name", func(ctx context.Context) (bool, string) {
		list, err := env.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, d := range list.Items {
			if d.DeletionTimestamp == nil {
				names = append(names, d.Name)
			}
		}
		return len(names) == 1 && names[0] == "second", fmt.Sprintf("Deployments %v", names)
	})
}

// TestControllerKilledMidWork kills the controller while it is creating Deployments
// and checks that a new one finishes the work without duplicates.
func TestControllerKilledMidWork(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	const n = 40
	var manifests []string
	for i := range n {
		manifests = append(manifests, fooYAML(fmt.Sprintf("foo-%02d", i), fmt.Sprintf("deploy-%02d", i), 1))
	}
	env.KubectlIn(t, strings.Join(manifests, "---\n"), "apply", "-n", ns, "-f", "-")

	p := env.StartController(t, ns)
	framework.Eventually(t, timeout, "the controller to start creating Deployments", func(ctx context.Context) (bool, string) {
		list, err := env.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) > 0, fmt.Sprintf("%d Deployments", len(list.Items))
	})
	_ = p.Kill()
	list, err := env.Kube.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the controller with %d of %d Deployments created", len(list.Items), n)

	env.StartController(t, ns)
	for i := range n {
		waitReady(t, ns, fmt.Sprintf("foo-%02d", i), 1)
	}
	list, err = env.Kube.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[types.UID]int{}
	for _, d := range list.Items {
		ref := metav1.GetControllerOf(&d)
		if ref == nil || ref.Kind != "Foo" {
			t.Errorf("Deployment %s has no Foo controller", d.Name)
			continue
		}
		owners[ref.UID]++
	}
	if len(list.Items) != n || len(owners) != n {
		t.Errorf("got %d Deployments owned by %d Foos, want %d each", len(list.Items), len(owners), n)
	}
	for uid, count := range owners {
		if count != 1 {
			t.Errorf("Foo %s owns %d Deployments, want 1", uid, count)
		}
	}
}

// TestNamespaceFlag runs the controller with --namespace and checks that Foos
// elsewhere are ignored.
func TestNamespaceFlag(t *testing.T) {
	t.Parallel()
	watched, ignored := env.NewNamespace(t), env.NewNamespace(t)
	// The ignored Foo comes first: a controller that saw it would handle it first.
	env.KubectlIn(t, fooYAML("elsewhere", "elsewhere", 1), "apply", "-n", ignored, "-f", "-")
	env.KubectlIn(t, fooYAML("here", "here", 1), "apply", "-n", watched, "-f", "-")

	p := env.StartController(t, watched)
	waitReady(t, watched, "here", 1)
	if err := p.Stop(localcluster.ControllerStopGrace); err != nil {
		t.Errorf("controller exited with %v after SIGTERM, want a clean exit", err)
	}

	if _, err := env.Kube.AppsV1().Deployments(ignored).Get(t.Context(), "elsewhere", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment for the Foo in the ignored namespace: err = %v, want NotFound", err)
	}
	foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ignored).Get(t.Context(), "elsewhere", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(foo.Status.Conditions) != 0 || foo.Status.ObservedGeneration != 0 {
		t.Errorf("Foo in the ignored namespace has status %+v, want none", foo.Status)
	}
	// A Foo no controller has seen: the CRD's default status (observedGeneration 0) makes
	// the GitOps tools wait for it, rather than read it as current.
	checkKStatus(t, ignored, "elsewhere", kstatus.InProgressStatus)
}
