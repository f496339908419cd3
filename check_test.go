package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestCheckReadsReadyEndpoints(t *testing.T) {
	slice := func(name, service, port string, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(port), Port: ptr.To[int32](8443)}},
			Endpoints:   endpoints,
		}
	}
	endpoint := func(address string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{address}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	kube := fake.NewClientset(
		slice("metrics-a", "metrics", "metrics", endpoint("10.0.0.2", ptr.To(true)), endpoint("10.0.0.3", ptr.To(false)), endpoint("10.0.0.4", nil)),
		slice("metrics-b", "metrics", "metrics", endpoint("10.0.0.2", ptr.To(true))), // the same endpoint in two slices
		slice("other", "other", "metrics", endpoint("10.0.0.9", ptr.To(true))),
		slice("unnamed", "unnamed", "http", endpoint("10.0.0.8", ptr.To(true))),
	)
	got, err := readyEndpoints(t.Context(), kube, "ns", "metrics")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.2:8443", "10.0.0.4:8443"}; !slices.Equal(got, want) {
		t.Errorf("readyEndpoints = %q, want %q (Ready, or of unknown readiness, once each)", got, want)
	}
	for _, service := range []string{"none", "unnamed"} {
		if _, err := readyEndpoints(t.Context(), kube, "ns", service); !retryable(err) {
			t.Errorf("readyEndpoints of a Service without a Ready metrics endpoint: %v, want a retry", err)
		}
	}
}

func TestCheckScrapes(t *testing.T) {
	const token = "scraper-token"
	metrics := "# HELP " + checkMetric + " ...\n" + checkMetric + `{version="v0.1.0"} 1` + "\n"
	secure := func(body string, withToken int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("Authorization") {
			case "":
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
			case "Bearer " + token:
				w.WriteHeader(withToken)
				_, _ = w.Write([]byte(body))
			default:
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
			}
		}
	}
	open := func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(metrics)) }
	closed, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddress := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string // in the error; empty for a pass
		retry   bool
	}{
		{"the controller's metrics, to its token only", secure(metrics, http.StatusOK), "", false},
		{"metrics open to anyone", open, "open to anyone", false},
		{"a token without the role", secure("forbidden", http.StatusForbidden), "is it bound to sample-controller-metrics-reader", false},
		{"the reviews' budget spent", secure("too many requests", http.StatusTooManyRequests), "429", true},
		{"a review that could not be made", secure("unauthorized", http.StatusUnauthorized), "401", true},
		{"another server", secure("# nothing\n", http.StatusOK), "it is not the controller", false},
		{"nothing listening", nil, "connection refused", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			address := closedAddress
			if tc.handler != nil {
				server := httptest.NewTLSServer(tc.handler)
				defer server.Close()
				address = server.Listener.Addr().String()
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test server
			err := scrapeAll(t.Context(), client, []string{address}, token)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("scrapeAll: %v, want a pass", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("scrapeAll: %v, want an error saying %q", err, tc.want)
			case err != nil && retryable(err) != tc.retry:
				t.Errorf("scrapeAll: %v, retried: %v, want %v", err, retryable(err), tc.retry)
			}
		})
	}
}

func TestCheckRetriesUntilItKnows(t *testing.T) {
	notYet := retryLater("no Ready endpoint")
	forbidden := errors.New("forbidden")
	for _, tc := range []struct {
		name    string
		tries   []error // then nil
		timeout time.Duration
		want    string // in the error; empty for a pass
	}{
		{"passes after retries", []error{notYet, notYet}, time.Minute, ""},
		{"a refusal after a retry is the answer", []error{notYet, forbidden}, time.Minute, "forbidden"},
		{"timed out, the last answer", nil, 50 * time.Millisecond, "after 50ms: no Ready endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			err := retryUntil(t.Context(), tc.timeout, 10*time.Millisecond, func(context.Context) error {
				defer func() { i++ }()
				if tc.tries == nil {
					return notYet
				}
				if i < len(tc.tries) {
					return tc.tries[i]
				}
				return nil
			})
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("retryUntil: %v, want %q", err, tc.want)
			}
		})
	}
}
