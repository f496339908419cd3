package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/outage"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

func TestRestConfigRateLimits(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", Namespace: "team-a"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))

	for _, c := range []struct {
		name      string
		qps       float64
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{"no client-side limit by default", 0, 0, -1, 0},
		{"burst twice the QPS", 50, 0, 50, 100},
		{"burst as given", 50, 7, 50, 7},
		{"a QPS below 0.5 still has a burst", 0.3, 0, 0.3, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, namespace, err := clientOptions{kubeconfig: kubeconfig, kubeAPIQPS: c.qps, kubeAPIBurst: c.burst}.restConfig()
			if err != nil {
				t.Fatal(err)
			}
			if got.QPS != c.wantQPS || (c.wantQPS > 0 && got.Burst != c.wantBurst) {
				t.Errorf("QPS %v, burst %v; want %v, %v", got.QPS, got.Burst, c.wantQPS, c.wantBurst)
			}
			if namespace != "team-a" {
				t.Errorf("namespace %q, want the context's, team-a", namespace)
			}
		})
	}
}

// parseOptions parses args as the command line does.
func parseOptions(t *testing.T, args []string) options {
	t.Helper()
	var opts options
	fs := flag.NewFlagSet("sample-controller", flag.ContinueOnError)
	opts.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return opts
}

func TestMetricsFlags(t *testing.T) {
	for _, c := range []struct {
		name        string
		args        []string
		wantSecure  bool
		wantAddress string
		wantAuthn   string
	}{
		{"secure on :8443 by default", nil, true, ":8443", ""},
		{"plain HTTP for local runs, single-dash as any other flag", []string{"-metrics-secure=false", "-metrics-bind-address=:8080"}, false, ":8080", ""},
		{"secure serving's flags on the same command line", []string{"-kubeconfig=/k", "--authentication-kubeconfig=/a"}, true, ":8443", "/a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := parseOptions(t, c.args)
			s := opts.serving
			if s.MetricsSecure != c.wantSecure || s.MetricsBindAddress != c.wantAddress || s.Secure.AuthenticationKubeconfig != c.wantAuthn {
				t.Errorf("--metrics-secure=%v on %q, --authentication-kubeconfig=%q; want %v on %q, %q",
					s.MetricsSecure, s.MetricsBindAddress, s.Secure.AuthenticationKubeconfig, c.wantSecure, c.wantAddress, c.wantAuthn)
			}
		})
	}
}

// The controller's GOGC applies unless the environment sets one that the Go runtime
// takes, which wins; one the runtime ignores is ignored here too.
func TestApplyGOGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	for _, c := range []struct {
		env, wantTarget, wantIgnored string
		// applied is the collector's target after applyGOGC, which starts at 100 (as
		// the runtime leaves it for an unset or ignored GOGC, and as the test sets it
		// in place of the runtime for a GOGC it takes).
		applied int
	}{
		{env: "200", wantTarget: "200", applied: 100},
		{env: "off", wantTarget: "off", applied: 100},
		{env: "-1", wantTarget: "-1", applied: 100},
		{env: "", wantTarget: strconv.Itoa(defaultGOGC), applied: defaultGOGC},
		{env: "50%", wantTarget: strconv.Itoa(defaultGOGC), wantIgnored: "50%", applied: defaultGOGC},
		{env: "Off", wantTarget: strconv.Itoa(defaultGOGC), wantIgnored: "Off", applied: defaultGOGC},
		{env: "99999999999", wantTarget: strconv.Itoa(defaultGOGC), wantIgnored: "99999999999", applied: defaultGOGC},
	} {
		debug.SetGCPercent(100)
		target, ignored := applyGOGC(func(name string) string {
			if name != "GOGC" {
				t.Errorf("read %q from the environment", name)
			}
			return c.env
		})
		if target != c.wantTarget || ignored != c.wantIgnored {
			t.Errorf("with GOGC=%q, applyGOGC = %q, %q; want %q, %q", c.env, target, ignored, c.wantTarget, c.wantIgnored)
		}
		if got := debug.SetGCPercent(100); got != c.applied {
			t.Errorf("with GOGC=%q, the collector's target became %d, want %d", c.env, got, c.applied)
		}
	}
}

func TestWorkersFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"one active replica by default", nil, defaultWorkers},
		{"per slot in sharded mode by default", []string{"--shard-slots=16"}, defaultSlotWorkers},
		{"as given", []string{"--workers=3"}, 3},
		{"as given, per slot", []string{"--workers=3", "--shard-slots=16"}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := parseOptions(t, c.args)
			if got := workers(opts.controller.workers, opts.lease.shardSlots); got != c.want {
				t.Errorf("%d workers, want %d", got, c.want)
			}
		})
	}
}

