package outage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// server stands in for the API server and what is in front of it: its API requests
// (sent through RoundTrip) are refused while it is down, and its /readyz, served over
// HTTP with the client's configuration, answers 502 while down, as a proxy in front of
// it would, and readyz's code while up.
type server struct {
	mu     sync.Mutex
	up     bool
	readyz int
	// what it was sent while up, and how many probes it was sent while down.
	sent        []string
	probesWhile int
	http        *httptest.Server
}

func newServer(t *testing.T, up bool, readyz int) *server {
	s := &server{up: up, readyz: readyz}
	s.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case r.URL.Path != "/prefix/readyz":
			w.WriteHeader(http.StatusNotFound)
		case !s.up:
			s.probesWhile++
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(s.readyz)
		}
	}))
	t.Cleanup(s.http.Close)
	return s
}

func (s *server) set(up bool, readyz int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up, s.readyz = up, readyz
}

func (s *server) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	s.sent = append(s.sent, req.Method+" "+req.URL.Path)
	return respond(req, http.StatusOK), nil
}

func (s *server) sentWhileUp() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

func respond(req *http.Request, code int) *http.Response {
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Request: req}
}

// newWaiter returns a hold for s, with its ctx, and a channel told each change.
func newWaiter(t *testing.T, ctx context.Context, s *server) (*Waiter, chan bool) {
	t.Helper()
	changes := make(chan bool, 10)
	h, err := New(ctx, &rest.Config{Host: s.http.URL + "/prefix/"}, 10*time.Millisecond, func(down bool) { changes <- down })
	if err != nil {
		t.Fatal(err)
	}
	return h, changes
}

