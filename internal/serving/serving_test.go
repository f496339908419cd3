package serving

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestMetricsHandler(t *testing.T) {
	tests := []struct {
		name      string
		profiling bool
		path      string
		want      int
	}{
		{"metrics", false, "/metrics", http.StatusOK},
		{"no profiles by default", false, "/debug/pprof/", http.StatusNotFound},
		{"no heap profile by default", false, "/debug/pprof/heap", http.StatusNotFound},
		{"profiles with --profiling", true, "/debug/pprof/", http.StatusOK},
		{"heap profile with --profiling", true, "/debug/pprof/heap", http.StatusOK},
		{"metrics with --profiling", true, "/metrics", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			MetricsHandler(tt.profiling).ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("GET %s: status %d, want %d", tt.path, rec.Code, tt.want)
			}
		})
	}
}

func TestProbesHandler(t *testing.T) {
	unhealthy := func(*http.Request) error { return errors.New("failed to renew the lease in time") }
	tests := []struct {
		name    string
		synced  bool
		healthz func(*http.Request) error
		path    string
		want    int
	}{
		{"healthy without leader election", false, nil, "/healthz", http.StatusOK},
		{"healthy leader", false, func(*http.Request) error { return nil }, "/healthz", http.StatusOK},
		{"leader that cannot renew its lease", true, unhealthy, "/healthz", http.StatusInternalServerError},
		{"not ready before the caches sync", false, nil, "/readyz", http.StatusServiceUnavailable},
		{"ready once the caches synced", true, nil, "/readyz", http.StatusOK},
		{"readiness does not depend on the lease", true, unhealthy, "/readyz", http.StatusOK},
		{"nothing else", true, nil, "/metrics", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handler := ProbesHandler(func() bool { return tt.synced }, tt.healthz)
			handler.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("GET %s: status %d, want %d (body %q)", tt.path, rec.Code, tt.want, rec.Body.String())
			}
		})
	}
}
