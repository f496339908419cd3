//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestDeployComponents checks every component of artifacts/deploy/components with the
// API server, as `make deploy COMPONENTS="..."` applies them, and the disruption
// budget and spread that the base applies everywhere.
func TestDeployComponents(t *testing.T) {
	t.Parallel()
	installMonitoringCRDs(t)
	entries, err := os.ReadDir(filepath.Join(env.RepoRoot, "artifacts", "deploy", "components"))
	if err != nil {
		t.Fatal(err)
	}
	var components []string
	for _, e := range entries {
		components = append(components, e.Name())
	}
	want := map[string]string{
		"cert-manager":  "certificate.cert-manager.io/sample-controller-metrics",
		"fencing":       "validatingadmissionpolicy.admissionregistration.k8s.io/sample-controller-fencing",
		"networkpolicy": "networkpolicy.networking.k8s.io/sample-controller",
		"prometheus":    "servicemonitor.monitoring.coreos.com/sample-controller",
	}
	for name := range want {
		if !slices.Contains(components, name) {
			t.Errorf("no component %s in artifacts/deploy/components (%v)", name, components)
		}
	}

	// fencing and sharded cannot be combined: each is applied with all the others.
	dir := overlayDir(t)
	for _, without := range []string{"sharded", "fencing"} {
		set := slices.DeleteFunc(slices.Clone(components), func(c string) bool { return c == without })
		out, err := env.DeployComponents(t.Context(), dir, set, "apply", "--dry-run=server")
		if err != nil {
			t.Fatalf("make deploy COMPONENTS=%q (dry run): %v\n%s", strings.Join(set, " "), err, out)
		}
		objects := []string{"prometheusrule.monitoring.coreos.com/sample-controller", "poddisruptionbudget.policy/sample-controller",
			"deployment.apps/sample-controller", "configmap/sample-controller-dashboard"}
		for name, object := range want {
			if name != without {
				objects = append(objects, object)
			}
		}
		for _, object := range objects {
			if !strings.Contains(out, object) {
				t.Errorf("make deploy COMPONENTS=%q would not apply %s:\n%s", strings.Join(set, " "), object, out)
			}
		}
	}
	out, err := env.DeployComponents(t.Context(), dir, []string{"sharded", "fencing"}, "apply", "--dry-run=server")
	if err == nil || !strings.Contains(out, "the fencing component fences the single leader's Lease") {
		t.Errorf("make deploy COMPONENTS=\"sharded fencing\": err = %v, output:\n%s\nwant a refusal of the pair", err, out)
	}

	checkVerifiedScrape(t, env.Kubectl(t, "kustomize", dir))

	out, err = env.DeployComponents(t.Context(), dir, []string{"prometheus", "grafana"}, "apply", "--dry-run=server")
	if err == nil || !strings.Contains(out, "no component grafana") {
		t.Errorf("make deploy COMPONENTS=\"prometheus grafana\": err = %v, output:\n%s\nwant a refusal naming grafana", err, out)
	}

	// The base is what the setup applied: the budget lets one replica of the two go.
	framework.Eventually(t, timeout, "the PodDisruptionBudget to allow one disruption", func(ctx context.Context) (bool, string) {
		pdb, err := env.Kube.PolicyV1().PodDisruptionBudgets(framework.DeployNamespace).Get(ctx, "sample-controller", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := pdb.Status
		return s.CurrentHealthy == 2 && s.DisruptionsAllowed == 1,
			fmt.Sprintf("%d healthy, %d disruptions allowed", s.CurrentHealthy, s.DisruptionsAllowed)
	})
	d, err := env.Kube.AppsV1().Deployments(framework.DeployNamespace).Get(t.Context(), "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Spec.Template.Spec.TopologySpreadConstraints; len(c) != 1 || c[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("the Deployment's topology spread constraints are %+v, want one across nodes", c)
	}
}

// TestAlertsMatchMetrics checks each alert of the prometheus component, and each query
// of its Grafana dashboard, against a scrape of a controller that has synced a Foo and
// leads, and one of a sharded replica that holds its slots, with hack/alertcheck: every
// expression parses as Prometheus parses it, and every metric name and label value it
// selects is one the binary serves. Series that appear only after some event (a given
// HTTP code, say) could not be checked this way; the controller creates every series
// the alerts use up front.
func TestAlertsMatchMetrics(t *testing.T) {
	t.Parallel()
	installMonitoringCRDs(t)
	checker := buildAlertcheck(t)

	// A controller that leads, its Lease in the test's namespace (the Role of
	// artifacts/deploy grants Leases in its own only) under the Lease name of
	// artifacts/deploy, which the alerts select.
	ns := env.NewNamespace(t)
	env.KubectlIn(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: leases
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: leases
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: leases
subjects:
- kind: ServiceAccount
  name: %s
  namespace: %s
`, framework.ServiceAccount, framework.DeployNamespace), "apply", "-n", ns, "-f", "-")
	p := env.StartController(t, ns, "--leader-elect", "--leader-elect-resource-namespace="+ns)
	env.KubectlIn(t, fooYAML("alerted", "alerted", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "alerted", 1)
	framework.Eventually(t, timeout, "the controller to report that it leads", func(ctx context.Context) (bool, string) {
		return isLeading(ctx, p, "sample-controller"), "not leading"
	})
	scrape := filepath.Join(t.TempDir(), "metrics.txt")
	writeScrape(t, scrapeMetrics(t, p), scrape)

	// And a replica in sharded mode, holding its slots: the alerts for that mode
	// select the series of its slots' queues.
	shardedNS := env.NewNamespace(t)
	env.GrantShardedLeases(t, shardedNS)
	shardedReplica := env.StartController(t, shardedNS, "--shard-slots=2", "--leader-elect-resource-namespace="+shardedNS,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms")
	framework.Eventually(t, timeout, "the sharded replica to hold both slots", func(ctx context.Context) (bool, string) {
		m, err := shardedReplica.Metrics(ctx)
		if err != nil {
			return false, err.Error()
		}
		held := m.Sum("sample_controller_slots_held", nil)
		return held == 2, fmt.Sprintf("%v slots held", held)
	})
	shardedScrape := filepath.Join(t.TempDir(), "sharded-metrics.txt")
	writeScrape(t, scrapeMetrics(t, shardedReplica), shardedScrape)

	// The rules as `make deploy COMPONENTS=prometheus` applies them.
	dir := overlayDir(t)
	if out, err := env.DeployComponents(t.Context(), dir, []string{"prometheus"}, "apply", "--dry-run=server"); err != nil {
		t.Fatalf("make deploy COMPONENTS=prometheus (dry run): %v\n%s", err, out)
	}
	manifests := env.Kubectl(t, "kustomize", dir)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), checker, "--rules", rules, "--metrics", scrape+","+shardedScrape).CombinedOutput()
	t.Logf("hack/alertcheck:\n%s", out)
	if err != nil {
		t.Errorf("hack/alertcheck: %v; the alerts select series the controller does not serve", err)
	}
	passed, dashboardQueries := 0, 0
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "ok ") {
			passed++
			if strings.Contains(line, "sample-controller-dashboard") {
				dashboardQueries++
			}
		}
	}
	if passed-dashboardQueries < 5 {
		t.Errorf("hack/alertcheck passed %d alerts, want at least 5", passed-dashboardQueries)
	}
	// The Grafana dashboard's queries, from its ConfigMap, against the same scrapes.
	if dashboardQueries < 10 {
		t.Errorf("hack/alertcheck passed %d queries of the Grafana dashboard, want at least 10", dashboardQueries)
	}

	// The check bites on this very scrape: one label value misspelled fails it.
	broken := strings.Replace(manifests, `result="rejected"`, `result="rejecte"`, 1)
	if broken == manifests {
		t.Fatal(`no alert selects result="rejected"`)
	}
	if err := os.WriteFile(rules, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(t.Context(), checker, "--rules", rules, "--metrics", scrape).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), `result="rejecte"`) {
		t.Errorf("hack/alertcheck with result=\"rejecte\": %v, want it to fail naming the value\n%s", err, out)
	}
}

var (
	monitoringCRDsOnce sync.Once
	monitoringCRDsErr  error
)

// installMonitoringCRDs installs, once for the suite, stand-ins for the Prometheus
// Operator's and cert-manager's CRDs (testdata/monitoring-crds.yaml).
func installMonitoringCRDs(t *testing.T) {
	t.Helper()
	monitoringCRDsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out, err := env.KubectlRun(ctx, "", "apply", "-f", filepath.Join("testdata", "monitoring-crds.yaml"))
		if err != nil {
			monitoringCRDsErr = fmt.Errorf("installing the monitoring CRDs: %w\n%s", err, out)
			return
		}
		monitoringCRDsErr = localcluster.WaitCRDsEstablished(ctx, env.Cluster.RESTConfig(),
			"servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com",
			"issuers.cert-manager.io", "certificates.cert-manager.io")
	})
	if monitoringCRDsErr != nil {
		t.Fatal(monitoringCRDsErr)
	}
}

// overlayDir is a directory of the test's own, under the repository as
// hack/deploy.sh wants it, for the overlay it writes.
func overlayDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(env.OutDir, "overlay-"+strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildAlertcheck builds hack/alertcheck, a module of its own, into the suite's
// output directory.
func buildAlertcheck(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(env.OutDir, "alertcheck")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(env.RepoRoot, "hack", "alertcheck")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building hack/alertcheck: %v\n%s", err, out)
	}
	return bin
}

// writeScrape writes a scrape back in the text format, as Prometheus would read it.
func writeScrape(t *testing.T, m localcluster.Metrics, path string) {
	t.Helper()
	var b strings.Builder
	for _, mf := range m {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
