package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/seed-e6610ed6/sample-controller/internal/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
)

func TestQueueMetrics(t *testing.T) {
	RegisterClientGo()
	// Series outlive their queue, so each run uses a queue name of its own.
	name := fmt.Sprintf("metrics-test-%d", time.Now().UnixNano())
	// Retries wait an hour: the retried item counts as a retry but is not added back
	// while the test runs.
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	item, _ := q.Get()
	q.Done(item)
	q.AddRateLimited("c")

	for _, c := range []struct {
		metric string
		got    float64
		want   float64
	}{
		{"workqueue_adds_total", testutil.ToFloat64(queues.adds.WithLabelValues(name)), 2},
		{"workqueue_depth", testutil.ToFloat64(queues.depth.WithLabelValues(name)), 1},
		{"workqueue_retries_total", testutil.ToFloat64(queues.retries.WithLabelValues(name)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s{name=%q} = %v, want %v", c.metric, name, c.got, c.want)
		}
	}
	if got := testutil.CollectAndCount(queues.workDuration, "workqueue_work_duration_seconds"); got < 1 {
		t.Errorf("workqueue_work_duration_seconds has %d series, want at least 1", got)
	}
	// Everything is served from Registry.
	if _, err := Registry.Gather(); err != nil {
		t.Errorf("gathering the registry: %v", err)
	}
}

// TestQueueRecreated shuts a queue down with items in it and creates another of the
// same name, as sharded mode does when a slot comes back: once the first is forgotten,
// the depth is the new queue's alone, and nothing is reported between the two.
func TestQueueRecreated(t *testing.T) {
	RegisterClientGo()
	name := fmt.Sprintf("metrics-test-recreated-%d", time.Now().UnixNano())
	first := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name})
	first.Add("a")
	first.Add("b")
	first.ShutDown()
	ForgetQueue(name)
	if served(t, "workqueue_depth", name) {
		t.Errorf("workqueue_depth{name=%q} still served after the queue was forgotten", name)
	}
	second := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name})
	defer second.ShutDown()
	second.Add("c")
	if got := testutil.ToFloat64(queues.depth.WithLabelValues(name)); got != 1 {
		t.Errorf("workqueue_depth{name=%q} = %v after the queue was created again with one item, want 1", name, got)
	}
}

// served tells whether Registry serves a series of family for the queue name.
func served(t *testing.T, family, name string) bool {
	t.Helper()
	families, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == family && m.GetLabel()[0].GetValue() == name {
				return true
			}
		}
	}
	return false
}

// TestLeaderElectionMetrics runs client-go's leader election on a fake Lease and checks
// that leader_election_master_status follows it.
func TestLeaderElectionMetrics(t *testing.T) {
	RegisterClientGo()
	name := fmt.Sprintf("metrics-test-%d", time.Now().UnixNano())
	status := func() float64 { return testutil.ToFloat64(leaders.status.WithLabelValues(name)) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: "default"},
			Client:     fake.NewClientset().CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
		},
		LeaseDuration:   2 * time.Second,
		RenewDeadline:   time.Second,
		RetryPeriod:     100 * time.Millisecond,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !hasSeries(t, "leader_election_master_status", "name", name) {
		t.Fatal("no leader_election_master_status series for the lease before the election")
	}
	if got := status(); got != 0 {
		t.Fatalf("before the election: %v, want 0", got)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		elector.Run(ctx)
	}()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("never became the leader")
	}
	if got := status(); got != 1 {
		t.Errorf("while leading: %v, want 1", got)
	}
	cancel()
	<-done
	LeaderElectionEnded(name)
	if got := status(); got != 0 {
		t.Errorf("after releasing: %v, want 0", got)
	}
}

func TestBuildInfo(t *testing.T) {
	RegisterBuildInfo(version.Info{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26", Platform: "linux/amd64"})
	families, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sample_controller_build_info" {
			continue
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != "v1.2.3" || labels["revision"] != "abc" {
			t.Errorf("sample_controller_build_info = %v %v, want 1 with version v1.2.3, revision abc", m.GetGauge().GetValue(), labels)
		}
		return
	}
	t.Error("sample_controller_build_info is not served")
}

// hasSeries tells whether Registry serves metric with label set to value.
func hasSeries(t *testing.T, metric, label, value string) bool {
	t.Helper()
	families, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return true
				}
			}
		}
	}
	return false
}

// An informer with a name reports its store's resourceVersion and its queue through
// Gatherer, beside Registry's series and without a second copy of the Go and process
// collectors.
func TestInformerMetrics(t *testing.T) {
	name, err := cache.NewInformerName(fmt.Sprintf("metrics-test-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	defer name.Release()
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", ResourceVersion: "42"}})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			list, err := client.CoreV1().ConfigMaps("ns").List(ctx, options)
			if err == nil {
				list.ResourceVersion = "42"
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().ConfigMaps("ns").Watch(ctx, options)
		},
	}
	// The fake clientset says it does not stream lists, so the reflector lists.
	informer := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{
		Identifier: name.WithResource(corev1.SchemeGroupVersion.WithResource("configmaps")),
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	families, err := Gatherer.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	var rv float64 = -1
	found := map[string]int{}
	for _, f := range families {
		found[f.GetName()]++
		if f.GetName() != "informer_store_resource_version" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name.Name() {
					rv = m.GetGauge().GetValue()
				}
			}
		}
	}
	if rv != 42 {
		t.Errorf("informer_store_resource_version{name=%q} = %v, want 42", name.Name(), rv)
	}
	for _, family := range []string{"informer_queued_items", "go_goroutines", "process_cpu_seconds_total"} {
		if found[family] != 1 {
			t.Errorf("%s gathered %d times, want once", family, found[family])
		}
	}
}

// A REST client's requests show in Gatherer under kube-controller-manager's names, by
// code, method and host, each family once.
func TestRESTClientMetrics(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"ns"}}`))
	}))
	defer server.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	configMaps := client.CoreV1().ConfigMaps("ns")
	for range 2 {
		if _, err := configMaps.Get(t.Context(), "c", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := configMaps.Delete(t.Context(), "c", metav1.DeleteOptions{}); err == nil {
		t.Fatal("the delete succeeded, want it refused")
	}

	host := strings.TrimPrefix(server.URL, "http://")
	families, err := Gatherer.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	found := map[string]int{}
	got := map[string]float64{}
	for _, f := range families {
		found[f.GetName()]++
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["host"] != host {
				continue
			}
			switch f.GetName() {
			case "rest_client_requests_total":
				got[f.GetName()+" "+labels["method"]+" "+labels["code"]] += m.GetCounter().GetValue()
			case "rest_client_request_duration_seconds":
				got[f.GetName()+" "+labels["verb"]] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for series, want := range map[string]float64{
		"rest_client_requests_total GET 200":          2,
		"rest_client_requests_total DELETE 403":       1,
		"rest_client_request_duration_seconds GET":    2,
		"rest_client_request_duration_seconds DELETE": 1,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	for _, family := range []string{"rest_client_requests_total", "rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds", "rest_client_response_size_bytes", "go_goroutines"} {
		if found[family] != 1 {
			t.Errorf("%s gathered %d times, want once", family, found[family])
		}
	}
}
