package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// fakeControllerEnv makes the test binary play the controller: serve /healthz at once,
// /readyz after a moment, and /metrics, on the addresses its flags name; with
// --metrics-secure, over HTTPS and to fakeToken only.
const fakeControllerEnv = "LOCALCLUSTER_FAKE_CONTROLLER"

const fakeToken = "fake-token"

func TestMain(m *testing.M) {
	if os.Getenv(fakeControllerEnv) != "" {
		os.Exit(fakeController(os.Args[1:]))
	}
	if first := os.Getenv(portHolderEnv); first != "" {
		os.Exit(portHolder(first))
	}
	os.Exit(m.Run())
}

func fakeController(args []string) int {
	fs := flag.NewFlagSet("fake-controller", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "")
	metricsAddr := fs.String("metrics-bind-address", "", "")
	probeAddr := fs.String("health-probe-bind-address", "", "")
	secure := fs.Bool("metrics-secure", true, "")
	certDir := fs.String("cert-dir", "", "")
	fail := fs.Bool("fail", false, "exit at once")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *fail {
		fmt.Println("cannot load", *kubeconfig)
		return 3
	}
	var tlsConfig *tls.Config
	if *secure {
		// As the controller does: a self-signed certificate in --cert-dir, and 401
		// without the one token it accepts.
		cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
		if err == nil {
			err = errors.Join(certutil.WriteCert(filepath.Join(*certDir, "sample-controller.crt"), cert), keyutil.WriteKey(filepath.Join(*certDir, "sample-controller.key"), key))
		}
		var pair tls.Certificate
		if err == nil {
			pair, err = tls.X509KeyPair(cert, key)
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
	}
	started := time.Now()
	probes := http.NewServeMux()
	probes.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	probes.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if time.Since(started) < 300*time.Millisecond {
			http.Error(w, "not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	metrics := http.NewServeMux()
	metrics.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if *secure && r.Header.Get("Authorization") != "Bearer "+fakeToken {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "# TYPE fake_kubeconfig_loaded gauge\nfake_kubeconfig_loaded{path=%q} 1\n", *kubeconfig)
	})
	errs := make(chan error, 2)
	for addr, handler := range map[string]http.Handler{*metricsAddr: metrics, *probeAddr: probes} {
		// The fake is a program of its own here, with no context but the root one.
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if addr == *metricsAddr && tlsConfig != nil {
			l = tls.NewListener(l, tlsConfig)
		}
		go func() { errs <- http.Serve(l, handler) }()
	}
	fmt.Println(<-errs)
	return 1
}

func TestStartControllerPassesItsAddresses(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := startFakeController(t)
	if err := c.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body, err := c.Get(ctx, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz = %d %q %v, want 200", code, body, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Has("fake_kubeconfig_loaded", map[string]string{"path": "/nowhere/kubeconfig"}) {
		t.Errorf("the controller did not get --kubeconfig; metrics %v", m)
	}
}

func TestStartControllerWithSecureMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := StartController(t.Context(), ControllerOptions{
		Bin:           os.Args[0],
		Kubeconfig:    "/nowhere/kubeconfig",
		LogDir:        t.TempDir(),
		Name:          "fake",
		Env:           []string{fakeControllerEnv + "=1"},
		SecureMetrics: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(5 * time.Second) })
	if err := c.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.MetricsURL, "https://127.0.0.1:") {
		t.Errorf("MetricsURL = %s, want https on loopback", c.MetricsURL)
	}
	// The probes stay plain HTTP; the metrics want a token, over TLS that the client
	// verifies against the certificate the controller wrote.
	if code, _, err := c.Get(ctx, "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz = %d, %v; want 200", code, err)
	}
	if code, _, err := c.Get(ctx, "/metrics"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token = %d, %v; want 401", code, err)
	}
	client, err := c.MetricsClient(fakeToken)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ScrapeMetrics(ctx, client, c.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Has("fake_kubeconfig_loaded", nil) {
		t.Errorf("scraped %v, want the fake's metric", m)
	}
}

func TestWaitServingFailsWhenTheControllerExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := startFakeController(t, "--fail")
	err := c.WaitServing(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "cannot load /nowhere/kubeconfig") {
		t.Errorf("WaitServing = %v, want the exit with the end of the log", err)
	}
}

// startFakeController starts the test binary as a controller with extra flags, and
// stops it when the test ends.
func startFakeController(t *testing.T, args ...string) *Controller {
	t.Helper()
	c, err := StartController(t.Context(), ControllerOptions{
		Bin:        os.Args[0],
		Kubeconfig: "/nowhere/kubeconfig",
		LogDir:     t.TempDir(),
		Name:       "fake",
		Args:       args,
		Env:        []string{fakeControllerEnv + "=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(5 * time.Second) })
	return c
}

func TestLoopbackURL(t *testing.T) {
	for addr, want := range map[string]string{
		":8080":          "http://127.0.0.1:8080",
		"0.0.0.0:8080":   "http://127.0.0.1:8080",
		"[::]:8081":      "http://127.0.0.1:8081",
		"127.0.0.1:9000": "http://127.0.0.1:9000",
		"[::1]:9000":     "http://[::1]:9000",
	} {
		if got, err := loopbackURL(addr); err != nil || got != want {
			t.Errorf("loopbackURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := loopbackURL("8080"); err == nil {
		t.Error(`loopbackURL("8080") succeeded without a port separator`)
	}
}
