package main

// What the bench needs from a harness besides the cluster: child processes, free
// ports, the CRD, the controller's build, and Prometheus metrics.
//
// TODO(localcluster): pkg/localcluster is becoming the one harness, with
// StartProcess, StartController, FreePorts, InstallCRD, BuildController and Metrics of
// the same shape as below. When it has them, replace this file by those calls.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"github.com/seed-e6610ed6/sample-controller/pkg/localcluster"
)

// processOptions say what to run; the output goes to <LogDir>/<Name>.log.
type processOptions struct {
	Name, Bin string
	Args, Env []string // Env is added to the bench's own environment
	LogDir    string
}

// process is a child in its own process group, so that Ctrl-C in the terminal reaches
// only the bench, which stops it in order. It is killed if the bench dies first.
type process struct {
	name, logPath string
	cmd           *exec.Cmd
	exited        chan struct{}
	waitErr       error
}

func startProcess(o processOptions) (*process, error) {
	p := &process{name: o.Name, logPath: filepath.Join(o.LogDir, o.Name+".log"), exited: make(chan struct{})}
	log, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "+ %s %s\n", o.Bin, strings.Join(o.Args, " "))
	p.cmd = exec.Command(o.Bin, o.Args...)
	p.cmd.Env = append(os.Environ(), o.Env...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed once the process has exited.
func (p *process) Exited() <-chan struct{} { return p.exited }

// ExitError describes an exit the bench did not ask for; call it once Exited is closed.
func (p *process) ExitError() error {
	return fmt.Errorf("%s exited: %v; see %s", p.name, p.waitErr, p.logPath)
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, and waits for the exit.
func (p *process) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	return nil
}

// RSSBytes is the process's resident set size (VmRSS).
func (p *process) RSSBytes() (int64, error) {
	select {
	case <-p.exited:
		return 0, p.ExitError()
	default:
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(status))
}

func parseVmRSS(status string) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(rest, "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("unexpected line %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// controllerOptions say how to run our controller against a cluster.
type controllerOptions struct {
	Bin, Kubeconfig, LogDir, Name string
	Args                          []string
}

// controllerProcess is our controller, serving /metrics at MetricsURL.
type controllerProcess struct {
	*process
	MetricsURL string
}

// startController runs our controller with its metrics and probes on free loopback
// ports that it is told, so nothing depends on the wording of its logs.
func startController(_ context.Context, o controllerOptions) (*controllerProcess, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + o.Kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
	}, o.Args...)
	p, err := startProcess(processOptions{Name: o.Name, Bin: o.Bin, Args: args, LogDir: o.LogDir})
	if err != nil {
		return nil, err
	}
	return &controllerProcess{process: p, MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])}, nil
}

// Metrics scrapes the controller's /metrics.
func (c *controllerProcess) Metrics(ctx context.Context) (metrics, error) {
	return scrapeMetrics(ctx, http.DefaultClient, c.MetricsURL)
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// buildController builds the controller of the repository at root into out.
func buildController(ctx context.Context, root, out string) error {
	build := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the controller: %w", err)
	}
	return nil
}

// installCRD applies the CRD manifest at path and waits until it is established.
func installCRD(ctx context.Context, kubeconfig, path string) error {
	binDir, err := localcluster.DefaultBinDir()
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"apply", "-f", path},
		{"wait", "--for=condition=Established", "--timeout=60s", "-f", path},
	} {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %v: %w\n%s", args, err, out)
		}
	}
	return nil
}

// metrics are the metric families of one scrape, by name.
type metrics map[string]*dto.MetricFamily

func parseMetrics(r io.Reader) (metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	return metrics(families), err
}

// Sum adds up the counters, gauges and untyped samples of the metric called name whose
// labels include labels.
func (m metrics) Sum(name string, labels map[string]string) float64 {
	var sum float64
	for _, s := range m[name].GetMetric() {
		if hasLabels(s, labels) {
			sum += s.GetCounter().GetValue() + s.GetGauge().GetValue() + s.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range s.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

// scrapeMetrics reads a plain HTTP /metrics.
func scrapeMetrics(ctx context.Context, client *http.Client, url string) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// apiserverMetrics reads the apiserver's /metrics.
func apiserverMetrics(ctx context.Context, kube kubernetes.Interface) (metrics, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	return parseMetrics(bytes.NewReader(body))
}
