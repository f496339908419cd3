package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// evaluationInterval is how often Prometheus evaluates a rule group unless it says
// otherwise, as this one does not; the series of the cases are sampled as often.
const evaluationInterval = time.Minute

// firingAt evaluates rule on the series of load with Prometheus's engine, every
// evaluationInterval from 0 to at, the way Prometheus evaluates an alerting rule: an
// alert, one per output series, is pending from the first evaluation that returns its
// series and fires once it has been returned for the rule's `for` without a gap. It
// returns the firing alerts at at, each as "namespace/pod" (the labels this
// repository's alerts are grouped by).
func firingAt(t *testing.T, rule rulefmt.Rule, load string, at time.Duration) []string {
	t.Helper()
	series := loadSeries(t, load)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	activeSince := map[string]time.Duration{}
	for ts := time.Duration(0); ts <= at; ts += evaluationInterval {
		q, err := engine.NewInstantQuery(context.Background(), series, nil, rule.Expr, time.Unix(0, 0).Add(ts))
		if err != nil {
			t.Fatalf("%s: %v", rule.Alert, err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s at %v: %v", rule.Alert, ts, res.Err)
		}
		vector, err := res.Vector()
		if err != nil {
			t.Fatalf("%s at %v: %v", rule.Alert, ts, err)
		}
		returned := map[string]bool{}
		for _, sample := range vector {
			key := sample.Metric.Get("namespace") + "/" + sample.Metric.Get("pod")
			returned[key] = true
			if _, ok := activeSince[key]; !ok {
				activeSince[key] = ts
			}
		}
		for key := range activeSince {
			if !returned[key] {
				delete(activeSince, key)
			}
		}
		q.Close()
	}
	var firing []string
	for key, since := range activeSince {
		if at-since >= time.Duration(rule.For) {
			firing = append(firing, key)
		}
	}
	slices.Sort(firing)
	return firing
}

// loadSeries parses series in the notation of promtool's test files, one a line
// (`metric{label="value"} 0+10x60`, a sample every evaluationInterval from 0), into
// series held in memory for the engine. A line "load <interval>" is allowed for
// readers who know the notation, and must name evaluationInterval.
func loadSeries(t *testing.T, load string) memSeries {
	t.Helper()
	var out memSeries
	for _, line := range strings.Split(load, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if interval, ok := strings.CutPrefix(line, "load "); ok {
			if d, err := time.ParseDuration(interval); err != nil || d != evaluationInterval {
				t.Fatalf("%q: the series are sampled every %v", line, evaluationInterval)
			}
			continue
		}
		lset, values, err := promQL.ParseSeriesDesc(line)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, floatSample{t: int64(i) * evaluationInterval.Milliseconds(), f: v.Value})
			}
		}
		out = append(out, storage.NewListSeries(lset, samples))
	}
	return out
}

// memSeries is a storage.Queryable of series held in memory.
type memSeries []*storage.SeriesEntry

func (m memSeries) Querier(int64, int64) (storage.Querier, error) { return m, nil }

func (m memSeries) Select(_ context.Context, sortSeries bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	var selected []storage.Series
	for _, s := range m {
		if slices.ContainsFunc(matchers, func(matcher *labels.Matcher) bool { return !matcher.Matches(s.Labels().Get(matcher.Name)) }) {
			continue
		}
		selected = append(selected, s)
	}
	if sortSeries {
		slices.SortFunc(selected, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	}
	return &seriesSet{series: selected, i: -1}
}

func (memSeries) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, fmt.Errorf("not implemented")
}

func (memSeries) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, fmt.Errorf("not implemented")
}

func (memSeries) Close() error { return nil }

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series              { return s.series[s.i] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is a float sample at t, in milliseconds.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }

// alertCase is series that must fire an alert, or leave it silent (no firing), at a
// time.
type alertCase struct {
	name   string
	load   string
	at     time.Duration
	firing []string
}

