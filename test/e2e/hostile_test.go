//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestHostileCallers runs a leader-elected controller with secure metrics, as shipped,
// while callers with a token but no rights do what they like: 1 MiB paths, ever new
// paths, random tokens at 200 a second, and Foos with 200 KiB annotations. The
// controller stays within a bound of memory, makes no more reviews than its limits
// allow, and keeps its Lease. The storms are as large as the suite's shared cluster
// takes beside the other tests (hostileScale).
func TestHostileCallers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.NewNamespace(t)
	lease := "hostile-" + ns
	p := env.StartControllerWith(t, localcluster.ControllerOptions{SecureMetrics: true, Args: []string{
		"--namespace=" + ns, "--profiling", "--leader-elect", "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=1s",
	}})
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The test's own clients, without a client-side limit: what it creates and polls
	// takes nothing from the limit the suite's other tests share.
	cfg := env.Cluster.RESTConfig()
	cfg.QPS = -1
	sample, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bystander := env.NewServiceAccount(t, ns, "bystander-")
	token, err := env.ServiceAccountToken(ctx, ns, bystander)
	if err != nil {
		t.Fatal(err)
	}
	held := watchLease(t, kube, framework.DeployNamespace, lease)
	if err := p.ResetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	before, err := p.RSSBytes()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// 300 distinct 1 MiB paths, 20 at a time: refused while the request line is read
	// (the server lingers half a second on each before it closes).
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Go(func() {
			for i := w; i < 300; i += 20 {
				path := fmt.Sprintf("/metrics/%04d", i) + strings.Repeat("x", 1<<20)
				code, _, err := p.GetMetricsServer(ctx, token, path)
				if err != nil {
					code = -1 // the connection closed on the client's write
				}
				mu.Lock()
				counts[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if counts[http.StatusRequestHeaderFieldsTooLarge]+counts[-1] != 300 {
		t.Errorf("300 paths of 1 MiB: answered %v (-1: connection closed), want each 431 or closed", counts)
	}
	t.Logf("1 MiB paths done after %v", time.Since(start).Round(time.Millisecond))

	// 300 distinct paths that are served (profiles' names), for a caller with no rights:
	// its access reviews are limited, then answered 429.
	counts = map[int]int{}
	for i := range 300 {
		code, _, err := p.GetMetricsServer(ctx, token, fmt.Sprintf("/debug/pprof/%s-%04d", strings.Repeat("p", 200), i))
		if err != nil {
			t.Fatal(err)
		}
		counts[code]++
	}
	if counts[http.StatusForbidden]+counts[http.StatusTooManyRequests] != 300 || counts[http.StatusForbidden] > 20 {
		t.Errorf("300 new paths from one caller: answered %v, want at most 20 reviewed (403) and the rest 429", counts)
	}

	t.Logf("new paths done after %v", time.Since(start).Round(time.Millisecond))

	storm, annotated := hostileScale()
	// Random tokens at 200 a second, from 20 callers at once.
	counts = map[int]int{}
	began := time.Now()
	for range 20 {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for time.Since(began) < storm {
				<-tick.C
				random := make([]byte, 32)
				_, _ = rand.Read(random)
				code, _, err := p.GetMetricsServer(ctx, hex.EncodeToString(random), "/metrics")
				mu.Lock()
				if err != nil {
					code = -1
				}
				counts[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("random tokens for %v: answered %v", storm, counts)
	randomCounts := maps.Clone(counts)
	// All from one host: its burst and one a second.
	if reviewed, limit := counts[http.StatusUnauthorized], 5+int(time.Since(began).Seconds())+1; reviewed > limit || counts[-1] > 0 {
		t.Errorf("random tokens: %d reviewed (401), want at most %d; %d failed", reviewed, limit, counts[-1])
	}

	// Foos with 200 KiB of annotations each, 5 created at a time.
	blob := strings.Repeat("a", 200<<10)
	errs := make(chan error, annotated)
	for w := range 5 {
		wg.Go(func() {
			for i := w; i < annotated; i += 5 {
				foo := &samplev1alpha1.Foo{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("annotated-%03d", i), Annotations: map[string]string{"example.com/blob": blob}},
					// No Pods: the cluster's simulated nodes hold a few hundred, and the
					// Foos' memory is the point.
					Spec: samplev1alpha1.FooSpec{DeploymentName: fmt.Sprintf("annotated-%03d", i), Replicas: ptr.To[int32](0)},
				}
				_, err := sample.SamplecontrollerV1alpha1().Foos(ns).Create(ctx, foo, metav1.CreateOptions{})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("annotated Foos created after %v", time.Since(start).Round(time.Millisecond))
	// Each Foo's Deployment gets its status from the controller manager, on the same two
	// cores: a tenth of a second each on top of the suite's timeout.
	for _, name := range []string{"annotated-000", fmt.Sprintf("annotated-%03d", annotated-1)} {
		framework.WaitFooReadyWith(t, sample, timeout+time.Duration(annotated)*100*time.Millisecond, ns, name, 0)
	}
	t.Logf("annotated Foos ready after %v", time.Since(start).Round(time.Millisecond))

	peak, err := p.PeakRSSBytes()
	if err != nil {
		t.Fatal(err)
	}
	after, err := p.RSSBytes()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("e2e: hostile callers (random tokens for %v, %d Foos of 200 KiB): RSS %d MiB before, %d MiB at its peak, %d MiB after; random tokens %v\n",
		storm, annotated, before>>20, peak>>20, after>>20, randomCounts)
	if bound := int64(hostileRSSBound); peak > bound {
		t.Errorf("the controller's RSS peaked at %d MiB, over the bound of %d MiB", peak>>20, bound>>20)
	}
	held.check(t)
}

// hostileScale is how long TestHostileCallers sends random tokens and how many Foos
// with 200 KiB of annotations it creates: a minute and 2000 (about 400 MB through the API
// server) with E2E_HOSTILE=full, as make test runs it, alone after the other suites
// (hack/test.sh); 10 s and 100 otherwise, beside the suite's other tests.
func hostileScale() (time.Duration, int) {
	if os.Getenv("E2E_HOSTILE") == "full" {
		return time.Minute, 2000
	}
	return 10 * time.Second, 100
}

// hostileRSSBound is what TestHostileCallers allows the controller at its peak.
const hostileRSSBound = 120 << 20

// leaseWatch samples a Lease until the test ends.
type leaseWatch struct {
	mu sync.Mutex
	// holders and transitions are those seen; longest is the longest time between two
	// renewals seen.
	holders     map[string]bool
	transitions map[int32]bool
	longest     time.Duration
	last        time.Time
	err         error
	stop        func()
}

// watchLease samples the Lease every 250 ms, through kube, until check is called.
func watchLease(t *testing.T, kube kubernetes.Interface, ns, name string) *leaseWatch {
	t.Helper()
	w := &leaseWatch{holders: map[string]bool{}, transitions: map[int32]bool{}}
	framework.Eventually(t, timeout, "the Lease "+name+" to be held", func(ctx context.Context) (bool, string) {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder"
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l, err := kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			w.mu.Lock()
			switch {
			case ctx.Err() != nil:
			case err != nil:
				w.err = err
			default:
				if h := l.Spec.HolderIdentity; h != nil {
					w.holders[*h] = true
				}
				if n := l.Spec.LeaseTransitions; n != nil {
					w.transitions[*n] = true
				}
				if r := l.Spec.RenewTime; r != nil {
					if !w.last.IsZero() && r.After(w.last) {
						w.longest = max(w.longest, r.Sub(w.last))
					}
					if r.After(w.last) {
						w.last = r.Time
					}
				}
			}
			w.mu.Unlock()
		}
	}()
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(w.stop)
	return w
}

// check stops the sampling and fails t unless the Lease stayed with one holder, never
// changed hands, and was renewed within the renew deadline (10 s) each time.
func (w *leaseWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("the Lease: holders %v, transitions %v, longest between renewals %v", w.holders, w.transitions, w.longest)
	if w.err != nil {
		t.Errorf("reading the Lease: %v", w.err)
	}
	if len(w.holders) != 1 || len(w.transitions) > 1 {
		t.Errorf("the Lease changed hands: holders %v, transitions %v", w.holders, w.transitions)
	}
	if w.longest >= 10*time.Second {
		t.Errorf("the Lease went %v without a renewal, past the renew deadline of 10 s", w.longest)
	}
}
