package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

func TestFormatNumber(t *testing.T) {
	tests := map[float64]string{0: "0", 0.0123: "0.012", 1.234: "1.23", 12.34: "12.3", 1234.6: "1235", -2.5: "-2.50"}
	for v, want := range tests {
		if got := formatNumber(v); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		name string
		a, b cell
		want string
	}{
		{"both figures", num(300), num(1.5), "200×"},
		{"a missing figure", num(3), cell{}, ""},
		{"a text", text("timed out: 1 of 2 after 5 s"), num(1), ""},
		{"against zero", num(30), num(0), "∞"},
		{"both zero", num(0), num(0), "="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratio(tt.a, tt.b); got != tt.want {
				t.Errorf("ratio = %q, want %q", got, tt.want)
			}
		})
	}
}

// sampleResults is a run of ours, a classic controller and both limits on 100 Foos,
// with the later cases on 100 Foos; the classic one timed out on 1000.
func sampleResults() *results {
	heap := 6.0 * (1 << 20)
	return &results{Runs: []runResult{
		{
			Column: "limit", Limit: true, Foos: 100,
			ColdStart: &coldStartResult{Foos: 100, Converged: true, Seconds: 0.25, PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1}, PerFooTotal: 2},
			Reactions: []reactionResult{{Rate: 100, Sent: 1000, Delivered: 1000, AchievedRate: 100, P50Ms: 8, P99Ms: 20, MaxMs: 30, DeadlineSeconds: 120}},
		},
		{
			Column: "limit with events", Limit: true, Foos: 100,
			ColdStart: &coldStartResult{
				Foos: 100, Converged: true, Seconds: 0.5,
				PerFoo: map[string]float64{"POST deployments": 1, "POST events": 1, "PUT foos/status": 1}, PerFooTotal: 3, EventWritesPerFoo: 1,
			},
		},
		{
			Column: "ours", Foos: 100,
			ColdStart: &coldStartResult{
				Foos: 100, Converged: true, Seconds: 0.5,
				PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1}, PerFooTotal: 2, EventWritesPerFoo: 1,
			},
			Steady:    &steadyResult{Foos: 100, PerMinute: 0},
			Memory:    &memoryResult{Foos: 100, Unrelated: 1000, RSSBefore: 30 << 20, RSSAfter: 31 << 20, RSSPer10k: 10 << 20, HeapBefore: &heap, HeapAfter: &heap, HeapPer10k: new(float64)},
			Reactions: []reactionResult{{Rate: 100, Sent: 1000, Delivered: 1000, AchievedRate: 100, P50Ms: 12, P99Ms: 40, MaxMs: 55, DeadlineSeconds: 120}},
		},
		{
			Column: "classic", Foos: 100,
			ColdStart: &coldStartResult{
				Foos: 100, Converged: true, Seconds: 20,
				PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1, "POST events": 1}, PerFooTotal: 3, EventWritesPerFoo: 1,
			},
			Steady:    &steadyResult{Foos: 100, PerMinute: 300},
			Memory:    &memoryResult{Foos: 100, Unrelated: 1000, RSSBefore: 40 << 20, RSSAfter: 60 << 20, RSSPer10k: 200 << 20},
			Reactions: []reactionResult{{Rate: 100, Sent: 1000, Delivered: 0, AchievedRate: 90, DeadlineSeconds: 120}},
		},
		{
			Column: "classic", Foos: 1000,
			ColdStart: &coldStartResult{Foos: 1000, Seconds: 600, DeploymentsDone: 900, StatusesDone: 812},
		},
	}}
}

