package main

import (
	"strings"
	"testing"
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

// sampleResults is a run of ours and a classic controller on 100 Foos; the classic
// one timed out on 1000.
func sampleResults() *results {
	res := &results{Settings: settings{SteadyFoos: 100, UnrelatedDeployments: 1000, Rates: []int{100}, ReactionDeadlineSecs: 120}}
	heap := 6.0 * (1 << 20)
	res.Controllers = []controllerResults{
		{
			Name: "ours",
			ColdStarts: []coldStart{{
				Foos: 100, Converged: true, Seconds: 0.5,
				PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1}, PerFooTotal: 2,
				EventWritesPerFoo: 1,
			}},
			Steady:    &steady{PerMinute: 0},
			Memory:    &memory{RSSBefore: 30 << 20, RSSAfter: 31 << 20, RSSPer10k: 10 << 20, HeapBefore: &heap, HeapAfter: &heap, HeapPer10k: new(float64)},
			Reactions: []reaction{{Rate: 100, Sent: 1000, Delivered: 1000, AchievedRate: 100, P50Ms: 12, P99Ms: 40, MaxMs: 55}},
		},
		{
			Name: "classic",
			ColdStarts: []coldStart{
				{Foos: 100, Converged: true, Seconds: 20, PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1, "POST events": 1}, PerFooTotal: 3, EventWritesPerFoo: 1},
				{Foos: 1000, Seconds: 600, DeploymentsDone: 900, StatusesDone: 812},
			},
			Steady:    &steady{PerMinute: 300},
			Memory:    &memory{RSSBefore: 40 << 20, RSSAfter: 60 << 20, RSSPer10k: 200 << 20},
			Reactions: []reaction{{Rate: 100, Sent: 1000, Delivered: 0, AchievedRate: 90}},
		},
	}
	res.Limit = []coldStart{{Foos: 100, Converged: true, Seconds: 0.25, PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1}, PerFooTotal: 2}}
	res.LimitReactions = []reaction{{Rate: 100, Sent: 1000, Delivered: 1000, AchievedRate: 100, P50Ms: 8, P99Ms: 20, MaxMs: 30}}
	return res
}

func TestRenderMarkdownComparison(t *testing.T) {
	got := renderMarkdown(sampleResults(), buildRows(sampleResults()))
	for _, want := range []string{
		"| case | ours | classic | classic ÷ ours | limit |\n| --- | --: | --: | --: | --: |\n",
		"| cold start, 100 Foos (s) | 0.500 | 20.0 | 40.0× | 0.250 |\n",
		"| cold start, 100 Foos ÷ limit (×) | 2.00 | 80.0 | 40.0× |  |\n",
		"| requests per Foo, 100 Foos: total | 2.00 | 3.00 | 1.50× | 2.00 |\n",
		"| requests per Foo, 100 Foos: POST events | 0 | 1.00 | ∞ | 0 |\n",
		"| cold start, 1000 Foos (s) |  | timed out: 812 of 1000 after 600 s |  |  |\n",
		"| requests per Foo, 1000 Foos: total |  | n/a (timed out) |  |  |\n",
		"| steady state, 100 Foos: writes per minute | 0 | 300 | ∞ |  |\n",
		"| RSS per 10000 unrelated Deployments (MiB) | 10.0 | 200 | 20.0× |  |\n",
		"| heap in use, 100 Foos (MiB) | 6.00 | n/a |  |  |\n",
		"| reaction, 100 changes/s: sent per second | 100 | 90.0 | 0.900× | 100 |\n",
		"| reaction, 100 changes/s: delivered within 120 s | 1000 of 1000 | 0 of 1000 | 0× | 1000 of 1000 |\n",
		"| reaction, 100 changes/s: p50 (ms) | 12.0 | none delivered |  | 8.00 |\n",
		"| reaction, 100 changes/s: p99 (ms) | 40.0 | none delivered |  | 20.0 |\n",
		"| reaction, 100 changes/s: p99 ÷ limit (×) | 2.00 |  |  |  |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q; table:\n%s", want, got)
		}
	}
}

func TestRenderMarkdownOneController(t *testing.T) {
	res := sampleResults()
	res.Controllers = res.Controllers[:1]
	res.Limit, res.LimitReactions = nil, nil
	got := renderMarkdown(res, buildRows(res))
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

func TestRenderMarkdownEscapesPipes(t *testing.T) {
	res := &results{Controllers: []controllerResults{{Name: "ours"}}}
	rows := []row{{name: "x", cells: []cell{text("a|b")}}}
	if got := renderMarkdown(res, rows); !strings.Contains(got, `| x | a\|b |`) {
		t.Errorf("pipe not escaped:\n%s", got)
	}
}
