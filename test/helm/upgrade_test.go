//go:build e2e

package helm

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestCRDUpgrade gives the release a CRD that make deploy applied (kubectl's
// server-side apply owns its fields) as the install check says, then upgrades the
// release, with a converged Foo present, to a chart whose CRD gained a field, as the
// next version's would: helm upgrades the CRD with the release, the Foo and its
// Deployment stay the same objects, and a Foo may then carry the field. helm uninstall
// keeps the CRD, the new field and the Foo.
func TestCRDUpgrade(t *testing.T) {
	ns := env.NewNamespace(t)
	installed := installWithFoo(t, chartArchive(t), ns)

	next := filepath.Join(t.TempDir(), "next")
	if err := os.MkdirAll(next, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), "tar", "-xzf", chartArchive(t), "-C", next).CombinedOutput(); err != nil {
		t.Fatalf("unpacking the chart: %v\n%s", err, out)
	}
	dir := filepath.Join(next, "sample-controller")
	editFile(t, filepath.Join(dir, "templates", "customresourcedefinition-"+crdName+".yaml"),
		regexp.MustCompile(`(?m)^( +)deploymentName:\n`), "${1}canary:\n${1}  description: A field the next version adds.\n${1}  type: string\n${0}")
	editFile(t, filepath.Join(dir, "Chart.yaml"), regexp.MustCompile(`(?m)^version: (.*)$`), "version: ${1}-next")

	env.Helm(t, "upgrade", release, dir, "-n", releaseNamespace, "--reset-then-reuse-values", "--wait", "--timeout", "3m")
	schema := env.Kubectl(t, "get", "crd", crdName, "-o", "jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.canary.type}")
	if schema != "string" {
		t.Fatalf("after helm upgrade to a chart whose CRD has spec.canary, the CRD's spec.canary is %q, want a string", schema)
	}
	installed.unchangedButTheCRDsSpec(t, "helm upgrade of the CRD")
	ownedOnce(t, "helm upgrade of the CRD", releaseNamespace)
	env.Kubectl(t, "patch", "-n", ns, "foo/example-foo", "--type=merge", "-p", `{"spec":{"canary":"kept"}}`)
	if got := env.Kubectl(t, "get", "-n", ns, "foo/example-foo", "-o", "jsonpath={.spec.canary}"); got != "kept" {
		t.Errorf("a Foo's spec.canary after the CRD's upgrade: %q, want it kept", got)
	}

	installed = snapshotAPI(t, ns)
	uninstall(t, releaseNamespace)
	installed.unchanged(t, "helm uninstall")
	if got := env.Kubectl(t, "get", "-n", ns, "foo/example-foo", "-o", "jsonpath={.spec.canary}"); got != "kept" {
		t.Errorf("a Foo's spec.canary after helm uninstall: %q, want it kept", got)
	}
}

// installWithFoo applies the CRD as make deploy does and gives it to the suite's
// release as the install check says, installs chart as that release and converges
// example-foo in ns with a controller that then stops. It returns the API as it is
// then.
func installWithFoo(t *testing.T, chart, ns string) *apiSnapshot {
	t.Helper()
	env.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(env.RepoRoot, "artifacts", "examples"))
	disownCRD(t)
	out, err := env.HelmRun(t.Context(), "install", release, chart, "-n", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m")
	giveCRD(t, out, err)
	env.Helm(t, "install", release, chart, "-n", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m")
	c := env.StartControllerWith(t, localcluster.ControllerOptions{Kubeconfig: env.Kubeconfig})
	env.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(env.RepoRoot, "artifacts", "examples", "example-foo.yaml"))
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 1)
	if err := c.Stop(localcluster.ControllerStopGrace); err != nil {
		t.Fatal(err)
	}
	return snapshotAPI(t, ns)
}

