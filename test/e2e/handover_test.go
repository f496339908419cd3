//go:build e2e

package e2e

import (
	"context"
	"fmt"
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
