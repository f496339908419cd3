package main

import (
	"maps"
	"strings"
	"testing"
	"time"
)

// auditText is kube-apiserver's audit log at level Metadata, trimmed to the fields the
// bench reads, the last line half written.
const auditText = `{"kind":"Event","stage":"ResponseComplete","verb":"create","user":{"username":"bench-controller","groups":["system:masters"]},"objectRef":{"resource":"deployments","namespace":"bench","name":"foo-00001","apiGroup":"apps"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-11-29T10:00:01.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"create","user":{"username":"bench-controller"},"objectRef":{"resource":"deployments","namespace":"bench","name":"foo-00002","apiGroup":"apps"},"responseStatus":{"code":409},"requestReceivedTimestamp":"2026-11-29T10:00:02.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"update","user":{"username":"bench-controller"},"objectRef":{"resource":"foos","subresource":"status","namespace":"bench","name":"foo-00001"},"requestReceivedTimestamp":"2026-11-29T10:00:03.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"list","user":{"username":"bench-controller"},"objectRef":{"resource":"foos"},"requestReceivedTimestamp":"2026-11-29T10:00:00.500000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"create","user":{"username":"bench-controller"},"objectRef":{"resource":"events","namespace":"bench","apiGroup":"events.k8s.io"},"requestReceivedTimestamp":"2026-11-29T10:00:04.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"get","user":{"username":"bench-controller"},"requestURI":"/healthz","requestReceivedTimestamp":"2026-11-29T10:00:04.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"update","user":{"username":"system:kube-controller-manager"},"objectRef":{"resource":"deployments","subresource":"status"},"requestReceivedTimestamp":"2026-11-29T10:00:04.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"patch","user":{"username":"bench-controller"},"objectRef":{"resource":"deployments"},"requestReceivedTimestamp":"2026-11-29T10:00:09.000000Z"}
{"kind":"Event","stage":"ResponseComplete","verb":"patch","user":{"username":"bench-controller"},"objectRef":{"resource":"deplo`

func TestCountRequests(t *testing.T) {
	from, to := time.Date(2026, 11, 29, 10, 0, 1, 0, time.UTC), time.Date(2026, 11, 29, 10, 0, 9, 0, time.UTC)
	got, err := countRequests(strings.NewReader(auditText), "bench-controller", from, to)
	if err != nil {
		t.Fatal(err)
	}
	// Every code counts; the controller's user only, its requests on objects only,
	// received from from until to (the list before, the patch at to, are out).
	want := requestCounts{"POST deployments": 2, "PUT foos/status": 1, "POST events": 1}
	if !maps.Equal(got, want) {
		t.Errorf("countRequests =\n%v\nwant\n%v", got, want)
	}
	// A line a killed kube-apiserver left half written, in the middle, is skipped.
	withBadLine := strings.Replace(auditText, "\n", "\n{\"kind\":\"Ev\n", 1)
	if got, err := countRequests(strings.NewReader(withBadLine), "bench-controller", from, to); err != nil || !maps.Equal(got, want) {
		t.Errorf("countRequests with a broken line = %v, %v; want %v", got, err, want)
	}
}

func TestRequestCounts(t *testing.T) {
	counts := requestCounts{"POST deployments": 100, "PUT foos/status": 100, "POST events": 100, "PATCH events": 2, "GET foos": 4}
	if got := counts.total(); got != 306 {
		t.Errorf("total = %v, want 306", got)
	}
	withReviews := maps.Clone(counts)
	withReviews["POST tokenreviews"], withReviews["POST subjectaccessreviews"] = 3, 3 // they store nothing
	if got, want := withReviews.writes(""), (requestCounts{"POST deployments": 100, "PUT foos/status": 100, "POST events": 100, "PATCH events": 2}); !maps.Equal(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
	if got := counts.writes("events").total(); got != 102 {
		t.Errorf("event writes total = %v, want 102", got)
	}
	if got, want := counts.perFoo(100), map[string]float64{"POST deployments": 1, "PUT foos/status": 1, "POST events": 1, "PATCH events": 0.02, "GET foos": 0.04}; !maps.Equal(got, want) {
		t.Errorf("perFoo = %v, want %v", got, want)
	}
}
