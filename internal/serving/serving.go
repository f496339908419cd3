// Package serving serves the controller's own endpoints: the health probes over plain
// HTTP, and /metrics with Go's profiles, which it serves as kube-controller-manager
// serves its own: over HTTPS, to callers that the API server authenticates
// (TokenReview) and authorizes for the request's path (SubjectAccessReview, a
// non-resource URL check such as get on /metrics), or over plain HTTP for local runs.
//
// Secure serving builds on the same pieces of k8s.io/apiserver that the options of
// k8s.io/apiserver/pkg/server/options put together (the delegating authenticator and
// authorizer, the dynamic serving certificate), and takes its flags with the same
// names, but not those options themselves: importing them, or the filters of
// k8s.io/apiserver/pkg/endpoints, installs component-base's work-queue metrics
// provider in an init function, before a controller can install its own.
package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
)

// Servers are the servers Serve started.
type Servers []*http.Server

// Endpoints are where and how the controller serves its endpoints, as its flags say.
type Endpoints struct {
	// MetricsBindAddress serves /metrics (and with Profiling, /debug/pprof/); "0"
	// serves neither.
	MetricsBindAddress string
	// MetricsSecure serves them over HTTPS, to callers that the API server
	// authenticates and authorizes, as Secure configures it.
	MetricsSecure bool
	Secure        *Options
	Profiling     bool
	// HealthProbeBindAddress serves /healthz and /readyz; "0" serves neither.
	HealthProbeBindAddress string
}

// Start listens on the metrics and probe addresses, so that a taken port fails the
// start, and serves in the background until ctx ends:
//
//   - /metrics: Prometheus metrics. With MetricsSecure, over HTTPS to callers that the
//     API server of cfg (or of the --authentication-kubeconfig and
//     --authorization-kubeconfig) authenticates and authorizes.
//   - /healthz: liveness, failing when healthz (if any) does: a leader that has not
//     renewed its Lease in time, so that the kubelet restarts it.
//   - /readyz: readiness, failing until synced says the caches have synced.
//   - /debug/pprof/: Go's profiles, on the metrics address, with Profiling only.
//
// The probes stay plain HTTP without authentication: the kubelet has no token to send.
func (e Endpoints) Start(ctx context.Context, cfg *rest.Config, synced func() bool, healthz func(*http.Request) error) (Servers, error) {
	var servers Servers
	if e.MetricsBindAddress != "0" {
		mux := MetricsHandler(e.Profiling)
		handler := http.Handler(mux)
		var tlsConfig *tls.Config
		if e.MetricsSecure {
			secure, err := e.Secure.New(ctx, e.MetricsBindAddress, cfg)
			if err != nil {
				return nil, fmt.Errorf("configuring secure serving of metrics: %w", err)
			}
			handler, tlsConfig = secure.Handler(mux), secure.TLSConfig
		}
		srv, err := Serve(ctx, "metrics", e.MetricsBindAddress, handler, tlsConfig, maxMetricsConnections)
		if err != nil {
			return nil, err
		}
		servers = append(servers, srv)
	}
	if e.HealthProbeBindAddress != "0" {
		srv, err := Serve(ctx, "health probes", e.HealthProbeBindAddress, ProbesHandler(synced, healthz), nil, 0)
		if err != nil {
			servers.Shutdown(klog.FromContext(ctx))
			return nil, err
		}
		servers = append(servers, srv)
	}
	return servers, nil
}

// ProbesHandler serves /healthz, which fails when healthz (if any) does, and /readyz,
// which fails until synced says the caches have synced.
func ProbesHandler(synced func() bool, healthz func(*http.Request) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if healthz != nil {
			if err := healthz(r); err != nil {
				http.Error(w, fmt.Sprintf("leader election: %v", err), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !synced() {
			http.Error(w, "informer caches have not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// MetricsHandler serves /metrics from metrics.Gatherer, and with profiling Go's
// profiles under /debug/pprof/.
func MetricsHandler(profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Gatherer, promhttp.HandlerOpts{}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// What a server holds for its callers at most: the bytes of a request line and headers
// (more are answered 431), and for metrics connections open at once (more wait to be
// accepted). A scraper's request, its bearer token included, takes under 2 KiB. The
// probes take any number of connections: a caller holding them all would have the
// kubelet restart the controller.
const (
	maxHeaderBytes        = 16 << 10
	maxMetricsConnections = 64
)

// Serve listens on addr, so that a taken port fails at once, and serves handler in the
// background: over HTTPS with tlsConfig, else over plain HTTP, to at most maxConns
// connections at once when it is above 0. name is for the logs.
func Serve(ctx context.Context, name, addr string, handler http.Handler, tlsConfig *tls.Config, maxConns int) (*http.Server, error) {
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for %s on %s: %w", name, addr, err)
	}
	// A caller can hold a connection, and what it sends before the handler runs, for
	// at most ReadHeaderTimeout: so many connections, so many bytes of header each.
	// Limited below TLS, so that the server still sees its connections as TLS ones.
	if maxConns > 0 {
		listener = netutil.LimitListener(listener, maxConns)
	}
	scheme := "http"
	if tlsConfig != nil {
		listener = tls.NewListener(listener, tlsConfig)
		scheme = "https"
	}
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: maxHeaderBytes}
	go func() {
		logger.Info("Serving "+name, "address", listener.Addr().String(), "scheme", scheme)
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server stopped", "server", name)
		}
	}()
	return srv, nil
}

// Shutdown stops the servers, giving open requests a few seconds.
func (s Servers) Shutdown(logger klog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s {
		if err := srv.Shutdown(ctx); err != nil {
			logger.Error(err, "Shutting down an HTTP server")
		}
	}
}
