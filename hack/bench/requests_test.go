package main

import (
	"maps"
	"testing"
)

const apiserverMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 1002
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="namespace",subresource="",verb="WATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 50
apiserver_request_total_other{resource="foos",verb="POST"} 99
apiserver_request_duration_seconds_bucket{resource="foos",verb="POST",le="0.1"} 5
`

func TestParseSamples(t *testing.T) {
	tests := []struct {
		name       string
		text       string
		metric     string
		wantLabels []map[string]string
		wantValues []float64
	}{
		{
			name:       "without labels",
			text:       "# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 1.2345e+07\ngo_memstats_heap_inuse_bytes_total 1\n",
			metric:     "go_memstats_heap_inuse_bytes",
			wantLabels: []map[string]string{{}},
			wantValues: []float64{12345000},
		},
		{
			name:       "escaped label values",
			text:       `m{a="x\"y",b="back\\slash",c="new\nline",d=""} 3` + "\n",
			metric:     "m",
			wantLabels: []map[string]string{{"a": `x"y`, "b": `back\slash`, "c": "new\nline", "d": ""}},
			wantValues: []float64{3},
		},
		{
			name:       "a comma inside a value, and a timestamp",
			text:       `m{a="1,2"} 4 1700000000000` + "\n",
			metric:     "m",
			wantLabels: []map[string]string{{"a": "1,2"}},
			wantValues: []float64{4},
		},
		{
			name:   "comments, other metrics and histogram series are skipped",
			text:   "# m 1\nmm 2\nm_bucket{le=\"1\"} 3\n",
			metric: "m",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSamples(tt.text, tt.metric)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.wantValues) {
				t.Fatalf("got %d samples %v, want %d", len(got), got, len(tt.wantValues))
			}
			for i, s := range got {
				if !maps.Equal(s.labels, tt.wantLabels[i]) || s.value != tt.wantValues[i] {
					t.Errorf("sample %d = %v %v, want %v %v", i, s.labels, s.value, tt.wantLabels[i], tt.wantValues[i])
				}
			}
		})
	}
}

func TestParseSamplesErrors(t *testing.T) {
	for _, text := range []string{
		`m{a="x} 1`,
		`m{a} 1`,
		`m{a="x"}`,
		`m{a="x"} one`,
	} {
		if _, err := parseSamples(text, "m"); err == nil {
			t.Errorf("parseSamples(%q) succeeded, want an error", text)
		}
	}
}

func TestAPIServerRequests(t *testing.T) {
	got, err := apiserverRequests(apiserverMetrics)
	if err != nil {
		t.Fatal(err)
	}
	want := requestCounts{
		"POST deployments": 1003, // every code counts
		"PUT foos/status":  1002,
		"LIST foos":        1,
		"POST events":      1000, // events.k8s.io and core events alike
		"PATCH events":     7,
	}
	if !maps.Equal(got, want) {
		t.Errorf("apiserverRequests =\n%v\nwant\n%v", got, want)
	}
}

func TestRequestCounts(t *testing.T) {
	before := requestCounts{"POST deployments": 10, "LIST foos": 1, "PUT foos/status": 5}
	after := requestCounts{"POST deployments": 110, "LIST foos": 1, "PUT foos/status": 105, "POST events": 100, "PATCH events": 2, "GET foos": 4}

	diff := after.minus(before)
	wantDiff := requestCounts{"POST deployments": 100, "PUT foos/status": 100, "POST events": 100, "PATCH events": 2, "GET foos": 4}
	if !maps.Equal(diff, wantDiff) {
		t.Errorf("minus = %v, want %v", diff, wantDiff)
	}
	if got := diff.total(); got != 306 {
		t.Errorf("total = %v, want 306", got)
	}
	if got, want := diff.mutating(), (requestCounts{"POST deployments": 100, "PUT foos/status": 100, "POST events": 100, "PATCH events": 2}); !maps.Equal(got, want) {
		t.Errorf("mutating = %v, want %v", got, want)
	}
	if got := diff.eventWrites().total(); got != 102 {
		t.Errorf("eventWrites total = %v, want 102", got)
	}
	if got, want := diff.perFoo(100), map[string]float64{"POST deployments": 1, "PUT foos/status": 1, "POST events": 1, "PATCH events": 0.02, "GET foos": 0.04}; !maps.Equal(got, want) {
		t.Errorf("perFoo = %v, want %v", got, want)
	}
}
