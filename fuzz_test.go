package main

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// FuzzSyncHandler syncs a Foo against a Deployment of its name in any state: owned by
// it, by a Foo it replaced, by something else or nobody, cached or only on the server,
// with any containers and labels, being deleted or not. Whatever it finds, the sync
// must not panic, must create only the Foo's own Deployment, must never update or
// delete a Deployment the Foo does not control, and its patches must leave every
// container but the Foo's as it was.
func FuzzSyncHandler(f *testing.F) {
	f.Add(int32(2), false, uint8(1), true, "nginx=nginx:latest", "team=blue", false, false)
	f.Add(int32(0), true, uint8(0), true, "", "", false, false)
	f.Add(int32(3), false, uint8(2), true, "sidecar=envoy,nginx=nginx:1", "", false, false)
	f.Add(int32(1), false, uint8(3), false, "web=httpd", "a=b", false, false)
	f.Add(int32(5), false, uint8(1), true, "nginx=x", "", true, true)
	f.Fuzz(func(t *testing.T, replicas int32, replicasNil bool, owner uint8, cached bool,
		containers, labels string, fooDeleting, deploymentDeleting bool) {
		foo := newFoo("web", ptr.To(replicas))
		if replicasNil {
			foo.Spec.Replicas = nil
		}
		if fooDeleting {
			foo.DeletionTimestamp = &now
		}
		d := reconcile.NewDeployment(foo)
		d.UID, d.ResourceVersion = "web-deployment-uid", "1"
		switch owner % 4 {
		case 0: // nobody's
			d.OwnerReferences = nil
		case 1: // the Foo's own
		case 2: // a Foo of the same name that it replaced
			d.OwnerReferences[0].UID = "predecessor-uid"
		case 3: // a Foo of another API group
			d.OwnerReferences[0].APIVersion = "example.com/v1"
		}
		if deploymentDeleting {
			d.DeletionTimestamp = &now
		}
		d.Spec.Template.Spec.Containers = nil
		for _, part := range strings.Split(containers, ",") {
			if name, image, ok := strings.Cut(part, "="); ok {
				d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: name, Image: image})
			}
		}
		for _, part := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(part, "="); ok {
				d.Labels[k] = v
			}
		}
		var inCache, onServer []*appsv1.Deployment
		if cached {
			inCache = append(inCache, d)
		} else {
			onServer = append(onServer, d)
		}

		fx := newFixture(t, []*samplev1alpha1.Foo{foo}, inCache, onServer)
		_ = fx.sync(foo) // errors are expected; panics and wrong writes are not

		for _, a := range fx.kubeclient.Actions() {
			// By verb: the action interfaces overlap (every UpdateAction is also a
			// CreateAction), so a type switch would check updates as creates.
			switch a.GetVerb() {
			case "create":
				if created, ok := a.(core.CreateAction).GetObject().(*appsv1.Deployment); ok &&
					(created.Name != foo.Spec.DeploymentName || !metav1.IsControlledBy(created, foo)) {
					t.Errorf("created Deployment %s controlled by %v, want only the Foo's own", created.Name, created.OwnerReferences)
				}
			case "update", "patch":
				if a.GetResource().Resource != "deployments" {
					continue
				}
				if !metav1.IsControlledBy(d, foo) {
					t.Errorf("%s of Deployment %s, which the Foo does not control (owners %v)", a.GetVerb(), d.Name, d.OwnerReferences)
				}
				if p, ok := a.(core.PatchAction); ok {
					checkOthersKept(t, d, p.GetPatch())
				}
			case "delete":
				if a.GetResource().Resource == "deployments" && !metav1.IsControlledBy(d, foo) {
					t.Errorf("deleted Deployment %s, which the Foo does not control", a.(core.DeleteAction).GetName())
				}
			}
		}
	})
}

// checkOthersKept applies patch to d, and checks that every container but the Foo's
// is left exactly as it was, in the same order.
func checkOthersKept(t *testing.T, d *appsv1.Deployment, patch []byte) {
	t.Helper()
	patched, err := fakeapiserver.Patched(d, types.StrategicMergePatchType, patch)
	if err != nil {
		t.Errorf("patch %s does not apply: %v", patch, err)
		return
	}
	// Compared as the API server would hold d: JSON has already replaced, say, a
	// name that is not UTF-8. An empty patch is that round trip.
	before, err := fakeapiserver.Patched(d, types.StrategicMergePatchType, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	others := func(d *appsv1.Deployment) []corev1.Container {
		return slices.DeleteFunc(slices.Clone(d.Spec.Template.Spec.Containers), func(c corev1.Container) bool { return c.Name == reconcile.ContainerName })
	}
	was, is := others(before.(*appsv1.Deployment)), others(patched.(*appsv1.Deployment))
	if !equality.Semantic.DeepEqual(was, is) {
		t.Errorf("patch %s changed the other containers: %v, then %v", patch, was, is)
	}
}
