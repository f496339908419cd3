// Prometheus metrics: parsed and scraped from the components and the controllers.

package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// Metrics is one scrape of a Prometheus endpoint, by metric family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return Metrics(families), nil
}

// ScrapeMetrics fetches and parses url with client, which carries any credentials.
func ScrapeMetrics(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The one format ParseMetrics reads; without it a server may choose another.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("scraping %s: %s: %s", url, resp.Status, body)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	return m, nil
}

// APIServerMetrics scrapes the apiserver's /metrics as the admin, for counting the
// requests a controller made (apiserver_request_total by verb and resource).
func (c *Cluster) APIServerMetrics(ctx context.Context) (Metrics, error) {
	cfg := c.RESTConfig()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating admin HTTP client: %w", err)
	}
	return ScrapeMetrics(ctx, client, cfg.Host+"/metrics")
}

// Sum adds up the series of the family name whose labels include all of labels: the
// values of counters, gauges and untyped metrics, and the sample counts of histograms
// and summaries. A family that is not there sums to 0.
func (m Metrics) Sum(name string, labels map[string]string) float64 {
	family := m[name]
	var sum float64
	for _, metric := range family.GetMetric() {
		if !hasLabels(metric, labels) {
			continue
		}
		switch family.GetType() {
		case dto.MetricType_COUNTER:
			sum += metric.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += metric.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			sum += float64(metric.GetHistogram().GetSampleCount())
		case dto.MetricType_SUMMARY:
			sum += float64(metric.GetSummary().GetSampleCount())
		default:
			sum += metric.GetUntyped().GetValue()
		}
	}
	return sum
}

// Has reports whether the family name has a series whose labels include all of labels,
// whatever its value: a gauge at 0 is still exported.
func (m Metrics) Has(name string, labels map[string]string) bool {
	for _, metric := range m[name].GetMetric() {
		if hasLabels(metric, labels) {
			return true
		}
	}
	return false
}

func hasLabels(metric *dto.Metric, want map[string]string) bool {
	matched := 0
	for _, pair := range metric.GetLabel() {
		if value, ok := want[pair.GetName()]; ok && value == pair.GetValue() {
			matched++
		}
	}
	return matched == len(want)
}
