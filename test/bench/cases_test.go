package main

import (
	"maps"
	"strings"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const apiserverText = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 1002
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="namespace",subresource="",verb="WATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 50
# TYPE apiserver_request_total_other counter
apiserver_request_total_other{resource="foos",verb="POST"} 99
`

func TestAPIServerRequests(t *testing.T) {
	m, err := localcluster.ParseMetrics(strings.NewReader(apiserverText))
	if err != nil {
		t.Fatal(err)
	}
	got := apiserverRequests(m, countedResources)
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
	if got, want := diff.writes(""), (requestCounts{"POST deployments": 100, "PUT foos/status": 100, "POST events": 100, "PATCH events": 2}); !maps.Equal(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
	if got := diff.writes("events").total(); got != 102 {
		t.Errorf("event writes total = %v, want 102", got)
	}
	if got, want := diff.perFoo(100), map[string]float64{"POST deployments": 1, "PUT foos/status": 1, "POST events": 1, "PATCH events": 0.02, "GET foos": 0.04}; !maps.Equal(got, want) {
		t.Errorf("perFoo = %v, want %v", got, want)
	}
}
