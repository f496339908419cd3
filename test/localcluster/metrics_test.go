package localcluster

import (
	"strings"
	"testing"
)

const sampleMetrics = `# HELP sample_controller_syncs_total Syncs by result.
# TYPE sample_controller_syncs_total counter
sample_controller_syncs_total{result="success"} 7
sample_controller_syncs_total{result="error"} 2
sample_controller_syncs_total{result="rejected"} 1
# HELP workqueue_depth Depth of the queue.
# TYPE workqueue_depth gauge
workqueue_depth{name="foos"} 0
workqueue_depth{name="other"} 3
# HELP rest_client_requests_total Requests by code and method.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 4
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 9
# HELP sample_controller_sync_duration_seconds Sync latency.
# TYPE sample_controller_sync_duration_seconds histogram
sample_controller_sync_duration_seconds_bucket{le="0.1"} 9
sample_controller_sync_duration_seconds_bucket{le="+Inf"} 10
sample_controller_sync_duration_seconds_sum 0.42
sample_controller_sync_duration_seconds_count 10
# HELP go_gc_duration_seconds GC pauses.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.001
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count 5
untyped_thing 2.5
`

func TestMetricsSum(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(sampleMetrics))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"every series of a counter", "sample_controller_syncs_total", nil, 10},
		{"one label", "sample_controller_syncs_total", map[string]string{"result": "error"}, 2},
		{"a subset of the labels", "rest_client_requests_total", map[string]string{"code": "201", "method": "POST"}, 4},
		{"labels no series has", "rest_client_requests_total", map[string]string{"code": "201", "method": "GET"}, 0},
		{"a label no series has", "sample_controller_syncs_total", map[string]string{"shard": "1"}, 0},
		{"a gauge", "workqueue_depth", map[string]string{"name": "other"}, 3},
		{"a histogram counts samples", "sample_controller_sync_duration_seconds", nil, 10},
		{"a summary counts samples", "go_gc_duration_seconds", nil, 5},
		{"untyped", "untyped_thing", nil, 2.5},
		{"a missing family", "no_such_metric", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Sum(tc.metric, tc.labels); got != tc.want {
				t.Errorf("Sum(%s, %v) = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}

	if !m.Has("workqueue_depth", map[string]string{"name": "foos"}) {
		t.Error(`Has(workqueue_depth{name="foos"}) = false for a series at 0`)
	}
	if m.Has("workqueue_depth", map[string]string{"name": "bars"}) {
		t.Error(`Has(workqueue_depth{name="bars"}) = true for no such series`)
	}
}

func TestParseMetricsRejectsGarbage(t *testing.T) {
	if _, err := ParseMetrics(strings.NewReader("not a { metric\n")); err == nil {
		t.Error("ParseMetrics accepted a malformed line")
	}
}
