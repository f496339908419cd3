//go:build e2e

package helm

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	crdName = "foos.samplecontroller.k8s.io"
	// The chart's release: its name and namespace.
	release          = "sample-controller"
	releaseNamespace = "sc-helm"
)

// TestClusterEmulatesTheMinimum checks that the suite's cluster is the claimed oldest
// release, as far as what it serves goes.
func TestClusterEmulatesTheMinimum(t *testing.T) {
	v, err := env.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if got := v.EmulationMajor + "." + v.EmulationMinor; got != minimum {
		t.Fatalf("the apiserver emulates %q (binary %s), want %s", got, v.GitVersion, minimum)
	}
	t.Logf("helm: the apiserver %s emulates Kubernetes %s, the chart's kubeVersion", v.GitVersion, minimum)

	// And it serves that release's APIs: MutatingAdmissionPolicy, GA after 1.34 and
	// served by these binaries at their own release, is not there.
	resources, err := env.Kube.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "mutatingadmissionpolicies" {
			t.Errorf("the cluster serves admissionregistration.k8s.io/v1 %s, which Kubernetes %s did not", r.Name, minimum)
		}
	}
}

// TestReleaseBundle checks the files of `make release` against each other: the
// checksums, and the image both installs name is the archive's, by digest.
func TestReleaseBundle(t *testing.T) {
	dir := releaseDir(t)
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for line := range strings.Lines(string(sums)) {
		want, name, ok := strings.Cut(strings.TrimSpace(line), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: line %q", line)
		}
		listed = append(listed, name)
		if got := fileSHA256(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !slices.Contains(listed, e.Name()) {
			t.Errorf("%s is in the release but not in SHA256SUMS", e.Name())
		}
	}

	digest := archiveDigest(t, filepath.Join(dir, "sample-controller.oci.tar"))
	install, err := os.ReadFile(filepath.Join(dir, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	images := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllStringSubmatch(string(install), -1)
	if len(images) != 1 || !strings.HasSuffix(images[0][1], "@"+digest) {
		t.Errorf("install.yaml runs %q, want the archive's image, @%s", images, digest)
	}
	values := env.Helm(t, "show", "values", chartArchive(t))
	var image struct {
		Image struct {
			Digest string `json:"digest"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal([]byte(values), &image); err != nil {
		t.Fatal(err)
	}
	if image.Image.Digest != digest {
		t.Errorf("the chart's values name the image %q, want the archive's, %s:\n%s", image.Image.Digest, digest, values)
	}
}

// TestHelmChart installs the release's chart with helm, with values a team sets, on a
// cluster without the CRD (the suite's first install), runs the controller as its
// Deployment would, has a namespace user with the built-in edit role work with Foos,
// upgrades the release to sharded mode keeping the values, and uninstalls it: the Foos
// and their Deployments stay, and so does the CRD, which the chart installed.
func TestHelmChart(t *testing.T) {
	chart := chartArchive(t)
	if crd := crdState(t); crd != "" {
		t.Fatalf("the CRD before the chart's install: %s, want none (this test runs first)", crd)
	}
	// --create-namespace makes the namespace without the Pod Security labels: the
	// notes say so (a server dry run renders them as the install would).
	const podSecurityNote = "does not enforce the restricted profile"
	out := env.Helm(t, "install", release, chart, "--namespace", releaseNamespace, "--create-namespace", "--dry-run=server")
	if !strings.Contains(out, podSecurityNote) {
		t.Errorf("helm install --create-namespace does not note the namespace's missing Pod Security labels:\n%s", out)
	}
	// The namespace as values.yaml says to make it: its Pods must pass the restricted
	// Pod Security profile, or --wait times out on a ReplicaSet that creates none.
	env.Kubectl(t, "create", "namespace", releaseNamespace)
	env.Kubectl(t, "label", "namespace", releaseNamespace, "pod-security.kubernetes.io/enforce=restricted")
	// Values a team sets: the Pods land where the nodeSelector says, and the controller
	// (run with the Deployment's flags) takes the flags the named values give it.
	const priorityClass = "sc-helm-controllers"
	env.KubectlIn(t, `{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"`+priorityClass+`"},"value":1000}`, "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = env.KubectlRun(context.Background(), "", "delete", "priorityclass", priorityClass, "--ignore-not-found")
	})
	values := filepath.Join(t.TempDir(), "values.yaml")
	err := os.WriteFile(values, []byte(fmt.Sprintf(`
replicas: 1
resources: {limits: {cpu: "2", memory: 512Mi}, requests: {cpu: 200m, memory: 128Mi}}
logging: {format: json, verbosity: 2}
workers: 4
leaderElection: {leaseDuration: 20s}
extraArgs: ["--kube-api-qps=50", "--kube-api-burst=100"]
nodeSelector: {%[1]s: kwok}
tolerations: [{key: dedicated, operator: Equal, value: controllers, effect: NoSchedule}]
podLabels: {team: platform}
podAnnotations: {example.com/owner: platform}
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: %[1]s, operator: In, values: [kwok]}]}]}}}
topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {team: platform}}}]
priorityClassName: %[2]s
imagePullSecrets: [{name: registry}]
`, localcluster.NodeLabel, priorityClass)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	out = env.Helm(t, "install", release, chart, "--namespace", releaseNamespace, "-f", values, "--wait", "--timeout", "3m")
	t.Logf("helm install:\n%s", out)
	if strings.Contains(out, podSecurityNote) {
		t.Errorf("helm install into a restricted namespace notes that it is not:\n%s", out)
	}
	digest := archiveDigest(t, filepath.Join(releaseDir(t), "sample-controller.oci.tar"))
	if image := deployment(t, releaseNamespace).Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(image, "@"+digest) {
		t.Errorf("the chart's Deployment runs %s, want the release's image, @%s", image, digest)
	}
	valuesFlags := []string{"--logging-format=json", "-v=2", "--workers=4", "--leader-elect-lease-duration=20s", "--kube-api-qps=50", "--kube-api-burst=100"}
	checkValues := func(step string) {
		t.Helper()
		d := deployment(t, releaseNamespace)
		for _, f := range valuesFlags {
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, f) {
				t.Errorf("%s: the Deployment's flags %q lack %s", step, d.Spec.Template.Spec.Containers[0].Args, f)
			}
		}
		if got := d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String(); got != "512Mi" {
			t.Errorf("%s: the memory limit is %s, want the values' 512Mi", step, got)
		}
		spec := d.Spec.Template.Spec
		if *d.Spec.Replicas != 1 || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.PriorityClassName != priorityClass ||
			len(spec.ImagePullSecrets) != 1 || len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels["team"] != "platform" {
			t.Errorf("%s: the Deployment has %d replicas, affinity %v, priority class %q, pull secrets %v, topology spread %v; want the values'",
				step, *d.Spec.Replicas, spec.Affinity, spec.PriorityClassName, spec.ImagePullSecrets, spec.TopologySpreadConstraints)
		}
		pods, err := env.Kube.CoreV1().Pods(releaseNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "team=platform"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			node, err := env.Kube.CoreV1().Nodes().Get(t.Context(), p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: the Pod %s on node %q: %v", step, p.Name, p.Spec.NodeName, err)
			}
			if node.Labels[localcluster.NodeLabel] != "kwok" || p.Annotations["example.com/owner"] != "platform" || p.Spec.Priority == nil || *p.Spec.Priority != 1000 {
				t.Errorf("%s: the Pod %s is on node %s (labels %v) with annotations %v and priority %v", step, p.Name, node.Name, node.Labels, p.Annotations, p.Spec.Priority)
			}
		}
		if len(pods.Items) == 0 {
			t.Errorf("%s: no Pod carries the values' podLabels", step)
		}
	}
	checkValues("helm install")
	// The release installed the CRD, and keeps it.
	crd := env.Kubectl(t, "get", "crd", crdName, "-o", `jsonpath={.metadata.annotations.meta\.helm\.sh/release-name} {.metadata.annotations.helm\.sh/resource-policy}`)
	if crd != release+" keep" {
		t.Errorf("the CRD's release and resource policy: %q, want %q", crd, release+" keep")
	}
	c := startDeployed(t, releaseNamespace)

	ns := env.NewNamespace(t)
	editor := env.NewServiceAccount(t, ns, "editor-")
	env.Kubectl(t, "create", "rolebinding", "editor", "-n", ns, "--clusterrole=edit", "--serviceaccount="+ns+":"+editor)
	as := "--as=system:serviceaccount:" + ns + ":" + editor
	framework.Eventually(t, framework.Timeout, "the edit role to allow creating Foos (aggregated from the chart's roles)", func(ctx context.Context) (bool, string) {
		out, _ := env.KubectlRun(ctx, "", "auth", "can-i", "create", "foos.samplecontroller.k8s.io", "-n", ns, as)
		return strings.TrimSpace(out) == "yes", out
	})
	env.Kubectl(t, "apply", "-n", ns, as, "-f", filepath.Join(env.RepoRoot, "artifacts", "examples", "example-foo.yaml"))
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 1)

	// To sharded mode in a rolling update, as docs/operations.md says. The upgrade
	// changes the Deployment's flags and replicas and the Role (sharded replicas watch
	// each other's Leases and delete a dead one's): a controller with the new flags
	// works with the new RBAC. The old Pods stop as the rollout replaces them (here,
	// the controller stops).
	if err := c.Stop(localcluster.ControllerStopGrace); err != nil {
		t.Error(err)
	}
	out = env.Helm(t, "upgrade", release, chart, "--namespace", releaseNamespace, "--reset-then-reuse-values", "--set", "sharded.enabled=true", "--wait", "--timeout", "3m")
	t.Logf("helm upgrade:\n%s", out)
	d := deployment(t, releaseNamespace)
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--shard-slots=16") {
		t.Fatalf("after the upgrade to sharded mode the Deployment has flags %q", d.Spec.Template.Spec.Containers[0].Args)
	}
	checkValues("helm upgrade --reset-then-reuse-values")
	c = startDeployed(t, releaseNamespace)
	env.Kubectl(t, "scale", "-n", ns, as, "foo/example-foo", "--replicas=2")
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 2)
	if err := c.Stop(localcluster.ControllerStopGrace); err != nil {
		t.Error(err)
	}
	// Without the label, an upgrade's notes say how to put it back.
	env.Kubectl(t, "label", "namespace", releaseNamespace, "pod-security.kubernetes.io/enforce-")
	out = env.Helm(t, "upgrade", release, chart, "--namespace", releaseNamespace, "--reuse-values", "--dry-run=server")
	if !strings.Contains(out, podSecurityNote) {
		t.Errorf("helm upgrade in a namespace without Pod Security labels does not note it:\n%s", out)
	}

	api := snapshotAPI(t, ns)
	uninstall(t, releaseNamespace)
	api.unchanged(t, "helm uninstall")
}

// TestInstallYAML applies install.yaml as its users do, runs the controller as the
// Deployment it installs would (its flags, its ServiceAccount), converges a Foo, and
// uninstalls as docs/operations.md says: everything but the CRD goes, and the CRD, the
// Foo and its Deployment stay.
func TestInstallYAML(t *testing.T) {
	ctx := t.Context()
	install := filepath.Join(releaseDir(t), "install.yaml")
	uninstall := []string{"delete", "-f", install, "-l", "app.kubernetes.io/component!=api", "--wait", "--timeout=2m", "--ignore-not-found"}
	env.Kubectl(t, "apply", "--server-side", "-f", install)
	t.Cleanup(func() {
		if out, err := env.KubectlRun(context.Background(), "", uninstall...); err != nil {
			t.Errorf("uninstalling install.yaml: %v\n%s", err, out)
		}
	})
	if err := localcluster.WaitCRDsEstablished(ctx, env.Cluster.RESTConfig(), crdName); err != nil {
		t.Fatal(err)
	}
	c := startDeployed(t, framework.DeployNamespace)

	ns := env.NewNamespace(t)
	env.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(env.RepoRoot, "artifacts", "examples", "example-foo.yaml"))
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 1)
	if err := c.Stop(localcluster.ControllerStopGrace); err != nil {
		t.Error(err)
	}

	api := snapshotAPI(t, ns)
	env.Kubectl(t, uninstall...)
	api.unchanged(t, "uninstalling install.yaml")
	if _, err := env.Kube.CoreV1().Namespaces().Get(ctx, framework.DeployNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller's namespace after uninstalling install.yaml: %v, want it gone", err)
	}
	gone(t, "uninstalling install.yaml", framework.DeployNamespace)
}

// startDeployed runs the controller as the Deployment in namespace would run it: with
// its flags (but the harness's serving addresses) and as its ServiceAccount. The
// Pods on the simulated nodes run nothing.
func startDeployed(t *testing.T, namespace string) *localcluster.Controller {
	t.Helper()
	return startDeployedBinary(t, namespace, "")
}

// startDeployedBinary is startDeployed with another binary than the suite's (empty
// for the suite's), such as the one of another version's image.
func startDeployedBinary(t *testing.T, namespace, bin string) *localcluster.Controller {
	t.Helper()
	d := deployment(t, namespace)
	spec := d.Spec.Template.Spec
	var args []string
	for _, a := range spec.Containers[0].Args {
		name, _, _ := strings.Cut(a, "=")
		if !slices.Contains([]string{"--metrics-bind-address", "--health-probe-bind-address", "--metrics-secure"}, name) {
			args = append(args, a)
		}
	}
	kubeconfig := filepath.Join(env.OutDir, namespace+"-"+spec.ServiceAccountName+".kubeconfig")
	if err := env.WriteServiceAccountKubeconfig(t.Context(), namespace, spec.ServiceAccountName, kubeconfig); err != nil {
		t.Fatal(err)
	}
	c := env.StartControllerWith(t, localcluster.ControllerOptions{Bin: bin, Kubeconfig: kubeconfig, Args: args})
	ctx, cancel := context.WithTimeout(t.Context(), framework.Timeout)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func deployment(t *testing.T, namespace string) *appsv1.Deployment {
	t.Helper()
	d, err := env.Kube.AppsV1().Deployments(namespace).Get(t.Context(), "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func releaseDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(ReleaseDirEnv)
	if dir == "" {
		dir = filepath.Join(env.RepoRoot, "_output", "release")
	}
	if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS")); err != nil {
		t.Fatalf("no release in %s (make release, or set %s): %v", dir, ReleaseDirEnv, err)
	}
	return dir
}

func chartArchive(t *testing.T) string {
	t.Helper()
	charts, err := filepath.Glob(filepath.Join(releaseDir(t), "sample-controller-*.tgz"))
	if err != nil || len(charts) != 1 {
		t.Fatalf("want one chart archive in the release, found %q (%v)", charts, err)
	}
	return charts[0]
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReader(f)); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// archiveDigest is the digest of the image an OCI archive holds: the one manifest (or
// index) its index.json lists.
func archiveDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s has no index.json", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Digest string `json:"digest"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(r).Decode(&index); err != nil {
			t.Fatalf("%s: index.json: %v", path, err)
		}
		if len(index.Manifests) != 1 {
			t.Fatalf("%s: index.json lists %d images, want 1", path, len(index.Manifests))
		}
		return index.Manifests[0].Digest
	}
}