// get sends a GET through rt and returns the answer's status code.
func get(ctx context.Context, rt http.RoundTripper, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://apiserver.example/prefix"+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

func TestOutageWait(t *testing.T) {
	t.Run("holds every request from the first refused to the server's return, then sends each once", func(t *testing.T) {
		s := newServer(t, false, 0)
		h, changes := newWaiter(t, t.Context(), s)
		rt := h.Wrap(s)
		if _, err := get(t.Context(), rt, "/api/v1/pods"); err == nil {
			t.Fatal("the first request reached a server that was down")
		}
		if down := <-changes; !down || !h.Down() {
			t.Fatalf("the hold is not down after a refused request")
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for range 3 {
			wg.Go(func() {
				_, err := get(t.Context(), rt, "/api/v1/watch")
				errs <- err
			})
		}
		// The server starts, but is not ready: still held.
		time.Sleep(50 * time.Millisecond)
		s.set(true, http.StatusInternalServerError)
		time.Sleep(50 * time.Millisecond)
		if sent := s.sentWhileUp(); len(sent) != 0 {
			t.Fatalf("sent %v before the server was ready", sent)
		}
		s.set(true, http.StatusOK)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("a held request failed: %v", err)
			}
		}
		if down := <-changes; down || h.Down() {
			t.Errorf("the hold did not say the server was back")
		}
		if sent := s.sentWhileUp(); len(sent) != 3 {
			t.Errorf("sent %v, want the 3 held requests once each", sent)
		}
		if s.probesWhile < 2 {
			t.Errorf("%d probes while the server was down, want one every interval", s.probesWhile)
		}
	})

	t.Run("a held request fails when its context ends and is not sent", func(t *testing.T) {
		s := newServer(t, false, 0)
		h, changes := newWaiter(t, t.Context(), s)
		rt := h.Wrap(s)
		if _, err := get(t.Context(), rt, "/api/v1/pods"); err == nil {
			t.Fatal("the first request reached a server that was down")
		}
		<-changes
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://apiserver.example/prefix/api/v1/pods", strings.NewReader("{}"))
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, ErrDown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrDown and the context's deadline", err)
		}
		s.set(true, http.StatusOK)
		if down := <-changes; down {
			t.Fatal("not back")
		}
		if sent := s.sentWhileUp(); len(sent) != 0 {
			t.Errorf("sent %v after its context ended", sent)
		}
	})

	t.Run("a request its caller cancelled says nothing about the server", func(t *testing.T) {
		s := newServer(t, false, 0)
		h, _ := newWaiter(t, t.Context(), s)
		rt := h.Wrap(s)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		// The stand-in refuses whatever the context; a real transport fails a
		// cancelled request with its context's error.
		if _, err := get(ctx, rt, "/api/v1/pods"); err == nil {
			t.Fatal("a cancelled request to a server that is down succeeded")
		}
		if h.Down() {
			t.Error("a cancelled request marked the server down")
		}
	})

	t.Run("a write the tenure gate held back says nothing about the server", func(t *testing.T) {
		// /readyz fails: a hold wrongly put on would stay on.
		s := newServer(t, true, http.StatusOK)
		h, changes := newWaiter(t, t.Context(), s)
		s.set(true, http.StatusBadGateway)
		ended := tenure.New(clock.RealClock{})
		// The gate behind the hold holds back a write whose tenure is over.
		rt := h.Wrap((&tenure.Gate{Required: true}).Wrap(s))
		req, err := http.NewRequestWithContext(tenure.NewContext(t.Context(), ended), http.MethodPost, "http://apiserver.example/prefix/api/v1/namespaces/ns/configmaps", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, tenure.ErrHeldBack) {
			t.Fatalf("err = %v, want the write held back", err)
		}
		if h.Down() || len(changes) != 0 {
			t.Error("a write held back by its tenure marked the server down")
		}
	})

	t.Run("a write cut off at its tenure's end marks it down only if /readyz does not answer", func(t *testing.T) {
		cutOff := roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, fmt.Errorf("%w: %w", tenure.ErrCutOff, context.DeadlineExceeded)
		})
		for _, tc := range []struct {
			readyz int
			down   bool
		}{{http.StatusOK, false}, {http.StatusBadGateway, true}} {
			s := newServer(t, true, tc.readyz)
			h, changes := newWaiter(t, t.Context(), s)
			if _, err := get(t.Context(), h.Wrap(cutOff), "/api/v1/pods"); !errors.Is(err, tenure.ErrCutOff) {
				t.Fatalf("err = %v, want the write cut off", err)
			}
			// The probe runs in the background; it is done when suspecting is clear.
			deadline := time.Now().Add(5 * time.Second)
			for h.suspecting.Load() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := len(changes) > 0 && <-changes; got != tc.down {
				t.Errorf("/readyz answering %d: marked down %v, want %v", tc.readyz, got, tc.down)
			}
		}
	})

	t.Run("a 502 from a proxy marks it down; a probe answered 401 by a running server ends it", func(t *testing.T) {
		s := newServer(t, true, http.StatusUnauthorized)
		h, changes := newWaiter(t, t.Context(), s)
		gateway := roundTripFunc(func(req *http.Request) (*http.Response, error) { return respond(req, http.StatusBadGateway), nil })
		code, err := get(t.Context(), h.Wrap(gateway), "/api/v1/pods")
		if err != nil || code != http.StatusBadGateway {
			t.Fatalf("got %d, %v; want the proxy's 502 passed on", code, err)
		}
		if !<-changes || <-changes {
			t.Error("want down, then back")
		}
	})

	t.Run("answers and 5xx from the server itself leave it up", func(t *testing.T) {
		for _, code := range []int{http.StatusOK, http.StatusNotFound, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
			h, _ := newWaiter(t, t.Context(), newServer(t, true, http.StatusOK))
			answer := roundTripFunc(func(req *http.Request) (*http.Response, error) { return respond(req, code), nil })
			if got, err := get(t.Context(), h.Wrap(answer), "/api/v1/pods"); err != nil || got != code {
				t.Errorf("got %d, %v; want the server's %d passed on", got, err, code)
			}
			if h.Down() {
				t.Errorf("%d marked the server down", code)
			}
		}
	})

	t.Run("ending its context lets held requests go", func(t *testing.T) {
		s := newServer(t, false, 0)
		ctx, cancel := context.WithCancel(t.Context())
		h, _ := newWaiter(t, ctx, s)
		rt := h.Wrap(s)
		if _, err := get(t.Context(), rt, "/api/v1/pods"); err == nil {
			t.Fatal("the first request reached a server that was down")
		}
		done := make(chan error)
		go func() {
			_, err := get(t.Context(), rt, "/api/v1/pods")
			done <- err
		}()
		cancel()
		if err := <-done; err == nil {
			t.Error("the server is still down, yet the request succeeded")
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
