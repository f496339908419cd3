package tenure

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
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