// alertCases holds, for every alert of the controller's PrometheusRule, the series
// that must fire it and those that must not. Every series carries the namespace and
// pod labels the Prometheus Operator adds to what it scrapes.
var alertCases = map[string][]alertCase{
	"SampleControllerSyncErrors": {{
		name: "fires after 15 minutes of 9% failed syncs",
		load: `load 1m
			sample_controller_syncs_total{namespace="sc", pod="a", result="success"} 0+100x60
			sample_controller_syncs_total{namespace="sc", pod="a", result="error"} 0+10x60`,
		at:     40 * time.Minute,
		firing: []string{"sc/"},
	}, {
		name: "pending, not firing, 10 minutes in",
		load: `load 1m
			sample_controller_syncs_total{namespace="sc", pod="a", result="success"} 0+100x60
			sample_controller_syncs_total{namespace="sc", pod="a", result="error"} 0+10x60`,
		at: 10 * time.Minute,
	}, {
		name: "silent at 1% failed",
		load: `load 1m
			sample_controller_syncs_total{namespace="sc", pod="a", result="success"} 0+100x60
			sample_controller_syncs_total{namespace="sc", pod="a", result="error"} 0+1x60`,
		at: 40 * time.Minute,
	}},
	"SampleControllerSyncsRejected": {{
		name: "fires while a Foo is refused on every try",
		load: `load 1m
			sample_controller_syncs_total{namespace="sc", pod="a", result="rejected"} 0+1x60`,
		at:     40 * time.Minute,
		firing: []string{"sc/"},
	}, {
		name: "silent once the refusals stopped",
		load: `load 1m
			sample_controller_syncs_total{namespace="sc", pod="a", result="rejected"} 0 1 2 3 4 5 5x50`,
		at: 40 * time.Minute,
	}},
	"SampleControllerWorkQueueBacklog": {{
		name: "fires on the leader's deep queue",
		load: `load 1m
			workqueue_depth{namespace="sc", pod="a", name="foos"} 500x40
			leader_election_master_status{namespace="sc", pod="a", name="sample-controller"} 1x40
			workqueue_depth{namespace="sc", pod="b", name="foos"} 500x40
			leader_election_master_status{namespace="sc", pod="b", name="sample-controller"} 0x40`,
		at:     30 * time.Minute,
		firing: []string{"sc/a"},
	}, {
		name: "silent on a standby's queue, which no worker drains",
		load: `load 1m
			workqueue_depth{namespace="sc", pod="a", name="foos"} 0x40
			leader_election_master_status{namespace="sc", pod="a", name="sample-controller"} 1x40
			workqueue_depth{namespace="sc", pod="b", name="foos"} 500x40
			leader_election_master_status{namespace="sc", pod="b", name="sample-controller"} 0x40`,
		at: 30 * time.Minute,
	}, {
		name: "fires on a sharded replica's slot queues together",
		load: `load 1m
			workqueue_depth{namespace="sc", pod="c", name="foos-slot-1"} 60x40
			workqueue_depth{namespace="sc", pod="c", name="foos-slot-5"} 60x40`,
		at:     30 * time.Minute,
		firing: []string{"sc/c"},
	}, {
		name: "silent on shallow slot queues",
		load: `load 1m
			workqueue_depth{namespace="sc", pod="c", name="foos-slot-1"} 40x40
			workqueue_depth{namespace="sc", pod="c", name="foos-slot-5"} 40x40`,
		at: 30 * time.Minute,
	}},
	"SampleControllerFoosNotReady": {{
		name: "fires after 30 minutes of Foos not Ready, counted once over two replicas",
		load: `load 1m
			sample_controller_foos{namespace="sc", pod="a", ready="False"} 3x60
			sample_controller_foos{namespace="sc", pod="b", ready="False"} 3x60`,
		at:     40 * time.Minute,
		firing: []string{"sc/"},
	}, {
		name: "pending, not firing, 20 minutes in",
		load: `load 1m
			sample_controller_foos{namespace="sc", pod="a", ready="False"} 3x60`,
		at: 20 * time.Minute,
	}, {
		name: "silent when every Foo is Ready",
		load: `load 1m
			sample_controller_foos{namespace="sc", pod="a", ready="False"} 0x60
			sample_controller_foos{namespace="sc", pod="a", ready="True"} 9x60`,
		at: 40 * time.Minute,
	}},
	"SampleControllerNoLeader": {{
		name: "fires when no replica leads",
		load: `load 1m
			leader_election_master_status{namespace="sc", pod="a", name="sample-controller"} 0x20
			leader_election_master_status{namespace="sc", pod="b", name="sample-controller"} 0x20`,
		at:     10 * time.Minute,
		firing: []string{"sc/"},
	}, {
		name: "silent through a hand-over",
		load: `load 1m
			leader_election_master_status{namespace="sc", pod="a", name="sample-controller"} 1 1 1 1 1 0 0x14
			leader_election_master_status{namespace="sc", pod="b", name="sample-controller"} 0 0 0 0 0 0 1x14`,
		at: 15 * time.Minute,
	}},
	"SampleControllerSlotsUnheld": {{
		name: "fires when replicas hold fewer slots than there are",
		load: `load 1m
			sample_controller_slots{namespace="sc", pod="a"} 8x20
			sample_controller_slots{namespace="sc", pod="b"} 8x20
			sample_controller_slots_held{namespace="sc", pod="a"} 3x20
			sample_controller_slots_held{namespace="sc", pod="b"} 3x20`,
		at:     10 * time.Minute,
		firing: []string{"sc/"},
	}, {
		name: "silent when every slot is held",
		load: `load 1m
			sample_controller_slots{namespace="sc", pod="a"} 8x20
			sample_controller_slots{namespace="sc", pod="b"} 8x20
			sample_controller_slots_held{namespace="sc", pod="a"} 4x20
			sample_controller_slots_held{namespace="sc", pod="b"} 4x20`,
		at: 10 * time.Minute,
	}, {
		name: "silent in single-leader mode, where both gauges are 0",
		load: `load 1m
			sample_controller_slots{namespace="sc", pod="a"} 0x20
			sample_controller_slots_held{namespace="sc", pod="a"} 0x20`,
		at: 10 * time.Minute,
	}},
	"SampleControllerDown": {{
		name: "fires when no replica is scraped",
		load: `load 1m
			up{namespace="other", pod="x"} 1x20`,
		at:     15 * time.Minute,
		firing: []string{"/"},
	}, {
		name: "silent while a replica serves its build info",
		load: `load 1m
			sample_controller_build_info{namespace="sc", pod="a", version="v0.1.0"} 1x20`,
		at: 15 * time.Minute,
	}},
	"SampleControllerEventsDropped": {{
		name: "fires while Events are refused",
		load: `load 1m
			sample_controller_events_dropped_total{namespace="sc", pod="a", reason="refused"} 0+5x60
			sample_controller_events_dropped_total{namespace="sc", pod="b", reason="refused"} 0x60`,
		at:     40 * time.Minute,
		firing: []string{"sc/a"},
	}, {
		name: "silent on the drops of hand-overs and shutdowns",
		load: `load 1m
			sample_controller_events_dropped_total{namespace="sc", pod="a", reason="tenure_over"} 0+5x60
			sample_controller_events_dropped_total{namespace="sc", pod="a", reason="shutdown"} 0+5x60
			sample_controller_events_dropped_total{namespace="sc", pod="a", reason="interrupted"} 0+5x60`,
		at: 40 * time.Minute,
	}, {
		name: "silent on a cold start's burst of drops, three minutes long",
		load: `load 1m
			sample_controller_events_dropped_total{namespace="sc", pod="a", reason="backlog"} 0 500 900 1200 1200x56`,
		at: 17 * time.Minute,
	}},
	"SampleControllerMemoryNearLimit": {{
		// The soft limit is 90% of the 256Mi limit.
		name: "fires on the controller's Pod above its soft limit, 90% of its limit",
		load: `load 1m
			process_resident_memory_bytes{namespace="sc", pod="a"} 243000000x30
			go_gc_gomemlimit_bytes{namespace="sc", pod="a"} 241591910x30
			sample_controller_build_info{namespace="sc", pod="a", version="v0.1.0"} 1x30
			process_resident_memory_bytes{namespace="sc", pod="b"} 100000000x30
			go_gc_gomemlimit_bytes{namespace="sc", pod="b"} 241591910x30
			sample_controller_build_info{namespace="sc", pod="b", version="v0.1.0"} 1x30`,
		at:     20 * time.Minute,
		firing: []string{"sc/a"},
	}, {
		name: "silent for another program's Pod near its limit",
		load: `load 1m
			process_resident_memory_bytes{namespace="other", pod="x"} 270000000x30
			go_gc_gomemlimit_bytes{namespace="other", pod="x"} 268435456x30
			sample_controller_build_info{namespace="sc", pod="a", version="v0.1.0"} 1x30`,
		at: 20 * time.Minute,
	}, {
		name: "silent for a sidecar near its own limit, in the controller's Pod",
		load: `load 1m
			process_resident_memory_bytes{namespace="sc", pod="a", container="controller"} 100000000x30
			go_gc_gomemlimit_bytes{namespace="sc", pod="a", container="controller"} 268435456x30
			sample_controller_build_info{namespace="sc", pod="a", container="controller", version="v0.1.0"} 1x30
			process_resident_memory_bytes{namespace="sc", pod="a", container="proxy"} 130000000x30
			go_gc_gomemlimit_bytes{namespace="sc", pod="a", container="proxy"} 125000000x30`,
		at: 20 * time.Minute,
	}, {
		name: "silent without a memory limit, when the gauge is the largest int64",
		load: `load 1m
			process_resident_memory_bytes{namespace="sc", pod="a"} 900000000x30
			go_gc_gomemlimit_bytes{namespace="sc", pod="a"} 9223372036854775807x30
			sample_controller_build_info{namespace="sc", pod="a", version="v0.1.0"} 1x30`,
		at: 20 * time.Minute,
	}},
}