// leaderWait bounds every wait of these tests; a term takes about a second.
const leaderWait = 10 * time.Second

// leaderLease has short election timings, so that a test sees a whole term.
func leaderLease() election.Lease {
	return election.Lease{
		Namespace: "kube-system", Name: "sample-controller", Identity: "replica-a",
		Duration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	}
}

func getLease(t *testing.T, client *k8sfake.Clientset) *coordinationv1.Lease {
	t.Helper()
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the Lease: %v", err)
	}
	return lease
}

// TestRunAsLeader checks a whole term: run starts once the Lease is taken, a
// cancellation stops run before the Lease is released, and run's error is returned.
func TestRunAsLeader(t *testing.T) {
	for name, runErr := range map[string]error{"run returns nil": nil, "run fails": errors.New("informer failed")} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client := k8sfake.NewClientset()

			started := make(chan struct{})
			var releasedBeforeRunReturned bool
			done := make(chan error, 1)
			go func() {
				done <- runAsLeader(ctx, &clients{lease: client}, leaderLease(), slots.NewLeader(client, leaderLease()), nil, nil, func(ctx context.Context) error {
					close(started)
					<-ctx.Done()
					// The Lease is still held while run winds down.
					lease := getLease(t, client)
					releasedBeforeRunReturned = ptr.Deref(lease.Spec.HolderIdentity, "") == ""
					return runErr
				})
			}()

			select {
			case <-started:
			case <-time.After(leaderWait):
				t.Fatal("run did not start: the Lease was never taken")
			}
			if holder := ptr.Deref(getLease(t, client).Spec.HolderIdentity, ""); holder == "" {
				t.Fatal("run started, but the Lease has no holder")
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, runErr) || (runErr == nil && err != nil) {
					t.Errorf("runAsLeader() = %v, want %v", err, runErr)
				}
			case <-time.After(leaderWait):
				t.Fatal("runAsLeader did not return after cancellation")
			}
			if releasedBeforeRunReturned {
				t.Error("the Lease was released before run returned: a new leader could work beside this one")
			}
			if holder := ptr.Deref(getLease(t, client).Spec.HolderIdentity, ""); holder != "" {
				t.Errorf("after return the Lease is held by %q, want it released", holder)
			}
		})
	}
}

// TestRunAsLeaderCancelledWhileWaiting checks that a replica that never led returns
// on cancellation without running and without touching the leader's Lease.
func TestRunAsLeaderCancelledWhileWaiting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewed := metav1.NewMicroTime(time.Now())
	client := k8sfake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "sample-controller", Namespace: "kube-system"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("the-leader"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &renewed,
			RenewTime:            &renewed,
		},
	})

	done := make(chan error, 1)
	go func() {
		done <- runAsLeader(ctx, &clients{lease: client}, leaderLease(), slots.NewLeader(client, leaderLease()), nil, nil, func(context.Context) error {
			t.Error("run was called while another replica holds the Lease")
			return nil
		})
	}()
	// Let it try to acquire the Lease twice.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, leaderWait, true, func(context.Context) (bool, error) {
		gets := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
				gets++
			}
		}
		return gets >= 2, nil
	})
	if err != nil {
		t.Fatalf("the elector never tried to acquire the Lease: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runAsLeader() = %v, want nil", err)
		}
	case <-time.After(leaderWait):
		t.Fatal("runAsLeader did not return after cancellation")
	}
	if holder := ptr.Deref(getLease(t, client).Spec.HolderIdentity, ""); holder != "the-leader" {
		t.Errorf("the Lease is held by %q, want the-leader", holder)
	}
}

