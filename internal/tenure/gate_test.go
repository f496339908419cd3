package tenure

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
				if !errors.Is(err, ErrHeldBack) {
					t.Errorf("%s: err = %v, want ErrHeldBack", verb, err)
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

	t.Run("a write that fails otherwise in a valid tenure is neither held back nor cut off", func(t *testing.T) {
		server := newAPIServer(t)
		client, reasons := gatedClient(t, server, &Gate{Required: true})
		server.Close() // refused
		_, err := client.AppsV1().Deployments("ns").Create(NewContext(t.Context(), validTenure(15*time.Second)), deployment, metav1.CreateOptions{})
		if err == nil || errors.Is(err, ErrHeldBack) || errors.Is(err, ErrCutOff) {
			t.Errorf("err = %v, want the transport's own error", err)
		}
		if len(*reasons) != 0 {
			t.Errorf("held back for %v, want nothing held back", *reasons)
		}
	})

	t.Run("a write whose caller's deadline comes first is not reported cut off", func(t *testing.T) {
		server := newAPIServer(t)
		server.delay = 5 * time.Second
		client, _ := gatedClient(t, server, &Gate{Required: true})
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := client.AppsV1().Deployments("ns").Create(NewContext(ctx, validTenure(15*time.Second)), deployment, metav1.CreateOptions{})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrCutOff) {
			t.Errorf("err = %v, want the caller's deadline exceeded, not cut off", err)
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
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrCutOff) {
			t.Errorf("err = %v, want the deadline exceeded, reported as cut off", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("the write took %v, past its tenure", took)
		}
	})
}

// stallAt is a transport that runs stall before it sends the request on, or, with
// afterRead, once the transport has read the request's body the first time: a process
// frozen after the gate let a write through, before its transport sent it or between
// two reads of its body.
type stallAt struct {
	stall     func()
	afterRead bool
	next      http.RoundTripper
}

func (s stallAt) RoundTrip(req *http.Request) (*http.Response, error) {
	if !s.afterRead {
		s.stall()
	} else if req.Body != nil {
		req.Body = &stallAfterRead{ReadCloser: req.Body, stall: s.stall}
	}
	return s.next.RoundTrip(req)
}

type stallAfterRead struct {
	io.ReadCloser
	stall   func()
	stalled bool
}

func (b *stallAfterRead) Read(data []byte) (int, error) {
	n, err := b.ReadCloser.Read(data)
	if !b.stalled {
		b.stalled = true
		b.stall()
	}
	return n, err
}

