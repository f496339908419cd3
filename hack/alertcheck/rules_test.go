package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// scrape is a small /metrics in the shape the controller serves.
const scrape = `# TYPE sample_controller_syncs_total counter
sample_controller_syncs_total{result="success"} 3
sample_controller_syncs_total{result="error"} 0
# TYPE sample_controller_foos gauge
sample_controller_foos{ready="True"} 1
sample_controller_foos{ready="False"} 0
# TYPE workqueue_depth gauge
workqueue_depth{name="foos"} 0
# TYPE leader_election_master_status gauge
leader_election_master_status{name="sample-controller"} 1
# TYPE sample_controller_sync_duration_seconds histogram
sample_controller_sync_duration_seconds_bucket{le="0.5"} 2
sample_controller_sync_duration_seconds_bucket{le="+Inf"} 3
sample_controller_sync_duration_seconds_sum 0.7
sample_controller_sync_duration_seconds_count 3
`

func newRule(alert, expr string) rulefmt.Rule {
	return rulefmt.Rule{
		Alert:       alert,
		Expr:        expr,
		For:         model.Duration(5 * time.Minute),
		Labels:      map[string]string{"severity": "warning"},
		Annotations: map[string]string{"summary": "s", "description": "d"},
	}
}

func TestCheckRule(t *testing.T) {
	all, err := parseScrape(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{"namespace": true, "pod": true, "job": true}
	withoutFor := newRule("A", `sample_controller_foos`)
	withoutFor.For = 0
	badSeverity := newRule("A", `sample_controller_foos`)
	badSeverity.Labels["severity"] = "page"
	delete(badSeverity.Annotations, "description")

	tests := []struct {
		name string
		rule rulefmt.Rule
		want []string // substrings of the problems, in order; none for a good rule
	}{
		{"accepts selectors the scrape has", newRule("A",
			`sum by (namespace) (rate(sample_controller_syncs_total{result="error"}[5m])) / sum by (namespace) (rate(sample_controller_syncs_total[5m])) > 0.05`), nil},
		{"accepts a label value whose series is 0", newRule("A", `max(sample_controller_foos{ready="False"}) > 0`), nil},
		{"accepts matchers and grouping on labels Prometheus adds", newRule("A",
			`(workqueue_depth{name="foos", job="x"} > 100) and on (namespace, pod) (leader_election_master_status{name="sample-controller"} == 1)`), nil},
		{"finds histograms under their series names", newRule("A",
			`histogram_quantile(0.99, sum by (le) (rate(sample_controller_sync_duration_seconds_bucket[5m]))) > 1`), nil},
		{"accepts regular expressions that match", newRule("A", `sample_controller_syncs_total{result=~"err.*|rejected"}`), nil},
		{"accepts absent() of a series that exists", newRule("A", `absent(leader_election_master_status{name="sample-controller"})`), nil},

		{"reports a metric the scrape lacks", newRule("A", `rate(sample_controller_sync_total[5m]) > 0`),
			[]string{"the scrape has no metric sample_controller_sync_total"}},
		{"reports a label value no series has", newRule("A", `rate(sample_controller_syncs_total{result="errors"}[5m]) > 0`),
			[]string{`no series of sample_controller_syncs_total has result="errors" (it has result: [error success])`}},
		{"reports a label the metric does not have", newRule("A", `workqueue_depth{queue="foos"} > 100`),
			[]string{`no series of workqueue_depth has queue="foos"`}},
		{"reports a regular expression that matches nothing", newRule("A", `sample_controller_syncs_total{result=~"fail.*"}`),
			[]string{`has result=~"fail.*"`}},
		{"reports a value of another metric's label", newRule("A", `leader_election_master_status{name="foos"} < 1`),
			[]string{`no series of leader_election_master_status has name="foos"`}},
		{"reports grouping by a label no series has", newRule("A", `sum by (queue) (workqueue_depth) > 0`),
			[]string{"by (workqueue_depth): no series it selects has the label queue"}},
		{"reports matching on a label no series has", newRule("A", `workqueue_depth and on (lease) leader_election_master_status`),
			[]string{"no series it selects has the label lease"}},
		{"wants for", withoutFor, []string{"no for"}},
		{"wants a known severity and both annotations", badSeverity,
			[]string{`severity label "page"`, "no description annotation"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := checkRule(tc.rule, all, targets)
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to say %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPrometheusRules(t *testing.T) {
	const rule = `kind: PrometheusRule
metadata: {name: r, namespace: ns}
spec:
  groups:
  - name: g
    rules:
    - alert: A
      expr: %s
`
	tests := []struct {
		name    string
		stream  string
		want    int // rules found
		wantErr string
	}{
		{"documents, skipping other kinds", "kind: Service\n---\n" + strings.Replace(rule, "%s", "up == 0", 1), 1, ""},
		{"a List, as kubectl -o yaml prints several objects", "kind: List\nitems:\n- " +
			strings.ReplaceAll(strings.Replace(rule, "%s", "up == 0", 1), "\n", "\n  "), 1, ""},
		{"an expression Prometheus would refuse", strings.Replace(rule, "%s", "rate(up) > 0", 1), 0, "expected type range vector"},
		{"a field Prometheus does not know", strings.Replace(rule, "%s", "up\n      severity: page", 1), 0, "field severity not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			groups, err := prometheusRules([]byte(tc.stream))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range groups {
				n += len(g.rules)
			}
			if n != tc.want {
				t.Errorf("%d rules, want %d", n, tc.want)
			}
		})
	}
}

// TestRun checks the command's whole path on files: a good rule passes, a broken one
// is counted.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "metrics.txt")
	if err := os.WriteFile(metrics, []byte(scrape), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := func(expr string) string {
		path := filepath.Join(dir, "rules.yaml")
		doc := `kind: PrometheusRule
metadata: {name: r, namespace: ns}
spec:
  groups:
  - name: g
    rules:
    - alert: A
      expr: ` + expr + `
      for: 5m
      labels: {severity: warning}
      annotations: {summary: s, description: d}
`
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var out strings.Builder
	if n, err := run(manifest(`sample_controller_foos{ready="False"} > 0`), []string{metrics}, defaultTargetLabels, &out); err != nil || n != 0 {
		t.Errorf("a good rule: %d problems, err %v\n%s", n, err, &out)
	}
	out.Reset()
	if n, err := run(manifest(`sample_controller_foos{ready="false"} > 0`), []string{metrics}, defaultTargetLabels, &out); err != nil || n != 1 {
		t.Errorf("a misspelled label value: %d problems, err %v, want 1\n%s", n, err, &out)
	}
	if !strings.Contains(out.String(), "FAIL PrometheusRule ns/r, group g: alert A") {
		t.Errorf("the report does not name the failing rule:\n%s", &out)
	}

	// An alert for one mode selects series that only that mode serves: a scrape of
	// each mode together serve them all.
	sharded := filepath.Join(dir, "sharded.txt")
	if err := os.WriteFile(sharded, []byte("# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"foos-slot-3\"} 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	slotQueues := manifest(`sum by (pod) (workqueue_depth{name=~"foos-slot-[0-9]+"}) > 100`)
	out.Reset()
	if n, err := run(slotQueues, []string{metrics}, defaultTargetLabels, &out); err != nil || n != 1 {
		t.Errorf("a sharded-mode selector against a single-leader scrape: %d problems, err %v, want 1\n%s", n, err, &out)
	}
	out.Reset()
	if n, err := run(slotQueues, []string{metrics, sharded}, defaultTargetLabels, &out); err != nil || n != 0 {
		t.Errorf("a sharded-mode selector against scrapes of both modes: %d problems, err %v, want 0\n%s", n, err, &out)
	}
}
