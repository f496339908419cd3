// Controllers under test as processes: the controller built as the image builds it,
// started against a cluster with its serving addresses, and waited on until it serves.

package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	transportpkg "k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"
)

// ControllerStopGrace is how long the controller may take to exit after SIGTERM: longer
// than the 30 s it gives its in-flight syncs by default.
const ControllerStopGrace = 40 * time.Second

// BuildController builds the controller in the repository root into out with the one
// build the image uses too (hack/build.sh). A failed build's output is in the error.
func BuildController(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build.sh"), out)
	cmd.Dir = root
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the controller: %w\n%s", err, output)
	}
	return nil
}

// ControllerOptions says how StartController runs the controller binary.
type ControllerOptions struct {
	Bin        string
	Kubeconfig string
	// LogDir and Name place the log: <LogDir>/<Name>.log.
	LogDir string
	Name   string
	// Args are extra flags, after the ones StartController sets, so they can override.
	Args []string
	Env  []string
	// Stdout, if set, also receives the controller's output.
	Stdout io.Writer

	// MetricsAddress and ProbeAddress are where the controller serves; empty means a
	// free port on 127.0.0.1 each, so that several controllers can run at once.
	MetricsAddress string
	ProbeAddress   string
	// SecureMetrics serves /metrics over HTTPS to authorized callers only
	// (--metrics-secure), with the self-signed certificate the controller writes to a
	// directory of its own beside the log; MetricsClient trusts it. Otherwise /metrics
	// is plain HTTP, open to anyone.
	SecureMetrics bool
}

// Controller is a running controller and the addresses it was told to serve on.
type Controller struct {
	*Process
	// MetricsURL is http://host:port/metrics, or https:// with SecureMetrics.
	MetricsURL string
	// ProbesURL is http://host:port, where /healthz and /readyz are.
	ProbesURL string
	// certDir holds the metrics server's certificate, with SecureMetrics.
	certDir string
}

// controllerClient is for the controller's own endpoints on loopback.
var controllerClient = &http.Client{Timeout: 10 * time.Second}

// controllerCertPair names the controller's self-signed certificate in --cert-dir:
// sample-controller.crt and .key.
const controllerCertPair = "sample-controller"

// StartController starts the controller with the kubeconfig and its serving addresses
// as flags, and returns once it has started, before it serves anything.
func StartController(ctx context.Context, opts ControllerOptions) (*Controller, error) {
	if opts.MetricsAddress == "" || opts.ProbeAddress == "" {
		ports, err := FreePorts(ctx, 2)
		if err != nil {
			return nil, err
		}
		if opts.MetricsAddress == "" {
			opts.MetricsAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		}
		if opts.ProbeAddress == "" {
			opts.ProbeAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
		}
	}
	metricsURL, err := loopbackURL(opts.MetricsAddress)
	if err != nil {
		return nil, err
	}
	probesURL, err := loopbackURL(opts.ProbeAddress)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + opts.Kubeconfig,
		"--metrics-bind-address=" + opts.MetricsAddress,
		"--health-probe-bind-address=" + opts.ProbeAddress,
		"--metrics-secure=" + strconv.FormatBool(opts.SecureMetrics),
	}
	var certDir string
	if opts.SecureMetrics {
		metricsURL = "https" + strings.TrimPrefix(metricsURL, "http")
		certDir = filepath.Join(opts.LogDir, opts.Name+"-certs")
		args = append(args, "--cert-dir="+certDir)
	}
	args = append(args, opts.Args...)
	p, err := StartProcess(ProcessOptions{
		Name:   opts.Name,
		Bin:    opts.Bin,
		Args:   args,
		Env:    opts.Env,
		LogDir: opts.LogDir,
		Stdout: opts.Stdout,
	})
	if err != nil {
		return nil, err
	}
	return &Controller{Process: p, MetricsURL: metricsURL + "/metrics", ProbesURL: probesURL, certDir: certDir}, nil
}

// loopbackURL is the http URL to reach a bind address from this machine: an address
// with no host or a wildcard one is reached on 127.0.0.1.
func loopbackURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("controller bind address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// Get fetches path from the probes server, or the metrics URL for "/metrics", without
// credentials, and returns the status code and the body.
func (c *Controller) Get(ctx context.Context, path string) (int, string, error) {
	if path == "/metrics" {
		return c.GetMetricsServer(ctx, "", path)
	}
	return fetch(ctx, controllerClient, c.ProbesURL+path)
}

// GetMetricsServer fetches path, such as /metrics or /debug/pprof/heap, from the
// metrics server with token as bearer token (none when empty), and returns the status
// code and the body.
func (c *Controller) GetMetricsServer(ctx context.Context, token, path string) (int, string, error) {
	client, err := c.MetricsClient(token)
	if err != nil {
		return 0, "", err
	}
	return fetch(ctx, client, strings.TrimSuffix(c.MetricsURL, "/metrics")+path)
}

// fetch GETs url with client and returns the status code and the body.
func fetch(ctx context.Context, client *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// WaitServing waits until /healthz answers at all, which means both servers listen:
// the controller opens them together. ctx bounds the wait.
func (c *Controller) WaitServing(ctx context.Context) error {
	return c.Process.WaitFor(ctx, c.Name()+" to serve", func(ctx context.Context) error {
		_, _, err := c.Get(ctx, "/healthz")
		return err
	})
}

// WaitReady waits until /readyz answers 200, once the informer caches have synced.
// ctx bounds the wait.
func (c *Controller) WaitReady(ctx context.Context) error {
	return c.Process.WaitFor(ctx, c.Name()+" to be ready", func(ctx context.Context) error {
		code, body, err := c.Get(ctx, "/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz: %d %s", code, body)
		}
		return err
	})
}

// Metrics scrapes the controller's /metrics, without credentials.
func (c *Controller) Metrics(ctx context.Context) (Metrics, error) {
	client, err := c.MetricsClient("")
	if err != nil {
		return nil, err
	}
	return ScrapeMetrics(ctx, client, c.MetricsURL)
}

// MetricsClient returns a client for MetricsURL that sends token, if any, as a bearer
// token. With SecureMetrics it trusts the certificate the controller wrote, and no
// other: call it once the controller serves.
func (c *Controller) MetricsClient(token string) (*http.Client, error) {
	if c.certDir == "" && token == "" {
		return controllerClient, nil
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A client per call: keep no connection open after it.
	transport.DisableKeepAlives = true
	if c.certDir != "" {
		pool, err := certutil.NewPool(filepath.Join(c.certDir, controllerCertPair+".crt"))
		if err != nil {
			return nil, fmt.Errorf("trusting the metrics certificate of %s: %w", c.Name(), err)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = transport
	if token != "" {
		rt = transportpkg.NewBearerAuthRoundTripper(token, transport)
	}
	return &http.Client{Transport: rt, Timeout: controllerClient.Timeout}, nil
}
