//go:build e2e

package helm

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestInstallPaths runs the orders in which docs/operations.md says the install paths
// combine, with Foos present: the examples (the CRD) then the chart, which takes the
// CRD only once given it; the chart then the examples; the examples then install.yaml
// and make deploy upgrading each other, then make undeploy; and make deploy then the
// chart, as a migration through the handover.
// After every step the CRD, the Foos and their Deployments are the same objects,
// unchanged, and no object of the controller's install has two owners; an order that
// cannot work stops before changing anything, saying what to do.
func TestInstallPaths(t *testing.T) {
	ctx := t.Context()
	examples := filepath.Join(env.RepoRoot, "artifacts", "examples")
	env.Kubectl(t, "apply", "-k", examples)
	if err := localcluster.WaitCRDsEstablished(ctx, env.Cluster.RESTConfig(), crdName); err != nil {
		t.Fatal(err)
	}
	// The Foos, converged by a controller that then stops: nothing else writes to them
	// or their Deployments while the installs come and go.
	ns := env.NewNamespace(t)
	c := env.StartControllerWith(t, localcluster.ControllerOptions{Kubeconfig: env.Kubeconfig})
	for i, replicas := range []int32{1, 2} {
		foo := fmt.Sprintf(`{"apiVersion":"samplecontroller.k8s.io/v1alpha1","kind":"Foo","metadata":{"name":"foo-%d"},"spec":{"deploymentName":"foo-%d","replicas":%d}}`, i, i, replicas)
		env.KubectlIn(t, foo, "apply", "-n", ns, "-f", "-")
		env.WaitFooReady(t, framework.Timeout, ns, fmt.Sprintf("foo-%d", i), replicas)
	}
	if err := c.Stop(localcluster.ControllerStopGrace); err != nil {
		t.Fatal(err)
	}
	api := snapshotAPI(t, ns)
	chart := chartArchive(t)

	t.Run("examples, then the chart", func(t *testing.T) {
		// The CRD as kubectl alone applied it (an earlier test's release kept it).
		disownCRD(t)
		// The chart would upgrade a CRD it does not own: it stops, saying how to give it
		// the CRD or leave it be, and changes nothing.
		out, err := env.HelmRun(ctx, "install", release, chart, "-n", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m")
		t.Logf("helm install over the examples' CRD, refused:\n%s", out)
		giveCRD(t, out, err)
		api.unchanged(t, "the refused helm install")
		env.Helm(t, "install", release, chart, "-n", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m")
		api.check(t, "helm install", releaseNamespace)
		api.upgradeAndUninstall(t, chart, releaseNamespace)
	})

	t.Run("the chart, then the examples", func(t *testing.T) {
		env.Helm(t, "install", release, chart, "-n", releaseNamespace, "--wait", "--timeout", "3m")
		env.Kubectl(t, "apply", "-k", examples)
		api.check(t, "kubectl apply -k artifacts/examples", releaseNamespace)
		api.upgradeAndUninstall(t, chart, releaseNamespace)
	})

	deploy := func(t *testing.T, action string) {
		t.Helper()
		if out, err := env.Deploy(ctx, action, ""); err != nil {
			t.Fatalf("hack/deploy.sh %s: %v\n%s", action, err, out)
		}
	}

	t.Run("examples, then install.yaml and make deploy over each other", func(t *testing.T) {
		install := filepath.Join(releaseDir(t), "install.yaml")
		env.Kubectl(t, "apply", "--server-side", "-f", install)
		api.check(t, "kubectl apply --server-side -f install.yaml", framework.DeployNamespace)
		deploy(t, "apply")
		api.check(t, "make deploy over install.yaml", framework.DeployNamespace)
		env.Kubectl(t, "apply", "--server-side", "-f", install)
		api.check(t, "install.yaml over make deploy", framework.DeployNamespace)
		deploy(t, "delete")
		api.unchanged(t, "make undeploy")
		gone(t, "make undeploy", framework.DeployNamespace)
	})

	t.Run("make deploy, then the chart", func(t *testing.T) {
		deploy(t, "apply")
		api.check(t, "make deploy", framework.DeployNamespace)
		installed := snapshotInstall(t, framework.DeployNamespace)

		// Without the handover helm stops, saying how to go on, and changes nothing.
		out, err := env.HelmRun(ctx, "install", release, chart, "-n", framework.DeployNamespace, "--wait", "--timeout", "3m")
		if err == nil || !strings.Contains(out, "hack/deploy.sh handover") || strings.Contains(out, "invalid ownership metadata") {
			t.Fatalf("helm install over make deploy: err = %v, want it refused with the handover named:\n%s", err, out)
		}
		t.Logf("helm install over make deploy, refused:\n%s", out)
		if out := env.Helm(t, "list", "-A", "-q"); strings.TrimSpace(out) != "" {
			t.Errorf("after the refused install helm lists releases: %s", out)
		}
		if now := snapshotInstall(t, framework.DeployNamespace); !maps.Equal(now, installed) {
			t.Errorf("the refused helm install changed make deploy's objects:\nbefore %v\nafter  %v", installed, now)
		}

		// And make deploy refuses to install over the chart's release, likewise.
		deploy(t, "handover")
		env.Helm(t, "install", release, chart, "-n", framework.DeployNamespace, "--wait", "--timeout", "3m")
		api.check(t, "helm install after the handover", framework.DeployNamespace)
		if out, err := env.Deploy(ctx, "apply", ""); err == nil || !strings.Contains(out, "helm release "+release) {
			t.Errorf("make deploy over the helm release: err = %v, want it refused naming the release:\n%s", err, out)
		}
		api.upgradeAndUninstall(t, chart, framework.DeployNamespace)
	})
}

// disownCRD leaves the CRD as kubectl, or an older chart's crds/, leaves it: no
// release's, whichever test's release kept it last.
func disownCRD(t *testing.T) {
	t.Helper()
	env.Kubectl(t, "annotate", "crd", crdName, "meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-", "helm.sh/resource-policy-")
	env.Kubectl(t, "label", "crd", crdName, "app.kubernetes.io/managed-by-")
}

// giveCRD runs the command an install or upgrade refused with err and output out
// names to give the CRD to the release, as a user would paste it.
func giveCRD(t *testing.T, out string, err error) {
	t.Helper()
	give := regexp.MustCompile(`give it to the release first: (kubectl .*?)\. Or leave it to whoever applies it: --set crds.enabled=false`).FindStringSubmatch(out)
	if err == nil || give == nil {
		t.Fatalf("helm: err = %v, want it stopped at the CRD, naming how to give it to the release:\n%s", err, out)
	}
	args := strings.Fields(give[1])
	for i := range args {
		args[i] = strings.Trim(args[i], "'")
	}
	env.Kubectl(t, args[1:]...)
}

// check checks, after step, that the API is unchanged and that no object of the
// controller's install in namespace is owned twice.
func (s *apiSnapshot) check(t *testing.T, step, namespace string) {
	t.Helper()
	s.unchanged(t, step)
	ownedOnce(t, step, namespace)
}

// upgradeAndUninstall upgrades the release in namespace and uninstalls it, checking
// after each step.
func (s *apiSnapshot) upgradeAndUninstall(t *testing.T, chart, namespace string) {
	t.Helper()
	env.Helm(t, "upgrade", release, chart, "-n", namespace, "--reset-then-reuse-values", "--set", "networkPolicy.enabled=true", "--wait", "--timeout", "3m")
	s.check(t, "helm upgrade", namespace)
	uninstall(t, namespace)
	s.unchanged(t, "helm uninstall")
}

// uninstall removes the release from namespace and checks that what it owned went
// with it: the controller's Deployment and ClusterRole, and the Foo roles.
func uninstall(t *testing.T, namespace string) {
	t.Helper()
	env.Helm(t, "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m")
	gone(t, "helm uninstall", namespace)
}

// gone checks, after the uninstall step, that what an install owns went with it: the
// controller's Deployment in namespace, its ClusterRole, and the Foo roles.
func gone(t *testing.T, step, namespace string) {
	t.Helper()
	ctx := t.Context()
	if _, err := env.Kube.AppsV1().Deployments(namespace).Get(ctx, "sample-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller's Deployment after %s: %v, want it gone", step, err)
	}
	for _, name := range []string{"sample-controller", "samplecontroller-foo-editor"} {
		if _, err := env.Kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole %s after %s: %v, want it gone", name, step, err)
		}
	}
}

