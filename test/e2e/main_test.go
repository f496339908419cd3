//go:build e2e

// Package e2e drives a real local control plane the way a user does: kubectl with the
// manifests in artifacts/, and the controller as a separate process built from this
// repository. Run it with `make test` (or `go test -tags e2e ./test/e2e/` once
// hack/build-tools.sh has built the control plane).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/pkg/localcluster"
)

// env is the cluster and the controller every test shares.
var env struct {
	repoRoot   string
	outDir     string // _output/e2e: cluster state and every log, kept for inspection
	kubectl    string
	controller string // the controller binary
	kubeconfig string // admin
	// controllerKubeconfig authenticates as the ServiceAccount of artifacts/deploy, so
	// every test also proves that its RBAC suffices.
	controllerKubeconfig string
	kube                 kubernetes.Interface
	sample               clientset.Interface

	mu      sync.Mutex
	current *controllerProcess // the controller all tests rely on, unless one stops it
	started int                // controller processes started, to name their logs
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer tearDown()
	if err := setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: setting up: %v\n", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: logs of the cluster and the controller are in %s\n", env.outDir)
	}
	return code
}

var cluster *localcluster.Cluster

func setUp(ctx context.Context) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	env.repoRoot = root
	env.outDir = filepath.Join(root, "_output", "e2e")
	if err := os.RemoveAll(env.outDir); err != nil {
		return err
	}
	if err := os.MkdirAll(env.outDir, 0o755); err != nil {
		return err
	}
	binDir, err := localcluster.DefaultBinDir()
	if err != nil {
		return err
	}
	env.kubectl = filepath.Join(binDir, "kubectl")

	// The controller comes first: a compile error should not wait for a cluster.
	env.controller = filepath.Join(env.outDir, "sample-controller")
	if archive := os.Getenv(imageArchiveEnv); archive != "" {
		if err := extractFromImage(ctx, binDir, archive, env.controller); err != nil {
			return err
		}
	} else {
		build := exec.CommandContext(ctx, "go", "build", "-o", env.controller, ".")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building the controller: %v\n%s", err, out)
		}
	}

	began := time.Now()
	cluster, err = localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(env.outDir, "cluster"), BinDir: binDir})
	if err != nil {
		return err
	}
	klog.Background().Info("Local cluster started", "duration", time.Since(began).Round(time.Millisecond))
	env.kubeconfig = cluster.KubeconfigPath()
	cfg := cluster.RESTConfig()
	if env.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if env.sample, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}

	// Install the CRD, the RBAC and the controller's Deployment exactly as a user does.
	if out, err := kubectlRun(ctx, "", "apply", "-k", filepath.Join(root, "artifacts", "deploy")); err != nil {
		return fmt.Errorf("applying artifacts/deploy: %v\n%s", err, out)
	}
	if out, err := kubectlRun(ctx, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/foos.samplecontroller.k8s.io"); err != nil {
		return fmt.Errorf("waiting for the CRD: %v\n%s", err, out)
	}
	env.controllerKubeconfig = filepath.Join(env.outDir, "controller.kubeconfig")
	if err := writeServiceAccountKubeconfig(ctx, deployNamespace, "sample-controller", env.controllerKubeconfig); err != nil {
		return err
	}

	p, err := startController()
	if err != nil {
		return err
	}
	env.current = p
	return nil
}

// tearDown stops the controller, then the cluster, leaving no process behind.
func tearDown() {
	if p := takeSharedController(); p != nil {
		if err := p.stop(syscall.SIGTERM); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: stopping the controller: %v\n", err)
		}
	}
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: stopping the cluster: %v\n", err)
		}
	}
}

// controllerProcess is one run of the controller binary.
type controllerProcess struct {
	cmd        *exec.Cmd
	logPath    string
	metricsURL string // http://host:port/metrics
	probesURL  string // http://host:port, for /healthz and /readyz
	done       chan struct{}
	err        error
}

// deployNamespace is where artifacts/deploy installs the controller.
const deployNamespace = "sample-controller-system"

// startController starts the controller as the ServiceAccount of artifacts/deploy,
// with extra flags, and returns once it serves its probes. Its output goes to
// _output/e2e/controller-N.log.
func startController(args ...string) (*controllerProcess, error) {
	return startControllerAs(env.controllerKubeconfig, args...)
}

func startControllerAs(kubeconfig string, args ...string) (*controllerProcess, error) {
	env.mu.Lock()
	env.started++
	n := env.started
	env.mu.Unlock()
	logPath := filepath.Join(env.outDir, fmt.Sprintf("controller-%d.log", n))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Any free port: several controllers may run at once.
	args = append([]string{"--kubeconfig", kubeconfig, "-v=2",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}, args...)
	cmd := exec.Command(env.controller, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a signal meant for it never reaches the test or the cluster.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the controller: %w", err)
	}
	p := &controllerProcess{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	// The servers log the addresses they listen on.
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("controller exited during start-up: %v (log: %s)", p.err, logPath)
		default:
		}
		log, _ := os.ReadFile(logPath)
		for _, m := range serving.FindAllSubmatch(log, -1) {
			switch string(m[1]) {
			case "metrics":
				p.metricsURL = "http://" + string(m[2]) + "/metrics"
			case "health probes":
				p.probesURL = "http://" + string(m[2])
			}
		}
		return p.metricsURL != "" && p.probesURL != "", nil
	})
	if err != nil {
		_ = p.stop(syscall.SIGKILL)
		return nil, fmt.Errorf("waiting for the controller to serve: %w", err)
	}
	return p, nil
}

