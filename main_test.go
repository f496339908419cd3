package main

import (
	"flag"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestRestConfigRateLimits(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", Namespace: "team-a"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))

	for _, c := range []struct {
		name      string
		qps       float64
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{"no client-side limit by default", 0, 0, -1, 0},
		{"burst twice the QPS", 50, 0, 50, 100},
		{"burst as given", 50, 7, 50, 7},
		{"a QPS below 0.5 still has a burst", 0.3, 0, 0.3, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, namespace, err := restConfig(options{kubeconfig: kubeconfig, kubeAPIQPS: c.qps, kubeAPIBurst: c.burst})
			if err != nil {
				t.Fatal(err)
			}
			if got.QPS != c.wantQPS || (c.wantQPS > 0 && got.Burst != c.wantBurst) {
				t.Errorf("QPS %v, burst %v; want %v, %v", got.QPS, got.Burst, c.wantQPS, c.wantBurst)
			}
			if namespace != "team-a" {
				t.Errorf("namespace %q, want the context's, team-a", namespace)
			}
		})
	}
}

func TestMetricsFlags(t *testing.T) {
	for _, c := range []struct {
		name        string
		args        []string
		wantSecure  bool
		wantAddress string
		wantAuthn   string
	}{
		{"secure on :8443 by default", nil, true, ":8443", ""},
		{"plain HTTP for local runs, single-dash as any other flag", []string{"-metrics-secure=false", "-metrics-bind-address=:8080"}, false, ":8080", ""},
		{"secure serving's flags on the same command line", []string{"-kubeconfig=/k", "--authentication-kubeconfig=/a"}, true, ":8443", "/a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var opts options
			fs := flag.NewFlagSet("sample-controller", flag.ContinueOnError)
			opts.addFlags(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if opts.metricsSecure != c.wantSecure || opts.metricsBindAddress != c.wantAddress || opts.secureServing.AuthenticationKubeconfig != c.wantAuthn {
				t.Errorf("--metrics-secure=%v on %q, --authentication-kubeconfig=%q; want %v on %q, %q",
					opts.metricsSecure, opts.metricsBindAddress, opts.secureServing.AuthenticationKubeconfig, c.wantSecure, c.wantAddress, c.wantAuthn)
			}
		})
	}
}
