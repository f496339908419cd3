//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// wakeWithin is how soon a Foo must act on a change that ends its wait: well inside
// the controller's one-minute recheck, so that passing proves an event woke it.
const wakeWithin = 20 * time.Second

// notOwnedRecheck is how long after a Foo finds its name taken the controller looks
// again by itself (notOwnedRecheckInterval).
const notOwnedRecheck = time.Minute

// TestRecreatedFooTakesOverItsName replaces a Foo (delete and create under the same
// name, as `kubectl replace --force` or a Helm reinstall does). The new Foo must get
// its own Deployment as soon as the garbage collector has removed the old one.
func TestRecreatedFooTakesOverItsName(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	manifest := fooYAML("again", "again", 1)
	env.KubectlIn(t, manifest, "apply", "-n", ns, "-f", "-")
	old := waitReady(t, ns, "again", 1)

	env.KubectlIn(t, manifest, "replace", "--force", "-n", ns, "-f", "-")
	recreated, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(t.Context(), "again", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if recreated.UID == old.UID {
		t.Fatal("kubectl replace --force kept the Foo's UID")
	}

	// The garbage collector's pace is its own; the controller's starts when the old
	// Deployment is gone.
	var gone time.Time
	framework.Eventually(t, timeout, "the old Foo's Deployment to be garbage collected", func(ctx context.Context) (bool, string) {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "again", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && metav1.IsControlledBy(d, recreated)) {
			gone = time.Now()
			return true, ""
		}
		return false, fmt.Sprintf("get: %v, owners %v", err, ownersOf(d))
	})
	framework.Eventually(t, wakeWithin, "the recreated Foo's own Deployment", func(ctx context.Context) (bool, string) {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "again", metav1.GetOptions{})
		return err == nil && metav1.IsControlledBy(d, recreated), fmt.Sprintf("get: %v, owners %v", err, ownersOf(d))
	})
	t.Logf("the recreated Foo had its Deployment %v after the old one was gone", time.Since(gone).Round(time.Millisecond))
	waitReadyWithin(t, wakeWithin, ns, "again", 1)
}