// editFile replaces the one match of re in the file.
func editFile(t *testing.T, path string, re *regexp.Regexp, with string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(re.FindAllIndex(data, -1)); n != 1 {
		t.Fatalf("%s: %d matches of %s, want 1", path, n, re)
	}
	if err := os.WriteFile(path, re.ReplaceAll(data, []byte(with)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// unchangedButTheCRDsSpec is unchanged, but for the CRD's generation: a step that
// upgrades the CRD changes its spec, not its identity.
func (s *apiSnapshot) unchangedButTheCRDsSpec(t *testing.T, step string) {
	t.Helper()
	uid := func(state string) string { u, _, _ := strings.Cut(state, "@"); return u }
	now := apiObjects(t, s.namespace)
	if uid(now["crd/"+crdName]) != uid(s.objects["crd/"+crdName]) {
		t.Errorf("after %s the CRD is %s, want the same object as %s", step, now["crd/"+crdName], s.objects["crd/"+crdName])
	}
	delete(now, "crd/"+crdName)
	want := maps.Clone(s.objects)
	delete(want, "crd/"+crdName)
	if !maps.Equal(now, want) {
		t.Errorf("after %s the Foos and Deployments (UID@generation) are\n%v\nwant\n%v", step, now, want)
	}
}

// TestUpgradeFromThePreviousVersion installs the previous version's chart (built, with
// its image, from the commit CHANGELOG.md names for it), converges Foos with that
// version's controller, upgrades to this version's release as CHANGELOG.md says (the
// upgrade stops at the CRD the old chart installed, naming the commands that give it
// to the release), then rolls back. Every Foo, its Deployment and their statuses stay
// the same objects throughout, under either version's controller, and the CRD too.
func TestUpgradeFromThePreviousVersion(t *testing.T) {
	ctx := t.Context()
	previous, commit := previousVersion(t)
	old := buildRelease(t, commit)
	oldBin := filepath.Join(old, "sample-controller")
	if err := env.ExtractController(ctx, filepath.Join(old, "sample-controller.oci.tar"), oldBin); err != nil {
		t.Fatal(err)
	}
	oldChart := filepath.Join(old, "sample-controller-"+strings.TrimPrefix(previous, "v")+".tgz")

	// The CRD as the previous chart left it: installed from crds/, no release's.
	if crdState(t) != "" {
		disownCRD(t)
	}
	env.Helm(t, "install", release, oldChart, "-n", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m")
	ns := env.NewNamespace(t)
	converge := func(step, bin string) map[string]string {
		t.Helper()
		c := startDeployedBinary(t, releaseNamespace, bin)
		for i, replicas := range []int32{1, 2} {
			env.WaitFooReady(t, framework.Timeout, ns, fmt.Sprintf("foo-%d", i), replicas)
		}
		if err := c.Stop(localcluster.ControllerStopGrace); err != nil {
			t.Errorf("%s: %v", step, err)
		}
		return fooStates(t, ns)
	}
	for i, replicas := range []int32{1, 2} {
		env.KubectlIn(t, fmt.Sprintf(`{"apiVersion":"samplecontroller.k8s.io/v1alpha1","kind":"Foo","metadata":{"name":"foo-%d"},"spec":{"deploymentName":"foo-%d","replicas":%d}}`, i, i, replicas), "apply", "-n", ns, "-f", "-")
	}
	before := converge(previous, oldBin)
	api := snapshotAPI(t, ns)

	out, err := env.HelmRun(ctx, "upgrade", release, chartArchive(t), "-n", releaseNamespace, "--reset-then-reuse-values", "--wait", "--timeout", "3m")
	giveCRD(t, out, err)
	api.unchanged(t, "the refused upgrade")
	env.Helm(t, "upgrade", release, chartArchive(t), "-n", releaseNamespace, "--reset-then-reuse-values", "--wait", "--timeout", "3m")
	api.unchangedButTheCRDsSpec(t, "helm upgrade from "+previous)
	ownedOnce(t, "helm upgrade from "+previous, releaseNamespace)
	if now := converge("this version", ""); !maps.Equal(now, before) {
		t.Errorf("the Foos under this version's controller:\n%v\nwant them as %s left them:\n%v", now, previous, before)
	}

	env.Helm(t, "rollback", release, "1", "-n", releaseNamespace, "--wait", "--timeout", "3m")
	api.unchangedButTheCRDsSpec(t, "helm rollback to "+previous)
	ownedOnce(t, "helm rollback to "+previous, releaseNamespace)
	if now := converge(previous+" again", oldBin); !maps.Equal(now, before) {
		t.Errorf("the Foos after the rollback:\n%v\nwant\n%v", now, before)
	}
	uninstall(t, releaseNamespace)
	api.unchanged(t, "helm uninstall")
}

// previousVersion reads the version before this one from CHANGELOG.md, and the commit
// it was released from.
func previousVersion(t *testing.T) (version, commit string) {
	t.Helper()
	changelog, err := os.ReadFile(filepath.Join(env.RepoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := regexp.MustCompile(`(?m)^## (v\S+)(?: \(commit ([0-9a-f]{7,40})\))?$`).FindAllStringSubmatch(string(changelog), -1)
	if len(sections) < 2 || sections[1][2] == "" {
		t.Fatalf("CHANGELOG.md names no previous version with its commit (a section \"## vX.Y.Z (commit SHA)\" after this version's): %q", sections)
	}
	return sections[1][1], sections[1][2]
}

// buildRelease writes the release of commit (its hack/release.sh, for this machine's
// architecture, with this tree's tools) into a directory of the suite's output, once,
// and returns the directory.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	dir := filepath.Join(env.OutDir, "release-"+commit)
	if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS")); err == nil {
		return dir
	}
	src := filepath.Join(env.OutDir, "src-"+commit)
	git := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(t.Context(), "git", append([]string{"-C", env.RepoRoot}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	has := func() bool {
		return exec.CommandContext(t.Context(), "git", "-C", env.RepoRoot, "cat-file", "-e", commit+"^{commit}").Run() == nil
	}
	if !has() {
		// A shallow clone: the history is at its origin.
		out, err := exec.CommandContext(t.Context(), "git", "-C", env.RepoRoot, "fetch", "--unshallow").CombinedOutput()
		if !has() {
			t.Fatalf("commit %s, the previous version's, is not in this clone's history (git fetch --unshallow: %v)\n%s", commit, err, out)
		}
	}
	_ = os.RemoveAll(src)
	git("worktree", "prune")
	git("worktree", "add", "--detach", src, commit)
	t.Cleanup(func() {
		out, err := exec.CommandContext(context.Background(), "git", "-C", env.RepoRoot, "worktree", "remove", "--force", src).CombinedOutput()
		if err != nil {
			t.Errorf("git worktree remove: %v\n%s", err, out)
		}
	})
	if err := os.MkdirAll(filepath.Join(src, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(env.KubectlBin), filepath.Join(src, "_output", "bin")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(src, "hack", "release.sh"))
	cmd.Env = append(os.Environ(), "RELEASE_DIR="+dir, "ARCHS="+runtime.GOARCH, "CGO_ENABLED=0", "GOFLAGS=-trimpath")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the release of %s: %v\n%s", commit, err, out)
	}
	return dir
}

// fooStates is each Foo of ns with its UID, generation and status, and its
// Deployment's UID.
func fooStates(t *testing.T, ns string) map[string]string {
	t.Helper()
	foos, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, f := range foos.Items {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), f.Spec.DeploymentName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status, err := json.Marshal(f.Status)
		if err != nil {
			t.Fatal(err)
		}
		states[f.Name] = fmt.Sprintf("%s@%d %s deployment %s", f.UID, f.Generation, status, d.UID)
	}
	return states
}
