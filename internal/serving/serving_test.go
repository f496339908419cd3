package serving

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
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

// A server holds at most maxHeaderBytes of a request's line and headers, and the
// metrics server at most its connections.
func TestServeBoundsWhatCallersHold(t *testing.T) {
	addr := freeAddress(t)
	const conns = 2
	srv, err := Serve(t.Context(), "test", addr, MetricsHandler(false), nil, conns)
	if err != nil {
		t.Fatal(err)
	}
	defer Servers{srv}.Shutdown(klog.Background())
	get := func(header string) (int, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Filler", header)
		client := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get("small"); err != nil || code != http.StatusOK {
		t.Fatalf("a plain request: status %d, %v; want 200", code, err)
	}
	if code, err := get(strings.Repeat("x", 2*maxHeaderBytes)); err != nil || code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with %d bytes of headers: status %d, %v; want 431", 2*maxHeaderBytes, code, err)
	}

	var held []net.Conn
	for range conns {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if code, err := get("small"); err == nil {
		t.Errorf("with %d connections held open: status %d, want the request kept waiting", conns, code)
	}
	for _, c := range held {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var code int
	for range 20 { // the server sees the connections close a moment later
		if code, err = get("small"); err == nil {
			break
		}
	}
	if code != http.StatusOK {
		t.Errorf("once the held connections closed: status %d, %v; want 200", code, err)
	}
}
