package main

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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/pkg/metrics"
)

// httpServers are the metrics and probe endpoints.
type httpServers []*http.Server

// startServers listens on the metrics and probe addresses, so that a taken port fails
// the start, and serves in the background until shutdown.
//
//   - /metrics: Prometheus metrics. With --metrics-secure, over HTTPS to callers that
//     the API server of cfg (or of the --authentication-kubeconfig and
//     --authorization-kubeconfig) authenticates and authorizes.
//   - /healthz: liveness. Fails when this replica leads but has not renewed its Lease
//     in time, so that the kubelet restarts a stuck leader.
//   - /readyz: readiness. Fails until the informer caches have synced.
//   - /debug/pprof/: Go's profiles, on the metrics address, with --profiling only.
//
// The probes stay plain HTTP without authentication: the kubelet has no token to send.
func startServers(ctx context.Context, opts options, cfg *rest.Config, synced func() bool, watchdog *leaderelection.HealthzAdaptor) (httpServers, error) {
	var servers httpServers
	if opts.metricsBindAddress != "0" {
		handler := metricsHandler(opts.profiling)
		var tlsConfig *tls.Config
		if opts.metricsSecure {
			secure, err := opts.secureServing.New(ctx, opts.metricsBindAddress, cfg)
			if err != nil {
				return nil, fmt.Errorf("configuring secure serving of metrics: %w", err)
			}
			handler, tlsConfig = secure.Handler(handler), secure.TLSConfig
		}
		srv, err := serve(ctx, "metrics", opts.metricsBindAddress, handler, tlsConfig)
		if err != nil {
			return nil, err
		}
		servers = append(servers, srv)
	}
	if opts.healthProbeBindAddress != "0" {
		var healthz func(*http.Request) error
		if watchdog != nil {
			healthz = watchdog.Check
		}
		srv, err := serve(ctx, "health probes", opts.healthProbeBindAddress, probesHandler(synced, healthz), nil)
		if err != nil {
			servers.shutdown(klog.FromContext(ctx))
			return nil, err
		}
		servers = append(servers, srv)
	}
	return servers, nil
}

// probesHandler serves /healthz, which fails when healthz (if any) does, and /readyz,
// which fails until synced says the caches have synced.
func probesHandler(synced func() bool, healthz func(*http.Request) error) http.Handler {
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

// metricsHandler serves /metrics, and with profiling Go's profiles.
func metricsHandler(profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// serve serves handler on addr in the background: over HTTPS with tlsConfig, else over
// plain HTTP.
func serve(ctx context.Context, name, addr string, handler http.Handler, tlsConfig *tls.Config) (*http.Server, error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for %s on %s: %w", name, addr, err)
	}
	scheme := "http"
	if tlsConfig != nil {
		listener = tls.NewListener(listener, tlsConfig)
		scheme = "https"
	}
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		logger.Info("Serving "+name, "address", listener.Addr().String(), "scheme", scheme)
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server stopped", "server", name)
		}
	}()
	return srv, nil
}

// shutdown stops the servers, giving open requests a few seconds.
func (s httpServers) shutdown(logger klog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s {
		if err := srv.Shutdown(ctx); err != nil {
			logger.Error(err, "Shutting down an HTTP server")
		}
	}
}
