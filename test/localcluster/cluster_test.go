package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// requiredEnv makes a missing binary a test failure instead of a skip, for CI and for
// anyone who means to run the cluster.
const requiredEnv = "LOCALCLUSTER_REQUIRED"

func TestClusterRunsDeploymentAndStopLeavesNoProcess(t *testing.T) {
	binDir := requireBinaries(t)
	_, ctx := ktesting.NewTestContext(t)

	// A directory of the test's, so that the logs are still there for the failure
	// report after Stop.
	dir := t.TempDir()
	began := time.Now()
	c, err := Start(ctx, Options{Dir: dir, BinDir: binDir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("cluster started in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			reportLogs(t, c.LogDir())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})

	client, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	deploy := newDeployment("demo", 2)
	if _, err := client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment: %v", err)
	}
	var available int32
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.AppsV1().Deployments(metav1.NamespaceDefault).Get(ctx, deploy.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		available = got.Status.AvailableReplicas
		return available == *deploy.Spec.Replicas, nil
	})
	if err != nil {
		t.Fatalf("waiting for 2 available replicas, last saw %d: %v", available, err)
	}
	t.Logf("Deployment available in %v", time.Since(began).Round(time.Millisecond))

	// Compacted, etcd refuses to read its history before the revision it returned.
	revision, err := c.CompactEtcd(ctx)
	if err != nil {
		t.Fatalf("CompactEtcd: %v", err)
	}
	older := struct {
		Key      []byte `json:"key"`
		Revision string `json:"revision"`
	}{[]byte("/"), strconv.FormatInt(revision-1, 10)}
	if err := c.etcdCall(ctx, "/v3/kv/range", older, nil); err == nil || !strings.Contains(err.Error(), errEtcdCompacted) {
		t.Errorf("reading etcd at revision %d after compacting to %d: %v, want %q", revision-1, revision, err, errEtcdCompacted)
	}
	if _, err := c.CompactEtcd(ctx); err != nil {
		t.Errorf("CompactEtcd again: %v", err)
	}

	pods, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" {
			t.Errorf("pod %s: phase %s on node %q, want Running on a node", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
		}
	}

	t.Run("InstallCRD creates, then updates, and waits until served", func(t *testing.T) {
		root, err := RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		manifest := filepath.Join(root, "artifacts", "examples", "crd.yaml")
		for range 2 {
			if err := InstallCRD(ctx, c.RESTConfig(), manifest); err != nil {
				t.Fatalf("InstallCRD: %v", err)
			}
		}
	})

	t.Run("a paused etcd is stopped and resumes", func(t *testing.T) {
		etcd := c.Component(ComponentEtcd)
		if err := c.Pause(ComponentEtcd); err != nil {
			t.Fatal(err)
		}
		waitState(t, etcd.Pid(), "stopped", func(state byte) bool { return state == 'T' })
		if err := c.Resume(ComponentEtcd); err != nil {
			t.Fatal(err)
		}
		waitState(t, etcd.Pid(), "running again", func(state byte) bool { return state != 'T' })
		if _, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
			t.Errorf("reading through the apiserver after etcd resumed: %v", err)
		}
	})

	t.Run("a restarted apiserver serves again", func(t *testing.T) {
		old := c.Component(ComponentAPIServer)
		began := time.Now()
		if err := c.Restart(ctx, ComponentAPIServer); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		t.Logf("apiserver restarted in %v", time.Since(began).Round(time.Millisecond))
		restarted := c.Component(ComponentAPIServer)
		if restarted.Pid() == old.Pid() || !processGone(old.Pid()) {
			t.Errorf("the apiserver before the restart (pid %d) is still there", old.Pid())
		}
		if restarted.LogPath() != old.LogPath() {
			t.Errorf("restarted apiserver logs to %s, want %s", restarted.LogPath(), old.LogPath())
		}
		if _, err := client.AppsV1().Deployments(metav1.NamespaceDefault).Get(ctx, deploy.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("reading the Deployment after the restart: %v", err)
		}
		m, err := c.APIServerMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := m.Sum("apiserver_request_total", map[string]string{"resource": "deployments", "verb": "GET"}); n < 1 {
			t.Errorf("apiserver_request_total for GET deployments = %v, want the one just made", n)
		}
	})

	began = time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("cluster stopped in %v", time.Since(began).Round(time.Millisecond))

	if len(c.components) != 5 {
		t.Errorf("started %d components, want 5", len(c.components))
	}
	for _, comp := range c.components {
		if p := comp.proc; !processGone(p.Pid()) {
			t.Errorf("%s (pid %d) or its process group is still there after Stop", p.Name(), p.Pid())
		}
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestStartRetriesWhenAPortIsTaken hands etcd a port that another listener holds, as a
// process running beside the tests can take one between FreePorts and the bind: Start
// tries again on other ports, and the cluster it returns answers. Not parallel: it
// replaces freePorts for the whole package while it runs.
func TestStartRetriesWhenAPortIsTaken(t *testing.T) {
	binDir := requireBinaries(t)
	_, ctx := ktesting.NewTestContext(t)

	taken, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	freePorts = func(ctx context.Context, n int) ([]int, error) {
		calls++
		ports, err := FreePorts(ctx, n)
		if err == nil && calls == 1 {
			ports[0] = taken.Addr().(*net.TCPAddr).Port // etcd's client port
		}
		return ports, err
	}
	t.Cleanup(func() { freePorts = FreePorts })

	c, err := Start(ctx, Options{Dir: t.TempDir(), BinDir: binDir, SkipControllerManager: true, SkipScheduler: true, SkipKwok: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	if calls != 2 {
		t.Errorf("ports were picked %d times, want 2: once taken, once free", calls)
	}
	client, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		t.Errorf("the cluster Start returned does not answer: %v", err)
	}
}

func TestCheckBinariesNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ComponentEtcd), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	err := CheckBinaries(dir)
	var missing *MissingBinariesError
	if !errors.As(err, &missing) {
		t.Fatalf("got %v, want a MissingBinariesError", err)
	}
	if got, want := len(missing.Missing), len(Binaries)-1; got != want {
		t.Errorf("got %d missing (%v), want %d", got, missing.Missing, want)
	}
	for _, name := range missing.Missing {
		if name == ComponentEtcd {
			t.Errorf("etcd reported missing although it is there")
		}
	}
}