// apiSnapshot is what no install path may change: the CRD and every Foo and Deployment
// of a namespace, each by UID and generation.
type apiSnapshot struct {
	namespace string
	objects   map[string]string
}

func snapshotAPI(t *testing.T, namespace string) *apiSnapshot {
	t.Helper()
	return &apiSnapshot{namespace: namespace, objects: apiObjects(t, namespace)}
}

func apiObjects(t *testing.T, namespace string) map[string]string {
	t.Helper()
	ctx := t.Context()
	objects := map[string]string{}
	objects["crd/"+crdName] = crdState(t)
	foos, err := env.Sample.SamplecontrollerV1alpha1().Foos(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range foos.Items {
		objects["foo/"+f.Name] = fmt.Sprintf("%s@%d", f.UID, f.Generation)
	}
	deployments, err := env.Kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deployments.Items {
		objects["deployment/"+d.Name] = fmt.Sprintf("%s@%d", d.UID, d.Generation)
	}
	return objects
}

// crdState is the CRD's UID@generation, or empty when there is none.
func crdState(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(env.Kubectl(t, "get", "crd", crdName, "--ignore-not-found", "-o", "jsonpath={.metadata.uid}@{.metadata.generation}"))
}

func (s *apiSnapshot) unchanged(t *testing.T, step string) {
	t.Helper()
	if now := apiObjects(t, s.namespace); !maps.Equal(now, s.objects) {
		t.Errorf("after %s the CRD, Foos and Deployments (UID@generation) are\n%v\nwant\n%v", step, now, s.objects)
	}
}

// snapshotInstall is every object of the controller's install, by UID, generation,
// labels and annotations (what an install or a handover would change; the status,
// which the cluster's own controllers write, is left out).
func snapshotInstall(t *testing.T, namespace string) map[string]string {
	t.Helper()
	objects := map[string]string{}
	for _, o := range installObjects(t, namespace) {
		m := o.Metadata
		objects[o.Kind+"/"+m.Name] = fmt.Sprintf("%s@%d %v %v", m.UID, m.Generation, m.Labels, m.Annotations)
	}
	return objects
}

// ownedOnce checks that no object of the controller's install carries two owners'
// records: helm's ownership, a client-side kubectl apply's annotation, a server-side
// kubectl apply's entry in the managed fields. The CRD is left out: every install
// path applies it, all to the same spec, and none deletes it.
func ownedOnce(t *testing.T, step, namespace string) {
	t.Helper()
	for _, o := range installObjects(t, namespace) {
		var owners []string
		if r := o.Metadata.Annotations["meta.helm.sh/release-name"]; r != "" {
			owners = append(owners, "helm release "+r)
		}
		if _, ok := o.Metadata.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok {
			owners = append(owners, "kubectl apply")
		}
		for _, m := range o.Metadata.ManagedFields {
			if m.Operation == "Apply" && strings.HasPrefix(m.Manager, "kubectl") {
				owners = append(owners, "kubectl apply --server-side")
			}
		}
		if len(owners) > 1 {
			t.Errorf("after %s %s %s is owned by %s", step, o.Kind, o.Metadata.Name, strings.Join(owners, " and "))
		}
	}
}

type installObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name          string                      `json:"name"`
		UID           string                      `json:"uid"`
		Generation    int64                       `json:"generation"`
		Labels        map[string]string           `json:"labels"`
		Annotations   map[string]string           `json:"annotations"`
		ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
	} `json:"metadata"`
}

