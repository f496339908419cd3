package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