// A write that waited for the API server to come back is checked against its tenure
// when it is sent: the server is told to stop working on it when the tenure ends, not
// as long after as the write waited.
func TestWritesThatWaitedForTheAPIServerCarryWhatIsLeftOfTheirTenure(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	timeouts := make(chan string, 1)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case down.Load():
			// What a proxy in front of a stopped API server answers.
			w.WriteHeader(http.StatusBadGateway)
		case r.URL.Path == "/readyz":
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodPost:
			timeouts <- r.URL.Query().Get("timeout")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			if _, err := w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}`)); err != nil {
				t.Errorf("answering the create: %v", err)
			}
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer server.Close()

	cfg := &rest.Config{Host: server.URL, QPS: -1}
	hold, err := outage.New(t.Context(), cfg, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, kubeCfg, _ := clientConfigs(cfg, &tenure.Gate{Required: true}, hold)
	client := kubernetes.NewForConfigOrDie(kubeCfg)
	// A read finds the server down.
	if _, err := client.CoreV1().ConfigMaps("ns").Get(t.Context(), "c", metav1.GetOptions{}); err == nil || !hold.Down() {
		t.Fatalf("the read got %v and the hold is down: %v; want an error, and down", err, hold.Down())
	}

	const tenureLength, outageLeft = 4 * time.Second, time.Second
	leading := tenure.New(clock.RealClock{})
	leading.Extend(time.Now(), tenureLength)
	time.AfterFunc(outageLeft, func() { down.Store(false) })
	ctx := tenure.NewContext(t.Context(), leading)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	if _, err := client.CoreV1().ConfigMaps("ns").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the write failed: %v", err)
	}
	timeout, err := time.ParseDuration(<-timeouts)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the margin of the tenure, what is left after the wait is shorter than
	// the tenure less the wait.
	if most := tenureLength - outageLeft; timeout > most {
		t.Errorf("the write was sent with timeout=%v, more than the %v its tenure had left when it was sent", timeout, most)
	}
}

func TestOptionsValidateAndComplete(t *testing.T) {
	t.Setenv("POD_NAME", "sample-controller-abc")
	t.Setenv("POD_UID", "uid-1")
	for _, c := range []struct {
		name          string
		args          []string
		wantErr       string
		wantNamespace string
		wantIdentity  string
		wantWorkers   int
	}{
		{name: "one replica needs no Lease", wantWorkers: defaultWorkers},
		{name: "the Lease in the controller's own namespace", args: []string{"--leader-elect"},
			wantNamespace: "team-a", wantIdentity: "sample-controller-abc_uid-1", wantWorkers: defaultWorkers},
		{name: "the deprecated namespace flag still names it", args: []string{"--leader-elect", "--leader-elect-namespace=kube-system"},
			wantNamespace: "kube-system", wantIdentity: "sample-controller-abc_uid-1", wantWorkers: defaultWorkers},
		{name: "slots take the Lease settings too", args: []string{"--shard-slots=4", "--leader-elect-resource-namespace=ops"},
			wantNamespace: "ops", wantIdentity: "sample-controller-abc_uid-1", wantWorkers: defaultSlotWorkers},
		{name: "slots and a leader exclude each other", args: []string{"--shard-slots=4", "--leader-elect"}, wantErr: "exclude each other"},
		{name: "a lease duration past what replicas count", args: []string{"--leader-elect", "--leader-elect-lease-duration=6m"}, wantErr: "at most 5m0s"},
		{name: "negative workers", args: []string{"--workers=-1"}, wantErr: "--workers must be"},
		{name: "too many slots", args: []string{fmt.Sprintf("--shard-slots=%d", slots.MaxSlots+1)}, wantErr: "--shard-slots must be"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := parseOptions(t, append([]string{"--metrics-secure=false"}, c.args...))
			err := opts.validate()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("validate() = %v, want an error with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("validate() = %v", err)
			}
			if err := opts.complete(klog.Background(), "team-a"); err != nil {
				t.Fatalf("complete() = %v", err)
			}
			if opts.lease.Namespace != c.wantNamespace || opts.lease.Identity != c.wantIdentity || opts.controller.workers != c.wantWorkers {
				t.Errorf("Lease %q as %q, %d workers; want %q as %q, %d workers",
					opts.lease.Namespace, opts.lease.Identity, opts.controller.workers, c.wantNamespace, c.wantIdentity, c.wantWorkers)
			}
		})
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	previous := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(previous) })
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int64 // the soft limit in force after
		err  bool
	}{
		{"90% of the container's limit", map[string]string{"MEMORY_LIMIT": "268435456"}, 241591910, false},
		{"GOMEMLIMIT set by hand wins", map[string]string{"MEMORY_LIMIT": "268435456", "GOMEMLIMIT": "200MiB"}, math.MaxInt64, false},
		{"no limit", nil, math.MaxInt64, false},
		{"not a number", map[string]string{"MEMORY_LIMIT": "256Mi"}, math.MaxInt64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The runtime read GOMEMLIMIT at start: none here.
			debug.SetMemoryLimit(math.MaxInt64)
			got, err := applyMemoryLimit(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.err {
				t.Errorf("applyMemoryLimit: %v, want an error: %v", err, tc.err)
			}
			if now := debug.SetMemoryLimit(-1); got != tc.want || now != tc.want {
				t.Errorf("applyMemoryLimit = %d, the runtime's limit %d; want %d", got, now, tc.want)
			}
		})
	}
}

func TestNoArguments(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"--profiling=true", "--kube-api-qps=50"}, false},
		{[]string{"--profiling", "true", "--kube-api-qps=50"}, true},
	} {
		var opts options
		fs := flag.NewFlagSet("sample-controller", flag.ContinueOnError)
		opts.addFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := noArguments(fs); (err != nil) != tc.refused {
			t.Errorf("%q: %v, want refused: %v", tc.args, err, tc.refused)
		}
	}
}