// installObjects reads the objects of artifacts/deploy, the controller's install, from
// the cluster: its cluster-scoped ones, and its namespaced ones in namespace.
func installObjects(t *testing.T, namespace string) []installObject {
	t.Helper()
	rendered := map[string]bool{}
	for doc := range strings.SplitSeq(env.Kubectl(t, "kustomize", filepath.Join(env.RepoRoot, "artifacts", "deploy")), "\n---\n") {
		var o installObject
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("kubectl kustomize artifacts/deploy: %v", err)
		}
		rendered[o.Kind+"/"+o.Metadata.Name] = true
	}
	var objects []installObject
	for _, q := range []struct{ kinds, namespace string }{
		{"clusterroles,clusterrolebindings", ""},
		{"serviceaccounts,roles,rolebindings,services,deployments,poddisruptionbudgets", namespace},
	} {
		args := []string{"get", q.kinds, "-o", "json", "--show-managed-fields"}
		if q.namespace != "" {
			args = append(args, "-n", q.namespace)
		}
		var list struct {
			Items []installObject `json:"items"`
		}
		if err := json.Unmarshal([]byte(env.Kubectl(t, args...)), &list); err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			if rendered[o.Kind+"/"+o.Metadata.Name] {
				objects = append(objects, o)
			}
		}
	}
	if len(objects) == 0 {
		t.Fatalf("no object of artifacts/deploy found (namespace %s)", namespace)
	}
	return objects
}