var serving = regexp.MustCompile(`"Serving (metrics|health probes)" address="([^"]+)"`)

// startReadyController starts a controller and waits until /readyz says its caches
// have synced.
func startReadyController(t *testing.T, args ...string) *controllerProcess {
	t.Helper()
	p, err := startController(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop(syscall.SIGKILL) })
	eventually(t, timeout, "the controller to be ready", func(ctx context.Context) (bool, string) {
		code, body := p.get(ctx, "/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	return p
}

// get fetches a path from the probes server, or the metrics URL for "/metrics".
func (p *controllerProcess) get(ctx context.Context, path string) (int, string) {
	url := p.probesURL + path
	if path == "/metrics" {
		url = p.metricsURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// stop sends sig and waits for the process to exit, killing it after 60 s. It returns
// how the process exited; stopping it again returns the same.
func (p *controllerProcess) stop(sig syscall.Signal) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("controller did not exit within a minute of %v", sig)
	}
	return p.err
}

// sharedController returns the controller the tests share.
func sharedController() *controllerProcess {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.current
}

// takeSharedController returns the shared controller, if one runs, and forgets it.
func takeSharedController() *controllerProcess {
	env.mu.Lock()
	defer env.mu.Unlock()
	p := env.current
	env.current = nil
	return p
}

// withoutSharedController stops the controller the tests share for the duration of
// t, and starts a new one when t ends.
func withoutSharedController(t *testing.T) {
	t.Helper()
	if p := takeSharedController(); p != nil {
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("stopping the shared controller: %v", err)
		}
	}
	t.Cleanup(func() {
		p, err := startController()
		if err != nil {
			t.Fatalf("restarting the shared controller: %v", err)
		}
		env.mu.Lock()
		env.current = p
		env.mu.Unlock()
	})
}

// kubectlRun runs kubectl against the cluster with stdin, and returns its combined output.
func kubectlRun(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, env.kubectl, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// kubectl runs kubectl and fails the test if it fails.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return kubectlIn(t, "", args...)
}

// kubectlIn runs kubectl with stdin and fails the test if it fails.
func kubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectlRun(t.Context(), stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	ns, err := env.kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		err := env.kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// eventually polls cond every 100 ms until it returns true, failing the test with
// cond's last description after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, state := cond(ctx)
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, last)
	}
}

// writeServiceAccountKubeconfig writes a kubeconfig that authenticates with a token of
// the ServiceAccount, against the cluster of the admin kubeconfig, with the
// ServiceAccount's namespace as the context's.
func writeServiceAccountKubeconfig(ctx context.Context, namespace, name, path string) error {
	tokenRequest, err := env.kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	admin, err := clientcmd.LoadFromFile(env.kubeconfig)
	if err != nil {
		return err
	}
	adminContext := admin.Contexts[admin.CurrentContext]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = admin.Clusters[adminContext.Cluster]
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tokenRequest.Status.Token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: namespace}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

// runBinary runs a program and returns its combined output.
func runBinary(ctx context.Context, bin string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// imageArchiveEnv names an OCI archive built by hack/build-image.sh. When it is set,
// every test runs the binary taken out of that image instead of a fresh build.
const imageArchiveEnv = "E2E_IMAGE_ARCHIVE"

// extractFromImage checks that the image runs its static binary as a non-root user,
// and writes that binary to dest.
func extractFromImage(ctx context.Context, binDir, archive, dest string) error {
	out, err := runBinary(ctx, filepath.Join(binDir, "image"), "inspect", "--archive", archive, "--extract-entrypoint", dest)
	if err != nil {
		return fmt.Errorf("extracting the controller from %s: %v\n%s", archive, err, out)
	}
	var config struct {
		User       string   `json:"user"`
		Entrypoint []string `json:"entrypoint"`
	}
	if err := json.Unmarshal([]byte(out), &config); err != nil {
		return fmt.Errorf("reading the image config: %v\n%s", err, out)
	}
	if uid, _, _ := strings.Cut(config.User, ":"); uid == "" || uid == "0" || uid == "root" {
		return fmt.Errorf("the image runs as %q, want a non-root user", config.User)
	}
	if len(config.Entrypoint) != 1 || config.Entrypoint[0] != "/sample-controller" {
		return fmt.Errorf("the image's entrypoint is %q, want [/sample-controller]", config.Entrypoint)
	}
	klog.Background().Info("Running the controller taken out of the image", "archive", archive, "user", config.User)
	return nil
}