// runbooks is where every alert's runbook_url points: a section of docs/runbooks.md
// named as the alert, by the anchor GitHub gives its heading.
const runbooks = "https://github.com/seed-e6610ed6/sample-controller/blob/main/docs/runbooks.md#"

// TestRunbooks checks that every alert links its own section of docs/runbooks.md, and
// that every section there is an alert's.
func TestRunbooks(t *testing.T) {
	groups := componentRules(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if heading, ok := strings.CutPrefix(strings.TrimSpace(line), "## "); ok {
			sections[heading] = true
		}
	}
	for _, g := range groups {
		for _, rule := range g.rules {
			if rule.Alert == "" {
				continue
			}
			if got, want := rule.Annotations["runbook_url"], runbooks+strings.ToLower(rule.Alert); got != want {
				t.Errorf("%s: runbook_url %q, want %q", rule.Alert, got, want)
			}
			if !sections[rule.Alert] {
				t.Errorf("%s: docs/runbooks.md has no section \"## %s\"", rule.Alert, rule.Alert)
			}
			delete(sections, rule.Alert)
		}
	}
	for heading := range sections {
		t.Errorf("docs/runbooks.md has a section %q for no alert", heading)
	}
}

// recordCases are the value each recording rule must give on its series.
var recordCases = map[string]struct {
	load string
	at   time.Duration
	want float64
}{
	// 10 of 110 syncs a minute fail.
	"namespace:sample_controller_sync_errors:ratio_rate15m": {
		load: `load 1m
			sample_controller_syncs_total{namespace="sc", pod="a", result="success"} 0+100x60
			sample_controller_syncs_total{namespace="sc", pod="a", result="error"} 0+10x60`,
		at:   30 * time.Minute,
		want: 10.0 / 110,
	},
	// 99 of 100 syncs a minute take at most 0.1 s, 1 up to 1 s: the 99th percentile is
	// the top of the 0.1 s bucket.
	"namespace:sample_controller_sync_duration_seconds:p99_rate15m": {
		load: `load 1m
			sample_controller_sync_duration_seconds_bucket{namespace="sc", pod="a", le="0.1"} 0+99x60
			sample_controller_sync_duration_seconds_bucket{namespace="sc", pod="a", le="1"} 0+100x60
			sample_controller_sync_duration_seconds_bucket{namespace="sc", pod="a", le="+Inf"} 0+100x60`,
		at:   30 * time.Minute,
		want: 0.1,
	},
}