// TestRemovedOwnerReferenceIsReported takes the Deployment away from its Foo by hand:
// the Foo must say so at once, not when the Foo itself next changes.
func TestRemovedOwnerReferenceIsReported(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.KubectlIn(t, fooYAML("orphan", "orphan", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "orphan", 1)

	env.Kubectl(t, "patch", "-n", ns, "deployment/orphan", "--type=json", "-p", `[{"op":"remove","path":"/metadata/ownerReferences"}]`)
	framework.Eventually(t, wakeWithin, "the Foo to report that it no longer controls its Deployment", func(ctx context.Context) (bool, string) {
		foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(ctx, "orphan", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
		return ready != nil && ready.Reason == samplev1alpha1.ReasonDeploymentNotOwned, fmt.Sprintf("status %+v", foo.Status)
	})
}

// TestInsertedContainerIsLeftAlone adds a container before the Foo's, as an injector
// or a user might: it stays where it is, and the Foo's container is still kept right.
func TestInsertedContainerIsLeftAlone(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.KubectlIn(t, fooYAML("sidecar", "sidecar", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "sidecar", 1)

	env.Kubectl(t, "patch", "-n", ns, "deployment/sidecar", "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/0","value":{"name":"sidecar","image":"envoy:latest"}}]`)
	// Drift the controller reverts, so that it updates the Deployment once more.
	env.Kubectl(t, "set", "image", "-n", ns, "deployment/sidecar", "nginx=httpd:2")
	var d *appsv1.Deployment
	framework.Eventually(t, timeout, "the Foo's image back, beside the inserted container", func(ctx context.Context) (bool, string) {
		var err error
		d, err = env.Kube.AppsV1().Deployments(ns).Get(ctx, "sidecar", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := d.Spec.Template.Spec.Containers
		return len(c) == 2 && c[0].Name == "sidecar" && c[0].Image == "envoy:latest" && c[1].Name == "nginx" && c[1].Image == "nginx:latest",
			fmt.Sprintf("containers %v", containerImages(c))
	})
	waitReady(t, ns, "sidecar", 1)
}

func ownersOf(d *appsv1.Deployment) []string {
	if d == nil {
		return nil
	}
	var owners []string
	for _, ref := range d.OwnerReferences {
		owners = append(owners, fmt.Sprintf("%s/%s %s", ref.Kind, ref.Name, ref.UID))
	}
	return owners
}

func containerImages(containers []corev1.Container) []string {
	var out []string
	for _, c := range containers {
		out = append(out, c.Name+"="+c.Image)
	}
	return out
}

// TestBorrowedRightsAreRefused: someone gives a Deployment that is not the Foo's the
// Foo's owner reference and the controller's label, first under a name the Foo does
// not use (a Deployment the controller would delete as left behind by a rename), then
// under the Foo's own name (one it would rewrite to the Foo's spec). The controller
// must do neither, and say that the Deployment is not the Foo's: it was not created
// for it.
//
// A user who may patch Deployments but not delete them cannot do this on this cluster:
// OwnerReferencesPermissionEnforcement, enabled here as hardened clusters do, refuses
// the owner reference (checked first). Where it is not enabled, she can; the cluster
// admin makes the same patch here in her place.
func TestBorrowedRightsAreRefused(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.Kubectl(t, "create", "role", "deployment-patcher", "-n", ns, "--verb=get,list,watch,patch", "--resource=deployments.apps")
	env.Kubectl(t, "create", "rolebinding", "mallory-patches", "-n", ns, "--role=deployment-patcher", "--user=mallory")
	env.Kubectl(t, "create", "rolebinding", "mallory-foos", "-n", ns, "--clusterrole=samplecontroller-foo-editor", "--user=mallory")
	mallory := func(stdin string, args ...string) (string, error) {
		return env.KubectlRun(t.Context(), stdin, append([]string{"--as=mallory", "-n", ns}, args...)...)
	}
	if out, _ := mallory("", "auth", "can-i", "delete", "deployments.apps"); strings.TrimSpace(out) != "no" {
		t.Fatalf("mallory may delete Deployments (%q): the test proves nothing", out)
	}

	env.Kubectl(t, "create", "deployment", "payroll", "-n", ns, "--image=httpd:2", "--replicas=1")
	payroll, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "payroll", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := mallory(fooYAML("thief", "thief-web", 1), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply of a Foo as mallory: %v\n%s", err, out)
	}
	thief := waitReady(t, ns, "thief", 1)

	forged := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"ownerReferences":[{"apiVersion":%q,"kind":"Foo","name":"thief","uid":%q,"controller":true}]}}`,
		"samplecontroller.k8s.io/foo-uid", thief.UID, samplev1alpha1.SchemeGroupVersion.String(), thief.UID)
	if out, err := mallory("", "patch", "deployment/payroll", "--type=merge", "-p", forged); err == nil || !strings.Contains(out, "cannot set an ownerRef on a resource you can't delete") {
		t.Fatalf("mallory's owner reference on payroll: %v, %s; want it refused by OwnerReferencesPermissionEnforcement", err, out)
	}
	// Under a name the Foo does not use: left behind by a rename, as the controller
	// would have it.
	env.Kubectl(t, "patch", "-n", ns, "deployment/payroll", "--type=merge", "-p", forged)
	// Then under the Foo's own name: the sync that reports it comes after the one the
	// first patch brought.
	if out, err := mallory("", "patch", "foo/thief", "--type=merge", "-p", `{"spec":{"deploymentName":"payroll","replicas":3}}`); err != nil {
		t.Fatalf("kubectl patch of a Foo as mallory: %v\n%s", err, out)
	}
	framework.Eventually(t, timeout, "the Foo to report that payroll is not its own", func(ctx context.Context) (bool, string) {
		foo, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Get(ctx, "thief", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
		return ready != nil && ready.ObservedGeneration == foo.Generation && ready.Reason == samplev1alpha1.ReasonDeploymentNotOwned,
			fmt.Sprintf("status %+v", foo.Status)
	})
	waitWarning(t, ns, "thief", "DeploymentNotOwned", `Deployment "payroll" names this Foo as its controller, but the controller did not create it`)

	after, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "payroll", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		t.Fatal("the controller deleted payroll")
	case err != nil:
		t.Fatal(err)
	case after.UID != payroll.UID:
		t.Fatalf("payroll was replaced: UID %s, was %s", after.UID, payroll.UID)
	case *after.Spec.Replicas != 1 || after.Spec.Template.Spec.Containers[0].Image != "httpd:2":
		t.Errorf("the controller rewrote payroll: replicas %d, image %s", *after.Spec.Replicas, after.Spec.Template.Spec.Containers[0].Image)
	}
	// The Deployment the controller did create for the Foo is still there: the
	// rename has not gone through.
	if _, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "thief-web", metav1.GetOptions{}); err != nil {
		t.Errorf("thief-web: %v", err)
	}
}
