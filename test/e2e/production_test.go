//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestDeployManifests checks artifacts/deploy against the API server, and that its
// Pods are admitted under the restricted Pod Security level of their namespace.
func TestDeployManifests(t *testing.T) {
	t.Parallel()
	out := env.Kubectl(t, "apply", "-k", filepath.Join(env.RepoRoot, "artifacts", "deploy"), "--dry-run=server")
	for _, want := range []string{"namespace/sample-controller-system", "clusterrole.rbac.authorization.k8s.io/sample-controller", "deployment.apps/sample-controller"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run does not mention %s:\n%s", want, out)
		}
	}

	// The setup applied the same manifests: both replicas' Pods got through admission.
	selector := labels.Set{"app.kubernetes.io/name": "sample-controller"}.String()
	pods := waitRunningPods(t, framework.DeployNamespace, selector, 2)
	for _, p := range pods {
		sc := p.Spec.Containers[0].SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("Pod %s: root filesystem is writable", p.Name)
		}
	}

	// And the namespace really enforces that level: a Pod that does not drop its
	// privileges is refused.
	plain := `apiVersion: v1
kind: Pod
metadata:
  name: unrestricted
spec:
  containers:
  - name: c
    image: busybox
`
	out, err := env.KubectlRun(t.Context(), plain, "apply", "-n", framework.DeployNamespace, "-f", "-")
	if err == nil || !strings.Contains(out, `violates PodSecurity "restricted:latest"`) {
		t.Errorf("an unrestricted Pod in %s: err = %v, output:\n%s\nwant a PodSecurity refusal", framework.DeployNamespace, err, out)
	}
}

// TestDeployAndUndeploy checks what `make deploy IMAGE=...` and `make undeploy` would
// do, by server dry runs: the image a user names is the one that runs, and removing
// the controller leaves the CRD, and so every Foo and its Deployment, in place.
func TestDeployAndUndeploy(t *testing.T) {
	t.Parallel()
	const image = "registry.example.com/team/sample-controller:v9.8.7"
	out, err := env.Deploy(t.Context(), "apply", image, "--dry-run=server", "-o", "yaml")
	if err != nil {
		t.Fatalf("make deploy IMAGE=%s (dry run): %v\n%s", image, err, out)
	}
	if !strings.Contains(out, "image: "+image+"\n") {
		t.Errorf("make deploy IMAGE=%s would not run that image:\n%s", image, out)
	}

	out, err = env.Deploy(t.Context(), "delete", "", "--dry-run=server")
	if err != nil {
		t.Fatalf("make undeploy (dry run): %v\n%s", err, out)
	}
	for _, want := range []string{"deployment.apps \"sample-controller\" deleted", "namespace \"sample-controller-system\" deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("make undeploy would not delete %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "customresourcedefinition") {
		t.Errorf("make undeploy would delete the CRD, and with it every Foo:\n%s", out)
	}
}