// TestRecordingRules evaluates every recording rule on its case's series.
func TestRecordingRules(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range componentRules(t) {
		for _, rule := range g.rules {
			if rule.Record == "" {
				continue
			}
			seen[rule.Record] = true
			c, ok := recordCases[rule.Record]
			if !ok {
				t.Errorf("%s: no case", rule.Record)
				continue
			}
			engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
			q, err := engine.NewInstantQuery(context.Background(), loadSeries(t, c.load), nil, rule.Expr, time.Unix(0, 0).Add(c.at))
			if err != nil {
				t.Fatalf("%s: %v", rule.Record, err)
			}
			res := q.Exec(context.Background())
			vector, err := res.Vector()
			q.Close()
			if err != nil {
				t.Fatalf("%s: %v", rule.Record, err)
			}
			if len(vector) != 1 || vector[0].Metric.Get("namespace") != "sc" || math.Abs(vector[0].F-c.want) > 1e-9 {
				t.Errorf("%s = %v, want one series for namespace sc of %v", rule.Record, vector, c.want)
			}
		}
	}
	for record := range recordCases {
		if !seen[record] {
			t.Errorf("a case for %s, which the PrometheusRule does not record", record)
		}
	}
}

// componentRules is the rule groups of the prometheus component's PrometheusRule.
func componentRules(t *testing.T) []ruleGroup {
	t.Helper()
	manifests, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "deploy", "components", "prometheus", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	groups, err := prometheusRules(manifests)
	if err != nil {
		t.Fatal(err)
	}
	return groups
}