// TestGateStalledWrite freezes the process after the gate's check let a write through,
// by a fake clock that the stall moves past the tenure's end while the real one, which
// the write's deadline runs on, barely moves: as after a SIGSTOP, when the transport
// runs again before the deadline's timer has fired. Over HTTP/1.1 and HTTP/2 (whose
// transport sends the headers before it reads the body):
//   - frozen before the transport sent anything, or between two reads of a large body,
//     the write must not reach the server whole, and the caller learns it was held back;
//   - frozen after the last read of the body, the write has gone: the server has it
//     whole, and the caller must get the server's answer, not a report that it was held
//     back.
func TestGateStalledWrite(t *testing.T) {
	small := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}
	large := small.DeepCopy()
	// Larger than one read of either transport (HTTP/2 reads up to 512 KiB at once).
	bulk := strings.Repeat("x", 2<<20)
	large.Annotations = map[string]string{"bulk": bulk}
	for _, proto := range []int{1, 2} {
		for _, tc := range []struct {
			name       string
			afterRead  bool
			deployment *appsv1.Deployment
			held       bool
			// retaken: while frozen, the tenure ended and a new one began (the
			// Lease lost and taken again), which the stalled write is not part of.
			retaken bool
		}{
			{"before the transport sends it", false, small, true, false},
			{"between two reads of its body", true, large, true, false},
			{"after the last read of its body", true, small, false, false},
			{"before the transport sends it, its tenure over and another begun", false, small, true, true},
		} {
			t.Run(fmt.Sprintf("HTTP/%d, %s", proto, tc.name), func(t *testing.T) {
				var mu sync.Mutex
				var whole []int // the protocol of each write received whole
				server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, err := io.ReadAll(r.Body); err != nil {
						return
					}
					mu.Lock()
					whole = append(whole, r.ProtoMajor)
					mu.Unlock()
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d","namespace":"ns"}}`))
				}))
				server.EnableHTTP2 = proto == 2
				server.StartTLS()
				t.Cleanup(server.Close)

				clk := testingclock.NewFakePassiveClock(time.Now())
				tenure := New(clk)
				stall := func() {}
				var reasons []string
				gate := &Gate{Required: true, HeldBack: func(reason string) { reasons = append(reasons, reason) }}
				cfg := &rest.Config{
					Host:            server.URL,
					TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})},
				}
				cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
					return stallAt{stall: func() { stall() }, afterRead: tc.afterRead, next: next}
				})
				cfg.Wrap(gate.Wrap)
				client, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					t.Fatal(err)
				}
				deployments := client.AppsV1().Deployments("ns")
				// Each write is let through by a tenure renewed just before it.
				renewed := func() context.Context {
					tenure.Extend(clk.Now(), 4*time.Second)
					return NewContext(t.Context(), tenure)
				}

				// One write without a stall, on the protocol under test.
				if _, err := deployments.Create(renewed(), tc.deployment, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				stall = func() {
					clk.SetTime(clk.Now().Add(5 * time.Second))
					if tc.retaken {
						tenure.End()
						tenure.Extend(clk.Now(), 4*time.Second)
					}
				}
				errs := map[string]error{}
				_, errs["create"] = deployments.Create(renewed(), tc.deployment, metav1.CreateOptions{})
				_, errs["update"] = deployments.Update(renewed(), tc.deployment, metav1.UpdateOptions{})
				patch := []byte(`{}`)
				if tc.deployment == large {
					patch = []byte(`{"metadata":{"annotations":{"bulk":"` + bulk + `"}}}`)
				} else {
					// Its options are too small for two reads.
					errs["delete"] = deployments.Delete(renewed(), "d", metav1.DeleteOptions{})
				}
				_, errs["patch"] = deployments.Patch(renewed(), "d", "application/merge-patch+json", patch, metav1.PatchOptions{})
				// Close waits for the handlers: a write the server got whole is counted.
				server.Close()
				mu.Lock()
				defer mu.Unlock()
				if len(whole) == 0 || whole[0] != proto {
					t.Fatalf("the server received %v whole, want the first write over HTTP/%d", whole, proto)
				}
				if tc.held {
					for verb, err := range errs {
						if !errors.Is(err, ErrHeldBack) {
							t.Errorf("%s: err = %v, want ErrHeldBack", verb, err)
						}
					}
					if len(whole) != 1 {
						t.Errorf("the server received %d stalled writes whole, want none", len(whole)-1)
					}
					if len(reasons) != len(errs) || slices.ContainsFunc(reasons, func(r string) bool { return r != ReasonStalled }) {
						t.Errorf("held back for %v, want %d times %q", reasons, len(errs), ReasonStalled)
					}
					return
				}
				for verb, err := range errs {
					if err != nil {
						t.Errorf("%s: err = %v, want the server's answer", verb, err)
					}
				}
				if len(whole) != 1+len(errs) || len(reasons) != 0 {
					t.Errorf("the server received %d stalled writes whole and %v were held back, want %d and none", len(whole)-1, reasons, len(errs))
				}
			})
		}
	}
}

// TestGateEndsAFencedTenure checks that the fencing policy's refusal ends the write's
// tenure, and reaches the caller whole; another refusal leaves the tenure as it was.
func TestGateEndsAFencedTenure(t *testing.T) {
	for _, tc := range []struct {
		name, message string
		ends          bool
	}{
		{"the fencing policy's refusal: another holds the Lease", "ValidatingAdmissionPolicy 'sample-controller-fencing' with binding 'sample-controller-fencing' denied request: " + FencedMessage + "Pod a_1 does not hold the Lease ns/l" + HeldByAnother + "b_2", true},
		// Another client emptied it: the holder takes it back at its next renewal.
		{"the fencing policy's refusal: the Lease has no holder", "ValidatingAdmissionPolicy 'sample-controller-fencing' with binding 'sample-controller-fencing' denied request: " + FencedMessage + "Pod a_1 does not hold the Lease ns/l, which has no holder", false},
		// The policy cannot match this process: no tenure would change that.
		{"the fencing policy's refusal: this process holds the Lease", "ValidatingAdmissionPolicy 'sample-controller-fencing' with binding 'sample-controller-fencing' denied request: " + FencedMessage + "its token is bound to no Pod does not hold the Lease ns/l" + HeldByAnother + "host_1", false},
		{"another policy's refusal", "ValidatingAdmissionPolicy 'replicas' with binding 'replicas' denied request: too many replicas", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_ = json.NewEncoder(w).Encode(&metav1.Status{
					TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
					Status:   metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
					Message: "deployments.apps \"d\" is forbidden: " + tc.message,
				})
			}))
			t.Cleanup(server.Close)
			client, _ := gatedClient(t, &apiServer{Server: server}, &Gate{Required: true, Identity: "host_1"})
			tenure := validTenure(15 * time.Second)
			_, err := client.AppsV1().Deployments("ns").Create(NewContext(t.Context(), tenure), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Create() = %v, want the refusal whole", err)
			}
			if tenure.Valid() == tc.ends {
				t.Errorf("after the refusal the tenure is valid: %v, want %v", tenure.Valid(), !tc.ends)
			}
		})
	}
}
