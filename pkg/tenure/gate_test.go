package tenure

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// apiServer answers every request with a Deployment and remembers what it received.
type apiServer struct {
	*httptest.Server
	delay time.Duration

	mu       sync.Mutex
	received []*http.Request
}

func newAPIServer(t *testing.T) *apiServer {
	s := &apiServer{}
	stop := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.received = append(s.received, r)
		delay := s.delay
		s.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		case <-stop:
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d","namespace":"ns"}}`))
	}))
	t.Cleanup(s.Close)
	// Before Close, which waits for the handlers.
	t.Cleanup(func() { close(stop) })
	return s
}

func (s *apiServer) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.received...)
}

// gatedClient is a clientset for server behind gate, and the reasons gate held writes
// back for.
func gatedClient(t *testing.T, server *apiServer, gate *Gate) (kubernetes.Interface, *[]string) {
	t.Helper()
	var reasons []string
	gate.HeldBack = func(reason string) { reasons = append(reasons, reason) }
	cfg := &rest.Config{Host: server.URL}
	cfg.Wrap(gate.Wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, &reasons
}

func validTenure(d time.Duration) *Tenure {
	t := New(clock.RealClock{})
	t.Extend(time.Now(), d)
	return t
}

func TestGate(t *testing.T) {
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}

	t.Run("reads pass without a tenure", func(t *testing.T) {
		server := newAPIServer(t)
		client, reasons := gatedClient(t, server, &Gate{Required: true})
		if _, err := client.AppsV1().Deployments("ns").Get(t.Context(), "d", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(server.requests()) != 1 || len(*reasons) != 0 {
			t.Errorf("%d requests received, %d held back; want 1, 0", len(server.requests()), len(*reasons))
		}
	})

	t.Run("writes pass without a tenure where none is required", func(t *testing.T) {
		server := newAPIServer(t)
		client, _ := gatedClient(t, server, &Gate{})
		if _, err := client.AppsV1().Deployments("ns").Create(t.Context(), deployment, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := server.requests(); len(got) != 1 || got[0].URL.Query().Has("timeout") {
			t.Errorf("received %d requests, want one without a timeout", len(got))
		}
	})

	for _, tc := range []struct {
		name   string
		ctx    func(context.Context) context.Context
		reason string
	}{
		{"a write without a tenure where one is required", func(ctx context.Context) context.Context { return ctx }, ReasonNone},
		{"a write whose tenure never began", func(ctx context.Context) context.Context { return NewContext(ctx, New(clock.RealClock{})) }, ReasonExpired},
		{"a write whose tenure ended", func(ctx context.Context) context.Context {
			tenure := validTenure(15 * time.Second)
			tenure.End()
			return NewContext(ctx, tenure)
		}, ReasonExpired},
	} {
		t.Run(tc.name+" is held back, every verb", func(t *testing.T) {
			server := newAPIServer(t)
			client, reasons := gatedClient(t, server, &Gate{Required: true})
			ctx := tc.ctx(t.Context())
			deployments := client.AppsV1().Deployments("ns")
			errs := map[string]error{}
			_, errs["create"] = deployments.Create(ctx, deployment, metav1.CreateOptions{})
			_, errs["update"] = deployments.Update(ctx, deployment, metav1.UpdateOptions{})
			_, errs["update status"] = deployments.UpdateStatus(ctx, deployment, metav1.UpdateOptions{})
			_, errs["patch"] = deployments.Patch(ctx, "d", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
			errs["delete"] = deployments.Delete(ctx, "d", metav1.DeleteOptions{})
			for verb, err := range errs {
				if !errors.Is(err, ErrNotHeld) {
					t.Errorf("%s: err = %v, want ErrNotHeld", verb, err)
				}
			}
			if got := server.requests(); len(got) != 0 {
				t.Errorf("the server received %d writes, want none", len(got))
			}
			if len(*reasons) != len(errs) || (*reasons)[0] != tc.reason {
				t.Errorf("held back for %v, want %d times %q", *reasons, len(errs), tc.reason)
			}
		})
	}

	t.Run("a write in a valid tenure is sent with the tenure's end as its timeout", func(t *testing.T) {
		server := newAPIServer(t)
		client, reasons := gatedClient(t, server, &Gate{Required: true})
		tenure := validTenure(15 * time.Second)
		left, _ := tenure.Left()
		if _, err := client.AppsV1().Deployments("ns").Create(NewContext(t.Context(), tenure), deployment, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := server.requests()
		if len(got) != 1 || len(*reasons) != 0 {
			t.Fatalf("%d requests received, %d held back; want 1, 0", len(got), len(*reasons))
		}
		timeout, err := time.ParseDuration(got[0].URL.Query().Get("timeout"))
		if err != nil || timeout <= 0 || timeout > left {
			t.Errorf("timeout parameter %q, want a duration up to %v", got[0].URL.Query().Get("timeout"), left)
		}
	})

	t.Run("a write still in flight when the tenure ends is cut off", func(t *testing.T) {
		server := newAPIServer(t)
		server.delay = 5 * time.Second
		client, _ := gatedClient(t, server, &Gate{Required: true})
		// A 4 s Lease leaves 3.56 s; the tenure began 3.3 s ago.
		tenure := New(clock.RealClock{})
		tenure.Extend(time.Now().Add(-3300*time.Millisecond), 4*time.Second)
		start := time.Now()
		_, err := client.AppsV1().Deployments("ns").Create(NewContext(t.Context(), tenure), deployment, metav1.CreateOptions{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the deadline exceeded", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("the write took %v, past its tenure", took)
		}
	})
}

// stallBefore is a transport that runs stall, then sends the request on: a process
// frozen after the gate let a write through and before its transport sent it.
type stallBefore struct {
	stall func()
	next  http.RoundTripper
}

func (s stallBefore) RoundTrip(req *http.Request) (*http.Response, error) {
	s.stall()
	return s.next.RoundTrip(req)
}

// TestGateStalledWrite freezes the process between the gate's check and the write's
// departure, by a fake clock that the stall moves past the tenure's end while the
// real one, which the write's deadline runs on, barely moves: as after a SIGSTOP, when
// the transport runs again before the deadline's timer has fired. The write must not
// reach the server whole, over HTTP/1.1 and over HTTP/2, whose transport sends the
// headers before it reads the body.
func TestGateStalledWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto int
	}{
		{"HTTP/1.1", 1},
		{"HTTP/2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var whole, cut []int // by protocol
			server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				mu.Lock()
				if err != nil {
					cut = append(cut, r.ProtoMajor)
				} else {
					whole = append(whole, r.ProtoMajor)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d","namespace":"ns"}}`))
			}))
			server.EnableHTTP2 = tc.proto == 2
			server.StartTLS()
			t.Cleanup(server.Close)

			clk := testingclock.NewFakePassiveClock(time.Now())
			tenure := New(clk)
			tenure.Extend(clk.Now(), 4*time.Second)
			stall := func() {}
			var reasons []string
			gate := &Gate{Required: true, HeldBack: func(reason string) { reasons = append(reasons, reason) }}
			cfg := &rest.Config{
				Host:            server.URL,
				TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})},
			}
			cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
				return stallBefore{stall: func() { stall() }, next: next}
			})
			cfg.Wrap(gate.Wrap)
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			deployments := client.AppsV1().Deployments("ns")
			ctx := NewContext(t.Context(), tenure)
			deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}

			// One write without a stall, on the protocol under test.
			if _, err := deployments.Create(ctx, deployment, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if len(whole) != 1 || whole[0] != tc.proto {
				t.Fatalf("the server received %v whole, want one write over HTTP/%d", whole, tc.proto)
			}
			mu.Unlock()

			// Each write is let through by a tenure renewed just before it.
			stall = func() { clk.SetTime(clk.Now().Add(5 * time.Second)) }
			renewed := func() context.Context {
				tenure.Extend(clk.Now(), 4*time.Second)
				return ctx
			}
			errs := map[string]error{}
			_, errs["create"] = deployments.Create(renewed(), deployment, metav1.CreateOptions{})
			_, errs["update"] = deployments.Update(renewed(), deployment, metav1.UpdateOptions{})
			_, errs["patch"] = deployments.Patch(renewed(), "d", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
			errs["delete"] = deployments.Delete(renewed(), "d", metav1.DeleteOptions{})
			for verb, err := range errs {
				if !errors.Is(err, ErrNotHeld) {
					t.Errorf("%s: err = %v, want ErrNotHeld", verb, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(whole) != 1 {
				t.Errorf("the server received %d more writes whole, want none", len(whole)-1)
			}
			t.Logf("writes whose headers came without their body: %d", len(cut))
			if len(reasons) != len(errs) || slices.ContainsFunc(reasons, func(r string) bool { return r != ReasonStalled }) {
				t.Errorf("held back for %v, want %d times %q", reasons, len(errs), ReasonStalled)
			}
		})
	}
}