// TestAlertsFire runs every alert of artifacts/deploy/components/prometheus through
// series that must fire it and series that must not, and fails for an alert with no
// case of either kind.
func TestAlertsFire(t *testing.T) {
	groups := componentRules(t)
	seen := map[string]bool{}
	for _, g := range groups {
		for _, rule := range g.rules {
			if rule.Alert == "" {
				continue
			}
			seen[rule.Alert] = true
			cases := alertCases[rule.Alert]
			fires := slices.ContainsFunc(cases, func(c alertCase) bool { return len(c.firing) > 0 })
			silent := slices.ContainsFunc(cases, func(c alertCase) bool { return len(c.firing) == 0 })
			if !fires || !silent {
				t.Errorf("%s: want a case that fires it and one that leaves it silent, have %d cases", rule.Alert, len(cases))
			}
			for _, c := range cases {
				t.Run(rule.Alert+"/"+c.name, func(t *testing.T) {
					if got := firingAt(t, rule, c.load, c.at); !slices.Equal(got, c.firing) {
						t.Errorf("firing at %v: %q, want %q", c.at, got, c.firing)
					}
				})
			}
		}
	}
	for alert := range alertCases {
		if !seen[alert] {
			t.Errorf("cases for %s, which the PrometheusRule does not have", alert)
		}
	}
}

// TestDashboard reads the component's Grafana dashboard as the dashboard sidecar gets
// it and checks that every query parses as PromQL, Grafana's interval variables
// replaced. Whether each selects served series is the e2e test's (it has a scrape).
func TestDashboard(t *testing.T) {
	model, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "deploy", "components", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboardQueries("dashboard.json", model)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 10 {
		t.Errorf("%d queries, want at least one per panel", len(queries))
	}
	for _, q := range queries {
		if _, err := promQL.ParseExpr(q.expr); err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
		}
		if strings.Contains(q.expr, "$__") {
			t.Errorf("%s: %q keeps a Grafana interval variable", q.where, q.expr)
		}
	}
}

func TestGrafanaDashboards(t *testing.T) {
	manifests := `apiVersion: v1
kind: ConfigMap
metadata:
  name: dash
  namespace: ns
  labels:
    grafana_dashboard: "1"
data:
  d.json: |
    {"title": "d", "panels": [
      {"title": "rate", "targets": [{"expr": "sum(rate(sample_controller_syncs_total{result=\"error\", namespace=\"$namespace\"}[$__rate_interval]))"}]},
      {"title": "row", "panels": [{"title": "nested", "targets": [{"expr": "workqueue_depth{name=\"nope\"}"}]}]}],
     "templating": {"list": [{"name": "namespace", "type": "query", "query": {"query": "label_values(sample_controller_build_info, namespace)"}}]}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: other
data:
  d.json: "not a dashboard, and not labelled as one"
`
	queries, err := grafanaDashboards([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, q := range queries {
		exprs = append(exprs, q.expr)
	}
	want := []string{
		`sum(rate(sample_controller_syncs_total{result="error", namespace="$namespace"}[5m]))`,
		`workqueue_depth{name="nope"}`,
		`sample_controller_build_info`,
	}
	if !slices.Equal(exprs, want) {
		t.Fatalf("queries %q, want %q", exprs, want)
	}
	scrape, err := parseScrape(strings.NewReader("sample_controller_syncs_total{result=\"error\"} 1\nsample_controller_build_info{version=\"v\"} 1\nworkqueue_depth{name=\"foos\"} 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{"namespace": true, "pod": true}
	var failed []string
	for _, q := range queries {
		if problems := checkDashboardQuery(q, scrape, targets); len(problems) > 0 {
			failed = append(failed, q.expr)
		}
	}
	if want := []string{`workqueue_depth{name="nope"}`}; !slices.Equal(failed, want) {
		t.Errorf("failed %q, want only %q", failed, want)
	}
}