// requireBinaries returns the bin directory, or skips the test when the binaries are
// not built, unless requiredEnv is set.
func requireBinaries(t *testing.T) string {
	t.Helper()
	required := os.Getenv(requiredEnv) != ""
	if testing.Short() && !required {
		t.Skip("starts a cluster; skipped in -short mode")
	}
	binDir, err := DefaultBinDir()
	if err == nil {
		err = CheckBinaries(binDir)
	}
	if err != nil {
		if required {
			t.Fatalf("%v (%s is set, so this is a failure)", err, requiredEnv)
		}
		t.Skipf("%v; set %s=1 to fail instead of skipping", err, requiredEnv)
	}
	return binDir
}

func newDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// kwok pulls nothing; the image only has to be a valid reference.
					Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
}

// reportLogs prints the end of every component log, which is where a failure shows.
func reportLogs(t *testing.T, logDir string) {
	t.Helper()
	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Logf("reading logs: %v", err)
		return
	}
	for _, e := range entries {
		path := filepath.Join(logDir, e.Name())
		t.Log(fmt.Sprintf("--- last lines of %s:\n%s", path, tailFile(path, 30)))
	}
}

// processState is the state letter of /proc/<pid>/stat: R, S, D, T (stopped), Z, ...
func processState(pid int) (byte, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name in parentheses may hold spaces; the state follows it.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat %q", pid, stat)
	}
	return stat[i+2], nil
}

// waitState waits until the state of pid satisfies ok; a signal takes effect
// asynchronously.
func waitState(t *testing.T, pid int, what string, ok func(byte) bool) {
	t.Helper()
	var state byte
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		state, err = processState(pid)
		return err == nil && ok(state), err
	})
	if err != nil {
		t.Fatalf("waiting for pid %d to be %s, last state %q: %v", pid, what, state, err)
	}
}
