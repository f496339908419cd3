package main

import (
	"context"
	"slices"
	"strings"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// requestCounts counts API requests by "VERB resource[/subresource]".
type requestCounts map[string]float64

// countedResources are the resources a Foo's convergence costs requests on.
var countedResources = []string{"foos", "deployments", "events"}

// mutatingVerbs are the verbs of apiserver_request_total that write.
var mutatingVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// countRequests reads the apiserver's apiserver_request_total; the function it
// returns counts the requests served since on the counted resources. The bench itself
// only watches meanwhile.
func countRequests(ctx context.Context, cluster *localcluster.Cluster) (func(context.Context) (requestCounts, error), error) {
	return countRequestsOn(ctx, cluster, countedResources)
}

// countRequestsOn is countRequests on the given resources.
func countRequestsOn(ctx context.Context, cluster *localcluster.Cluster, resources []string) (func(context.Context) (requestCounts, error), error) {
	m, err := cluster.APIServerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	before := apiserverRequests(m, resources)
	return func(ctx context.Context) (requestCounts, error) {
		m, err := cluster.APIServerMetrics(ctx)
		if err != nil {
			return nil, err
		}
		return apiserverRequests(m, resources).minus(before), nil
	}, nil
}

// apiserverRequests sums apiserver_request_total over every label but verb, resource
// and subresource, for resources and every verb but WATCH (a watch is one long
// request, not work per object).
func apiserverRequests(m localcluster.Metrics, resources []string) requestCounts {
	out := requestCounts{}
	for _, s := range m["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		verb, resource := labels["verb"], labels["resource"]
		if !slices.Contains(resources, resource) || strings.HasPrefix(verb, "WATCH") {
			continue
		}
		key := verb + " " + resource
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += s.GetCounter().GetValue()
	}
	return out
}

// minus returns r - before, leaving out keys that did not change.
func (r requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (r requestCounts) total() float64 {
	var t float64
	for _, v := range r {
		t += v
	}
	return t
}

func (r requestCounts) mutating() requestCounts {
	return r.filter(func(verb, _ string) bool { return slices.Contains(mutatingVerbs, verb) })
}

func (r requestCounts) eventWrites() requestCounts {
	return r.mutating().filter(func(_, resource string) bool { return resource == "events" })
}

func (r requestCounts) filter(keep func(verb, resource string) bool) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		verb, resource, _ := strings.Cut(k, " ")
		resource, _, _ = strings.Cut(resource, "/")
		if keep(verb, resource) {
			out[k] = v
		}
	}
	return out
}

func (r requestCounts) perFoo(n int) map[string]float64 {
	out := make(map[string]float64, len(r))
	for k, v := range r {
		out[k] = v / float64(n)
	}
	return out
}
