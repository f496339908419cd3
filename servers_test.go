package main

import (
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
			metricsHandler(tt.profiling).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("GET %s: status %d, want %d", tt.path, rec.Code, tt.want)
			}
		})
	}
}