// TestRBACRefusesTheRest runs requests the controller's role does not allow, beside
// some it does.
func TestRBACRefusesTheRest(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-A"}, `cannot list resource "secrets"`},
		{[]string{"delete", "foo", "anything", "-n", ns}, `cannot delete resource "foos"`},
		{[]string{"create", "deployment", "x", "--image=nginx", "-n", ns, "--dry-run=server", "-o", "name"}, ""},
		// The controller patches its Deployments (its cache keeps only the fields it
		// reads); kubectl patch reads the object first, so ask the authorizer directly.
		{[]string{"auth", "can-i", "patch", "deployments", "-n", ns}, "yes"},
		{[]string{"auth", "can-i", "deletecollection", "deployments", "-n", ns}, "no"},
	}
	for _, tc := range tests {
		out, err := env.KubectlAs(t.Context(), env.ControllerKubeconfig, "", tc.args...)
		if tc.want == "" {
			if err != nil {
				t.Errorf("kubectl %s as the controller: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
			continue
		}
		if tc.want == "yes" {
			if err != nil || strings.TrimSpace(out) != "yes" {
				t.Errorf("kubectl %s as the controller: err = %v, output %q, want yes", strings.Join(tc.args, " "), err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("kubectl %s as the controller: err = %v, output %q, want Forbidden with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}

// TestNamespaceUsersWorkWithFoos binds people to Kubernetes' own roles in a namespace,
// as a cluster admin does for a team, and nothing else: with edit they create, scale
// and delete Foos, with view they read them, and neither writes a Foo's status, which
// is the controller's (artifacts/deploy/roles.yaml aggregates into those roles).
func TestNamespaceUsersWorkWithFoos(t *testing.T) {
	t.Parallel()
	ns, _ := env.NamespaceWithController(t)
	env.Kubectl(t, "create", "rolebinding", "team-edit", "--clusterrole=edit", "--user=jane", "-n", ns)
	env.Kubectl(t, "create", "rolebinding", "team-view", "--clusterrole=view", "--user=vic", "-n", ns)
	as := func(user, stdin string, args ...string) (string, error) {
		return env.KubectlRun(t.Context(), stdin, append([]string{"--as=" + user, "-n", ns}, args...)...)
	}
	framework.Eventually(t, timeout, "the edit role to aggregate the Foo editor's rules", func(context.Context) (bool, string) {
		out, _ := as("jane", "", "auth", "can-i", "create", "foos.samplecontroller.k8s.io")
		return strings.TrimSpace(out) == "yes", out
	})

	if out, err := as("jane", fooYAML("team", "team", 1), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply of a Foo as an editor: %v\n%s", err, out)
	}
	if out, err := as("jane", "", "scale", "foo/team", "--replicas=2"); err != nil {
		t.Fatalf("kubectl scale of a Foo as an editor: %v\n%s", err, out)
	}
	waitReady(t, ns, "team", 2)
	if out, err := as("vic", "", "get", "foo/team", "-o", "jsonpath={.status.availableReplicas}"); err != nil || out != "2" {
		t.Errorf("kubectl get of a Foo as a viewer: %q, %v; want 2 available", out, err)
	}
	for _, tc := range []struct{ user, verb, subresource string }{
		{"vic", "create", ""},
		{"vic", "update", "scale"},
		{"jane", "update", "status"},
		{"jane", "patch", "status"},
	} {
		args := []string{"auth", "can-i", tc.verb, "foos.samplecontroller.k8s.io", "--subresource=" + tc.subresource}
		if out, _ := as(tc.user, "", args...); strings.TrimSpace(out) != "no" {
			t.Errorf("kubectl %s as %s: %q, want no", strings.Join(args, " "), tc.user, out)
		}
	}
	// The edit role's own grants, for comparison: the checks above can say yes.
	if out, _ := as("jane", "", "auth", "can-i", "update", "foos.samplecontroller.k8s.io", "--subresource=scale"); strings.TrimSpace(out) != "yes" {
		t.Errorf("kubectl auth can-i update foos --subresource=scale as jane: %q, want yes", out)
	}
	if out, err := as("jane", "", "delete", "foo/team", "--wait=false"); err != nil {
		t.Errorf("kubectl delete of a Foo as an editor: %v\n%s", err, out)
	}
}

// TestReadyzWaitsForCacheSync starts the controller as a ServiceAccount that may not
// list anything yet: it is alive but not ready until it may, and its caches sync.
func TestReadyzWaitsForCacheSync(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.NewNamespace(t)
	sa := env.NewServiceAccount(t, framework.DeployNamespace, "not-yet-allowed-")
	kubeconfig := filepath.Join(env.OutDir, sa+".kubeconfig")
	if err := env.WriteServiceAccountKubeconfig(ctx, framework.DeployNamespace, sa, kubeconfig); err != nil {
		t.Fatal(err)
	}
	p := env.StartControllerAs(t, kubeconfig, "--namespace="+ns)

	// The informers are refused: wait until the client has had a 403, and check the
	// probes then.
	framework.Eventually(t, timeout, "the controller's list requests to be refused", func(ctx context.Context) (bool, string) {
		m, err := p.Metrics(ctx)
		if err != nil {
			return false, err.Error()
		}
		refused := m.Sum("rest_client_requests_total", map[string]string{"code": "403"})
		return refused > 0, fmt.Sprintf("%v requests refused with 403 so far", refused)
	})
	if code, body, err := p.Get(ctx, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the caches synced = %d %q (%v), want 503", code, body, err)
	}
	if code, body, err := p.Get(ctx, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q (%v), want 200", code, body, err)
	}

	env.BindClusterRole(t, "sample-controller", framework.DeployNamespace, sa)
	framework.Eventually(t, timeout, "/readyz to turn ready once the caches can sync", func(ctx context.Context) (bool, string) {
		code, body, err := p.Get(ctx, "/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	})
}

// TestLeaderElection runs two replicas with leader election, the way artifacts/deploy
// does, and takes the leader away twice: by SIGKILL, and by SIGTERM as a rolling
// update does.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	// The flags of artifacts/deploy's Deployment.
	const leaseDuration, retryPeriod = 15 * time.Second, time.Second
	leaderArgs := []string{"--leader-elect", "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=1s"}

	a := env.StartReadyController(t, ns, leaderArgs...)
	b := env.StartReadyController(t, ns, leaderArgs...)
	leader, holder := waitLeader(t, []*localcluster.Controller{a, b}, "")
	follower := a
	if leader == a {
		follower = b
	}

	env.KubectlIn(t, fooYAML("first", "first", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "first", 1)
	if n := syncs(t, leader); n == 0 {
		t.Errorf("the leader made %v syncs, want some", n)
	}
	if n := syncs(t, follower); n != 0 {
		t.Errorf("the follower made %v syncs, want 0", n)
	}
	// What an alert on "no leader" sums over the replicas.
	for _, c := range []struct {
		p    *localcluster.Controller
		who  string
		want float64
	}{{leader, "leader", 1}, {follower, "follower", 0}} {
		m := scrapeMetrics(t, c.p)
		status := map[string]string{"name": "sample-controller"}
		if !m.Has("leader_election_master_status", status) || m.Sum("leader_election_master_status", status) != c.want {
			t.Errorf("the %s's leader_election_master_status = %v (present: %v), want %v", c.who,
				m.Sum("leader_election_master_status", status), m.Has("leader_election_master_status", status), c.want)
		}
	}

	// SIGKILL: nobody releases the Lease; the follower takes it once it expires.
	killed := time.Now()
	_ = leader.Kill()
	leader, holder = waitLeader(t, []*localcluster.Controller{follower}, holder)
	killTakeover := time.Since(killed)
	env.KubectlIn(t, fooYAML("second", "second", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "second", 1)

	// SIGTERM: the leader finishes its work and releases the Lease on the way out.
	standby := env.StartReadyController(t, ns, leaderArgs...)
	terminated := time.Now()
	if err := leader.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = waitLeader(t, []*localcluster.Controller{standby}, holder)
	termTakeover := time.Since(terminated)
	// Stop would send a second SIGTERM, on which the controller exits at once.
	select {
	case <-leader.Exited():
		if err := leader.Err(); err != nil {
			t.Errorf("the leader exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(localcluster.ControllerStopGrace):
		t.Errorf("the leader did not exit within %v of SIGTERM", localcluster.ControllerStopGrace)
	}
	env.KubectlIn(t, fooYAML("third", "third", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "third", 1)

	fmt.Printf("leader election: takeover %.2fs after SIGKILL of the leader (lease duration %v + retry period %v), %.2fs after SIGTERM\n",
		killTakeover.Seconds(), leaseDuration, retryPeriod, termTakeover.Seconds())
	// A released Lease is taken within a retry period; an abandoned one only once it
	// expires. Anything near the lease duration means it was not released.
	if termTakeover >= leaseDuration {
		t.Errorf("takeover after SIGTERM took %v: the Lease was not released", termTakeover)
	}

	list, err := env.Kube.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[types.UID]int{}
	for _, d := range list.Items {
		if ref := metav1.GetControllerOf(&d); ref != nil {
			owners[ref.UID]++
		}
	}
	if len(list.Items) != 3 || len(owners) != 3 {
		t.Errorf("%d Deployments owned by %d Foos, want 3 each", len(list.Items), len(owners))
	}
}

// waitLeader waits until the Lease is held by one of procs, other than previous, and
// returns that process and its identity.
func waitLeader(t *testing.T, procs []*localcluster.Controller, previous string) (*localcluster.Controller, string) {
	t.Helper()
	var leader *localcluster.Controller
	var holder string
	framework.Eventually(t, timeout, "a new leader", func(ctx context.Context) (bool, string) {
		lease, err := env.Kube.CoordinationV1().Leases(framework.DeployNamespace).Get(ctx, "sample-controller", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || *lease.Spec.HolderIdentity == previous {
			return false, fmt.Sprintf("holder %v", lease.Spec.HolderIdentity)
		}
		holder = *lease.Spec.HolderIdentity
		// The process that says it leads, by its metrics rather than its log's wording.
		for _, p := range procs {
			if isLeading(ctx, p, "sample-controller") {
				leader = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("holder %s is none of the expected processes", holder)
	})
	return leader, holder
}

// isLeading tells whether p reports, on /metrics, that it holds the named Lease.
func isLeading(ctx context.Context, p *localcluster.Controller, lease string) bool {
	m, err := p.Metrics(ctx)
	return err == nil && m.Sum("leader_election_master_status", map[string]string{"name": lease}) == 1
}

// TestMetrics scrapes a controller after it has done some work.
func TestMetrics(t *testing.T) {
	t.Parallel()
	ns, p := env.NamespaceWithController(t)
	env.KubectlIn(t, fooYAML("measured", "measured", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "measured", 1)

	// The controller counts Foos by their Ready condition from its cache, which hears of
	// its own status write after the API server serves it, later on a loaded machine:
	// scrape until the count has the Foo ready.
	var m localcluster.Metrics
	ready := map[string]string{"ready": "True"}
	framework.Eventually(t, timeout, "the controller to count the Foo ready", func(ctx context.Context) (bool, string) {
		var err error
		if m, err = p.Metrics(ctx); err != nil {
			return false, err.Error()
		}
		n := m.Sum("sample_controller_foos", ready)
		return n > 0, fmt.Sprintf("sample_controller_foos%v = %v", ready, n)
	})
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"sample_controller_syncs_total", map[string]string{"result": "success"}},
		{"sample_controller_sync_duration_seconds", nil},
		{"sample_controller_foos", map[string]string{"ready": "True"}},
		{"workqueue_adds_total", map[string]string{"name": "foos"}},
		{"workqueue_work_duration_seconds", map[string]string{"name": "foos"}},
		{"workqueue_queue_duration_seconds", map[string]string{"name": "foos"}},
		{"rest_client_requests_total", map[string]string{"code": "201", "method": "POST"}},
		{"rest_client_request_duration_seconds", map[string]string{"verb": "POST"}},
		// How far each cache has got: client-go's informer metrics.
		{"informer_store_resource_version", map[string]string{"name": "sample-controller-foos", "resource": "foos"}},
		{"informer_store_resource_version", map[string]string{"name": "sample-controller-deployments", "resource": "deployments"}},
		{"informer_processing_latency_seconds", map[string]string{"name": "sample-controller-foos"}},
	} {
		// Histograms sum their sample counts, the _count series.
		if v := m.Sum(c.name, c.labels); v <= 0 {
			t.Errorf("%s%v = %v, want > 0", c.name, c.labels, v)
		}
	}
	for _, name := range []string{"workqueue_depth", "workqueue_retries_total", "workqueue_longest_running_processor_seconds", "workqueue_unfinished_work_seconds"} {
		if !m.Has(name, map[string]string{"name": "foos"}) {
			t.Errorf("/metrics has no %s for the foos queue", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"sample_controller_stale_cache_skips_total", map[string]string{"resource": "foos"}},
		{"sample_controller_stale_cache_skips_total", map[string]string{"resource": "deployments"}},
		{"sample_controller_writes_held_back_total", map[string]string{"reason": "expired"}},
		{"sample_controller_events_dropped_total", map[string]string{"reason": "tenure_over"}},
		{"sample_controller_build_info", nil},
	} {
		if !m.Has(c.name, c.labels) {
			t.Errorf("/metrics has no %s%v", c.name, c.labels)
		}
	}
	// The garbage collector's target the controller sets for itself (main.go's
	// defaultGOGC), unless it inherits a GOGC from the test's environment.
	if _, set := os.LookupEnv("GOGC"); !set {
		if v := m.Sum("go_gc_gogc_percent", nil); v != 50 {
			t.Errorf("go_gc_gogc_percent = %v, want 50", v)
		}
	}
}

// TestSecureMetrics runs a controller with --metrics-secure, as artifacts/deploy does,
// and as its ServiceAccount, whose RBAC must let it review tokens and access: /metrics
// answers only callers that the API server authenticates and authorizes, over TLS, and
// the probes stay open.
func TestSecureMetrics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.NewNamespace(t)
	p := env.StartControllerWith(t, localcluster.ControllerOptions{SecureMetrics: true, Args: []string{"--namespace=" + ns, "--profiling"}})

	scraper := env.NewServiceAccount(t, ns, "scraper-")
	env.BindClusterRole(t, "sample-controller-metrics-reader", ns, scraper)
	bystander := env.NewServiceAccount(t, ns, "bystander-")
	tokens := map[string]string{}
	for _, sa := range []string{scraper, bystander} {
		token, err := env.ServiceAccountToken(ctx, ns, sa)
		if err != nil {
			t.Fatal(err)
		}
		tokens[sa] = token
	}
	get := func(ctx context.Context, token, path string) (int, string, error) {
		code, body, err := p.GetMetricsServer(ctx, token, path)
		return code, body[:min(len(body), 1024)], err
	}

	// The binding may take a moment to reach the API server's authorizer, and a refusal
	// is cached for 10 s: poll until the scraper is let in.
	framework.Eventually(t, timeout, "the scraper's token to be accepted", func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx, tokens[scraper], "/metrics")
		return code == http.StatusOK, fmt.Sprintf("%d %q %v", code, body, err)
	})
	for _, c := range []struct {
		name, token, path string
		want              int
	}{
		{"no token", "", "/metrics", http.StatusUnauthorized},
		{"a token the API server did not issue", "not-a-token", "/metrics", http.StatusUnauthorized},
		{"a ServiceAccount without the role", tokens[bystander], "/metrics", http.StatusForbidden},
		{"a ServiceAccount bound to sample-controller-metrics-reader", tokens[scraper], "/metrics", http.StatusOK},
		{"the scrapers' role does not grant profiles", tokens[scraper], "/debug/pprof/heap", http.StatusForbidden},
		{"profiles need a token too", "", "/debug/pprof/heap", http.StatusUnauthorized},
	} {
		if code, body, err := get(ctx, c.token, c.path); code != c.want {
			t.Errorf("%s: GET %s = %d %q (%v), want %d", c.name, c.path, code, body, err, c.want)
		}
	}

	client, err := p.MetricsClient(tokens[scraper])
	if err != nil {
		t.Fatal(err)
	}
	m, err := localcluster.ScrapeMetrics(ctx, client, p.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Has("sample_controller_build_info", nil) || !m.Has("workqueue_adds_total", map[string]string{"name": "foos"}) {
		t.Errorf("the scraper's /metrics has no sample_controller_build_info or workqueue_adds_total{name=\"foos\"}")
	}

	// The probes stay plain HTTP, without a token.
	if code, body, err := p.Get(ctx, "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz without a token = %d %q (%v), want 200", code, body, err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Errorf("/readyz without a token: %v", err)
	}

	// Plain HTTP gets nothing but a refusal from the TLS port.
	plain := "http" + strings.TrimPrefix(p.MetricsURL, "https")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", plain, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET %s over plain HTTP = %d, want 400", plain, resp.StatusCode)
	}
}

// scrapeMetrics returns a controller's /metrics.
func scrapeMetrics(t *testing.T, p *localcluster.Controller) localcluster.Metrics {
	t.Helper()
	m, err := p.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// syncs is the total of sample_controller_syncs_total of a controller.
func syncs(t *testing.T, p *localcluster.Controller) float64 {
	t.Helper()
	return scrapeMetrics(t, p).Sum("sample_controller_syncs_total", nil)
}

// failedSyncs is sample_controller_syncs_total of a controller for the results
// error and rejected.
func failedSyncs(t *testing.T, p *localcluster.Controller) (failed, rejected float64) {
	t.Helper()
	m := scrapeMetrics(t, p)
	return m.Sum("sample_controller_syncs_total", map[string]string{"result": "error"}),
		m.Sum("sample_controller_syncs_total", map[string]string{"result": "rejected"})
}

// TestVersion runs the binary under test with --version, as an operator checks what a
// Pod runs: the image's binary carries the version (hack/version.sh) and its commit.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), env.ControllerBin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	line := strings.TrimSpace(string(out))
	want := "sample-controller "
	if os.Getenv(framework.ImageArchiveEnv) != "" {
		version, err := exec.CommandContext(t.Context(), filepath.Join(env.RepoRoot, "hack", "version.sh")).Output()
		if err != nil {
			t.Fatalf("hack/version.sh: %v", err)
		}
		want += strings.TrimSpace(string(version)) + " (revision "
	}
	if !strings.HasPrefix(line, want) || strings.Count(line, "\n") != 0 {
		t.Errorf("--version printed %q, want one line starting with %q", line, want)
	}
	if strings.Contains(line, "revision unknown") && os.Getenv(framework.ImageArchiveEnv) != "" {
		t.Errorf("--version printed %q: the image's binary does not know its commit", line)
	}
}

// TestJSONLogging runs a controller with --logging-format=json, as log pipelines want
// it: every line it writes is one JSON object with a message.
func TestJSONLogging(t *testing.T) {
	t.Parallel()
	ns, p := env.NamespaceWithController(t, "--logging-format=json")
	env.KubectlIn(t, fooYAML("logged", "logged", 1), "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, "logged", 1)

	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d log lines, want some:\n%s", len(lines), log)
	}
	for i, line := range lines {
		if strings.HasPrefix(line, "+ ") {
			continue // the harness's record of the command line
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("line %d is not JSON (%v): %s", i+1, err, line)
		}
		if _, ok := entry["msg"]; !ok {
			t.Errorf("line %d has no msg: %s", i+1, line)
		}
	}
}
