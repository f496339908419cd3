package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// sample is one line of the Prometheus text format.
type sample struct {
	labels map[string]string
	value  float64
}

// parseSamples returns the samples of the metric called name in a Prometheus text
// exposition. Comments, other metrics, and the suffixed series of histograms
// (name_bucket and so on) are skipped.
func parseSamples(text, name string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, name)
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		switch {
		case strings.HasPrefix(rest, "{"):
			var err error
			if s.labels, rest, err = parseLabels(rest[1:]); err != nil {
				return nil, fmt.Errorf("metric %s: %w in %q", name, err, line)
			}
		case strings.HasPrefix(rest, " "), strings.HasPrefix(rest, "\t"):
		default:
			continue // another metric whose name starts with name
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metric %s: no value in %q", name, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: bad value in %q: %w", name, line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels parses `a="x",b="y\"z"}` and returns the labels and what follows the
// closing brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], nil
		}
		eq := strings.Index(s, `="`)
		if eq <= 0 {
			return nil, "", fmt.Errorf("bad label set")
		}
		key := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var val strings.Builder
		closed := false
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\\' && i+1 < len(s):
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default: // \\ and \"
					val.WriteByte(s[i])
				}
			case c == '"':
				s, closed = s[i+1:], true
			default:
				val.WriteByte(c)
			}
			if closed {
				break
			}
		}
		if !closed {
			return nil, "", fmt.Errorf("unterminated label value")
		}
		labels[key] = val.String()
	}
}

// requestCounts counts API requests by "VERB resource[/subresource]".
type requestCounts map[string]float64

// countedResources are the resources a Foo's convergence costs requests on.
var countedResources = []string{"foos", "deployments", "events"}

// mutatingVerbs are the verbs of apiserver_request_total that write.
var mutatingVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// apiserverRequests sums apiserver_request_total over every label but verb, resource
// and subresource, for the counted resources and every verb but WATCH (a watch is one
// long request, not work per object).
func apiserverRequests(text string) (requestCounts, error) {
	samples, err := parseSamples(text, "apiserver_request_total")
	if err != nil {
		return nil, err
	}
	out := requestCounts{}
	for _, s := range samples {
		verb, resource := s.labels["verb"], s.labels["resource"]
		if !slices.Contains(countedResources, resource) || strings.HasPrefix(verb, "WATCH") {
			continue
		}
		key := verb + " " + resource
		if sub := s.labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += s.value
	}
	return out, nil
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

// total is the sum of all counts.
func (r requestCounts) total() float64 {
	var t float64
	for _, v := range r {
		t += v
	}
	return t
}

// mutating keeps the writes.
func (r requestCounts) mutating() requestCounts {
	return r.filter(func(verb, _ string) bool { return slices.Contains(mutatingVerbs, verb) })
}

// eventWrites keeps the writes of events.
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

// perFoo divides every count by n.
func (r requestCounts) perFoo(n int) map[string]float64 {
	out := make(map[string]float64, len(r))
	for k, v := range r {
		out[k] = v / float64(n)
	}
	return out
}

// scrapeAPIServer reads the apiserver's request counters.
func scrapeAPIServer(ctx context.Context, kube kubernetes.Interface) (requestCounts, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	return apiserverRequests(string(body))
}

// getURL returns the body of a GET of url, which must answer 200.
func getURL(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// scrapeGauge reads one unlabelled metric from a plain HTTP /metrics.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := getURL(ctx, url)
	if err != nil {
		return 0, err
	}
	samples, err := parseSamples(string(body), name)
	if err != nil {
		return 0, err
	}
	if len(samples) != 1 {
		return 0, fmt.Errorf("GET %s: %d samples of %s, want 1", url, len(samples), name)
	}
	return samples[0].value, nil
}