func TestMarkdownComparison(t *testing.T) {
	got := buildTable(sampleResults()).markdown()
	for _, want := range []string{
		"| case | ours | classic | classic ÷ ours | limit | limit with events |\n| --- | --: | --: | --: | --: | --: |\n",
		"| cold start, 100 Foos (s) | 0.500 | 20.0 | 40.0× | 0.250 | 0.500 |\n",
		"| cold start, 100 Foos ÷ limit (×) | 2.00 | 80.0 | 40.0× |  |  |\n",
		"| cold start, 100 Foos ÷ limit with events (×) | 1.00 | 40.0 | 40.0× |  |  |\n",
		"| requests per Foo, 100 Foos: total | 2.00 | 3.00 | 1.50× | 2.00 | 3.00 |\n",
		"| requests per Foo, 100 Foos: POST events | 0 | 1.00 | ∞ | 0 | 1.00 |\n",
		"| events written per Foo, 100 Foos | 1.00 | 1.00 | 1.00× | 0 | 1.00 |\n",
		"| cold start, 1000 Foos (s) |  | timed out: 812 of 1000 after 600 s |  |  |  |\n",
		"| requests per Foo, 1000 Foos: total |  | n/a (timed out) |  |  |  |\n",
		"| steady state, 100 Foos: writes per minute | 0 | 300 | ∞ |  |  |\n",
		"| RSS per 10000 unrelated Deployments (MiB) | 10.0 | 200 | 20.0× |  |  |\n",
		"| heap in use, 100 Foos (MiB) | 6.00 | n/a |  |  |  |\n",
		"| reaction, 100 changes/s: sent per second | 100 | 90.0 | 0.900× | 100 |  |\n",
		"| reaction, 100 changes/s: delivered within 120 s | 1000 of 1000 | 0 of 1000 | 0× | 1000 of 1000 |  |\n",
		"| reaction, 100 changes/s: p50 (ms) | 12.0 | none delivered |  | 8.00 |  |\n",
		"| reaction, 100 changes/s: p99 ÷ limit (×) | 2.00 |  |  |  |  |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q; table:\n%s", want, got)
		}
	}

	// The rows follow the cases, by size or rate, in the order of each case's figures.
	var order []string
	for _, line := range strings.Split(got, "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |"); ok {
			order = append(order, name)
		}
	}
	want := []string{
		"cold start, 100 Foos (s)",
		"cold start, 100 Foos ÷ limit (×)",
		"cold start, 100 Foos ÷ limit with events (×)",
		"requests per Foo, 100 Foos: total",
		"requests per Foo, 100 Foos: POST deployments",
		"requests per Foo, 100 Foos: POST events",
		"requests per Foo, 100 Foos: PUT foos/status",
		"events written per Foo, 100 Foos",
		"cold start, 1000 Foos (s)",
		"requests per Foo, 1000 Foos: total",
		"events written per Foo, 1000 Foos",
		"steady state, 100 Foos: writes per minute",
		"RSS, 100 Foos (MiB)",
		"RSS, 100 Foos + 1000 unrelated Deployments (MiB)",
		"RSS per 10000 unrelated Deployments (MiB)",
		"heap in use, 100 Foos (MiB)",
		"heap in use, 100 Foos + 1000 unrelated Deployments (MiB)",
		"heap in use per 10000 unrelated Deployments (MiB)",
		"reaction, 100 changes/s: sent per second",
		"reaction, 100 changes/s: delivered within 120 s",
		"reaction, 100 changes/s: delivered with their own value (not superseded)",
		"reaction, 100 changes/s: p50 (ms)",
		"reaction, 100 changes/s: p99 (ms)",
		"reaction, 100 changes/s: max (ms)",
		"reaction, 100 changes/s: p99 ÷ limit (×)",
		"reaction, 100 changes/s: p50 from the patch's response (ms)",
		"reaction, 100 changes/s: p99 from the patch's response (ms)",
	}
	if !slices.Equal(order, want) {
		t.Errorf("rows =\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
}

func TestMarkdownOneController(t *testing.T) {
	res := sampleResults()
	res.Runs = slices.DeleteFunc(res.Runs, func(r runResult) bool { return r.Column != "ours" })
	got := buildTable(res).markdown()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if lines[0] != "| case | ours |" || lines[1] != "| --- | --: |" {
		t.Errorf("header = %q, want only the case and ours", lines[:2])
	}
	for _, l := range lines {
		if strings.Count(l, "|") != 3 {
			t.Errorf("line %q does not have two columns", l)
		}
	}
	if strings.Contains(got, "÷ limit") {
		t.Errorf("a table without a limit has a ratio to it:\n%s", got)
	}
}

func TestMarkdownSkipped(t *testing.T) {
	res := &results{Runs: []runResult{{
		Column: "ours", Foos: 100, Skipped: "cold start of 100 Foos did not converge",
		ColdStart: &coldStartResult{Foos: 100, Seconds: 600, DeploymentsDone: 3, StatusesDone: 2},
	}}}
	got := buildTable(res).markdown()
	if want := "| steady state, memory and reaction, 100 Foos | skipped: cold start of 100 Foos did not converge |\n"; !strings.HasSuffix(got, want) {
		t.Errorf("table does not end with %q:\n%s", want, got)
	}
}

func TestMarkdownEscapesPipes(t *testing.T) {
	tab := &table{columns: []string{"ours"}, cells: map[rowKey]map[string]cell{{name: "x"}: {"ours": text("a|b")}}}
	if got := tab.markdown(); !strings.Contains(got, `| x | a\|b |`) {
		t.Errorf("pipe not escaped:\n%s", got)
	}
}

// TestTenureMarkdown checks the tenure table: one row per complete pair, each variant's
// figures and the elected one's ratio, and the median and range of the ratios.
func TestTenureMarkdown(t *testing.T) {
	run := func(elected bool, pair int, coldStart, p99 float64) runResult {
		return runResult{
			Driver: tenureVariant{Elected: elected, Pair: pair}, Foos: 10000,
			ColdStart: &coldStartResult{Foos: 10000, Converged: true, Seconds: coldStart},
			Reactions: []reactionResult{{Rate: 100, P99Ms: p99}},
		}
	}
	res := &results{Runs: []runResult{
		run(false, 1, 40, 100), run(true, 1, 44, 100),
		run(true, 2, 40, 90), run(false, 2, 40, 100),
		run(false, 3, 50, 100), run(true, 3, 45, 110),
		run(false, 4, 50, 100), // its pair never ran
	}}
	got := tenureMarkdown(res)
	for _, want := range []string{
		"| 1 | 40.0 | 44.0 | 1.10 | 100 | 100 | 1.00 |",
		"| 2 | 40.0 | 40.0 | 1.00 | 100 | 90.0 | 0.90 |",
		"| 3 | 50.0 | 45.0 | 0.90 | 100 | 110 | 1.10 |",
		"| median of the pairs' ratios (range) |  |  | 1.00 (0.90-1.10) |  |  | 1.00 (0.90-1.10) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| 4 |") {
		t.Errorf("the table shows a pair without its elected session:\n%s", got)
	}
}

func TestSyncsPerFoo(t *testing.T) {
	m, err := localcluster.ParseMetrics(strings.NewReader(`# TYPE sample_controller_syncs_total counter
sample_controller_syncs_total{result="success"} 2000
sample_controller_syncs_total{result="stale"} 500
`))
	if err != nil {
		t.Fatal(err)
	}
	got := perFooByLabel(m, syncsFamily, "result", 1000)
	if want := map[string]float64{"success": 2, "stale": 0.5}; !maps.Equal(got, want) {
		t.Errorf("perFooByLabel = %v, want %v", got, want)
	}
	if got, want := syncsText(got), "; syncs per Foo: stale 0.50, success 2.00"; got != want {
		t.Errorf("syncsText = %q, want %q", got, want)
	}
	if got := perFooByLabel(m, "no_such_family", "result", 1000); got != nil || syncsText(got) != "" {
		t.Errorf("a missing family gave %v, %q; want nil and no text", got, syncsText(got))
	}
}
