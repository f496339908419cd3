package main

import (
	"io"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// series is the label set of one series as Prometheus stores it, the metric name
// under __name__.
type series struct {
	labels map[string]string
}

// parseScrape reads the Prometheus text format into the series Prometheus would
// store: a histogram becomes its _bucket (with le), _sum and _count series, a summary
// its quantiles, _sum and _count. Values do not matter here, only that a series exists.
func parseScrape(r io.Reader) ([]series, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var all []series
	for name, f := range families {
		for _, m := range f.GetMetric() {
			add := func(suffix string, extra ...string) {
				l := map[string]string{"__name__": name + suffix}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				all = append(all, series{labels: l})
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				for _, b := range m.GetHistogram().GetBucket() {
					add("_bucket", "le", model.FloatString(b.GetUpperBound()).String())
				}
				add("_bucket", "le", "+Inf")
				add("_sum")
				add("_count")
			case dto.MetricType_SUMMARY:
				for _, q := range m.GetSummary().GetQuantile() {
					add("", "quantile", model.FloatString(q.GetQuantile()).String())
				}
				add("_sum")
				add("_count")
			default:
				add("")
			}
		}
	}
	return all, nil
}

// matcher is one label matcher of a selector; a series without the label matches as
// if it had the empty value, as in PromQL.
type matcher struct{ *labels.Matcher }

func (m *matcher) matches(s series) bool { return m.Matches(s.labels[m.Name]) }

// selectSeries returns the series that every matcher matches.
func selectSeries(matchers []*matcher, all []series) []series {
	var selected []series
	for _, s := range all {
		if !slices.ContainsFunc(matchers, func(m *matcher) bool { return !m.matches(s) }) {
			selected = append(selected, s)
		}
	}
	return selected
}

// labelValues lists the values a label takes among series, for error messages.
func labelValues(all []series, name string) []string {
	var values []string
	for _, s := range all {
		if v, ok := s.labels[name]; ok && !slices.Contains(values, v) {
			values = append(values, v)
		}
	}
	slices.Sort(values)
	return values
}
