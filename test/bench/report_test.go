package main

import (
	"slices"
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

// pairs is a cell with these figures, of pairs 1, 2, ...
func pairs(values ...float64) *cell {
	c := &cell{pairs: map[int]float64{}}
	for i, v := range values {
		c.pairs[i+1] = v
	}
	return c
}

func TestCell(t *testing.T) {
	for _, tt := range []struct {
		cell *cell
		want string
	}{
		{nil, ""},
		{pairs(), ""},
		{pairs(1.5), "1.50"},
		{pairs(6, 5.5, 8), "6.00 (5.50-8.00)"},
		{pairs(3, 3), "3.00"},
		{pairs(4, 5, 4, 10), "4.50 (4.00-10.0)"},
		{&cell{texts: map[int]string{2: "timed out: 1 of 2 after 5 s"}}, "timed out: 1 of 2 after 5 s"},
		{&cell{pairs: map[int]float64{1: 3, 3: 4}, texts: map[int]string{2: "timed out: 1 of 2 after 5 s"}}, "3.50 (3.00-4.00); pair 2: timed out: 1 of 2 after 5 s"},
		{&cell{texts: map[int]string{2: "n/a", 1: "skipped"}}, "pair 1: skipped; pair 2: n/a"},
	} {
		if got := tt.cell.String(); got != tt.want {
			t.Errorf("%+v = %q, want %q", tt.cell, got, tt.want)
		}
	}
}

// sampleResults is a run of ours, the classic peer and the floor on 100 Foos,
// one pair, with the later cases on 100 Foos; the classic one timed out on 1000.
func sampleResults() *results {
	return &results{Runs: []runResult{
		{
			Column: "ours", Foos: 100, Pair: 1,
			ColdStart: &coldStartResult{
				Foos: 100, Converged: true, Seconds: 0.5, FirstDeploymentSeconds: 0.1, DeploymentsSeconds: 0.3, StatusesSeconds: 0.45,
				PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1}, PerFooTotal: 2, EventWritesPerFoo: 1,
				ControllerCPUSeconds: 0.05, APIServerCPUSeconds: 0.2,
			},
			Steady:    &steadyResult{Foos: 100, PerMinute: 0},
			Memory:    &memoryResult{Foos: 100, Unrelated: 1000, RSSBefore: 30 << 20, RSSAfter: 31 << 20, RSSPer10k: 10 << 20, RSSFileBefore: 12 << 20, RSSPeakBefore: 40 << 20, APIServerRSS: 300 << 20, EtcdRSS: 100 << 20},
			Restart:   &restartResult{Foos: 100, WindowSeconds: 65, ReadySeconds: 0.6},
			Relist:    &relistResult{Foos: 100, APIServerReadySeconds: 4, WindowSeconds: 65, CPUSeconds: 0.3, RSSBefore: 30 << 20, RSSPeak: 45 << 20},
			Reactions: []reactionResult{{Rate: 100, Sent: 1000, Delivered: 1000, Exact: 900, AchievedRate: 100, P50Ms: 12, P99Ms: 40, MaxMs: 55, DeadlineSeconds: 120}},
		},
		{
			Column: "classic", Peer: true, Foos: 100, Pair: 1,
			ColdStart: &coldStartResult{
				Foos: 100, Converged: true, Seconds: 20, FirstDeploymentSeconds: 5, DeploymentsSeconds: 15, StatusesSeconds: 18,
				PerFoo: map[string]float64{"POST deployments": 1, "PUT foos/status": 1, "POST events": 1}, PerFooTotal: 3, EventWritesPerFoo: 1,
			},
			Steady:    &steadyResult{Foos: 100, PerMinute: 300},
			Memory:    &memoryResult{Foos: 100, Unrelated: 1000, RSSBefore: 40 << 20, RSSAfter: 60 << 20, RSSPer10k: 200 << 20},
			Restart:   &restartResult{Foos: 100, WindowSeconds: 65, WritesTotal: 200},
			Reactions: []reactionResult{{Rate: 100, Sent: 1000, Delivered: 0, AchievedRate: 90, DeadlineSeconds: 120}},
		},
		{
			Column: "floor", Floor: true, Foos: 100, Pair: 1,
			ColdStart: &coldStartResult{
				Foos: 100, Converged: true, Seconds: 0.4, DeploymentsSeconds: 0.35, StatusesSeconds: 0.38,
				PerFoo: map[string]float64{"POST deployments": 1, "POST events": 1, "PUT foos/status": 1}, PerFooTotal: 3, EventWritesPerFoo: 1,
				ControllerCPUSeconds: 0.04, APIServerCPUSeconds: 0.16,
			},
			Reactions: []reactionResult{{Rate: 100, Sent: 1000, Delivered: 1000, Exact: 1000, AchievedRate: 100, P50Ms: 10, P99Ms: 25, MaxMs: 30, DeadlineSeconds: 120}},
		},
		{
			Column: "classic", Peer: true, Foos: 1000, Pair: 1,
			ColdStart: &coldStartResult{Foos: 1000, Seconds: 600, DeploymentsDone: 900, StatusesDone: 812},
		},
	}}
}

func TestMarkdownComparison(t *testing.T) {
	got := buildTable(sampleResults()).markdown()
	for _, want := range []string{
		"| case | ours | classic | floor |\n| --- | --: | --: | --: |\n",
		"| cold start, 100 Foos (s) | 0.500 | 20.0 | 0.400 |\n",
		"| cold start, 100 Foos ÷ floor (×) | 1.25 | 50.0 |  |\n",
		"| cold start, 100 Foos: the last Deployment ÷ classic (×) | 0.020 |  |  |\n",
		"| cold start, 100 Foos: the last Deployment after the first (s) | 0.200 | 10.0 | 0.350 |\n",
		"| cold start, 100 Foos: the last Deployment after the first ÷ classic (×) | 0.020 |  |  |\n",
		"| cold start, 100 Foos: the last status ÷ classic (×) | 0.025 |  |  |\n",
		"| cold start, 1000 Foos: the last status (s) |  | n/a (timed out) |  |\n",
		"| requests per Foo, 100 Foos: total | 2.00 | 3.00 | 3.00 |\n",
		"| requests per Foo, 100 Foos: all but Events ÷ classic (×) | 0.500 |  |  |\n",
		"| requests per Foo, 100 Foos: POST events | 0 | 1.00 | 1.00 |\n",
		"| CPU per Foo, 100 Foos: the controller (ms) | 0.500 |  | 0.400 |\n",
		"| CPU per Foo, 100 Foos: the controller ÷ floor (×) | 1.25 |  |  |\n",
		"| CPU per Foo, 100 Foos: the controller ÷ kube-apiserver's (×) | 0.250 |  | 0.250 |\n",
		"| CPU per Foo, 100 Foos: kube-apiserver ÷ floor (×) | 1.25 |  |  |\n",
		"| cold start, 1000 Foos (s) |  | timed out: 812 of 1000 after 600 s |  |\n",
		"| steady state, 100 Foos: writes per minute, Leases apart | 0 | 300 |  |\n",
		"| RSS, 100 Foos + 1000 unrelated Deployments (MiB) | 31.0 | 60.0 |  |\n",
		"| restart, 100 Foos converged: /readyz (s) | 0.600 | no /readyz |  |\n",
		"| reaction, 100 changes/s: delivered within 120 s (%) | 100 | 0 | 100 |\n",
		"| reaction, 100 changes/s: p50 (ms) | 12.0 | none delivered | 10.0 |\n",
		"| reaction, 100 changes/s: p99 ÷ floor (×) | 1.60 |  |  |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q; table:\n%s", want, got)
		}
	}
	if strings.Contains(got, "p99 ÷ classic") {
		t.Errorf("a ratio to a side that delivered none:\n%s", got)
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
		"cold start, 100 Foos ÷ floor (×)",
		"cold start, 100 Foos: the first Deployment (s)",
		"cold start, 100 Foos: the last Deployment (s)",
		"cold start, 100 Foos: the last Deployment after the first (s)",
		"cold start, 100 Foos: the last Deployment after the first ÷ classic (×)",
		"cold start, 100 Foos: the last Deployment ÷ classic (×)",
		"cold start, 100 Foos: the last status (s)",
		"cold start, 100 Foos: the last status ÷ classic (×)",
		"requests per Foo, 100 Foos: all but Events",
		"requests per Foo, 100 Foos: all but Events ÷ classic (×)",
		"requests per Foo, 100 Foos: total",
		"requests per Foo, 100 Foos: POST deployments",
		"requests per Foo, 100 Foos: POST events",
		"requests per Foo, 100 Foos: PUT foos/status",
		"events written per Foo, 100 Foos",
		"CPU per Foo, 100 Foos: the controller (ms)",
		"CPU per Foo, 100 Foos: the controller ÷ floor (×)",
		"CPU per Foo, 100 Foos: the controller ÷ kube-apiserver's (×)",
		"CPU per Foo, 100 Foos: kube-apiserver (ms)",
		"CPU per Foo, 100 Foos: kube-apiserver ÷ floor (×)",
		"cold start, 1000 Foos (s)",
		"cold start, 1000 Foos: the first Deployment (s)",
		"cold start, 1000 Foos: the last Deployment (s)",
		"cold start, 1000 Foos: the last Deployment after the first (s)",
		"cold start, 1000 Foos: the last status (s)",
		"requests per Foo, 1000 Foos: all but Events",
		"requests per Foo, 1000 Foos: total",
		"events written per Foo, 1000 Foos",
		"steady state, 100 Foos: writes per minute, Leases apart",
		"RSS, 100 Foos (MiB)",
		"RSS, 100 Foos: of it mapped from files, the binary mostly (MiB)",
		"RSS, 100 Foos: the peak from the start, the cold start's included (MiB)",
		"RSS, 100 Foos + 1000 unrelated Deployments (MiB)",
		"RSS per 10000 unrelated Deployments (MiB)",
		"RSS of kube-apiserver, 100 Foos (MiB)",
		"RSS of etcd, 100 Foos (MiB)",
		"restart, 100 Foos converged: writes in the steady-state window after it, Leases apart",
		"restart, 100 Foos converged: /readyz (s)",
		"kube-apiserver restarted, 100 Foos converged: writes in the steady-state window after it, Leases apart",
		"kube-apiserver restarted, 100 Foos converged: kube-apiserver ready (s)",
		"kube-apiserver restarted, 100 Foos converged: the controller's CPU in the window (s)",
		"kube-apiserver restarted, 100 Foos converged: the controller's peak RSS ÷ its RSS before (×)",
		"reaction, 100 changes/s: sent per second",
		"reaction, 100 changes/s: delivered within 120 s (%)",
		"reaction, 100 changes/s: p50 (ms)",
		"reaction, 100 changes/s: p99 (ms)",
		"reaction, 100 changes/s: max (ms)",
		"reaction, 100 changes/s: p99 ÷ floor (×)",
		"reaction, 100 changes/s: p50 from the patch's response (ms)",
		"reaction, 100 changes/s: p99 from the patch's response (ms)",
	}
	if !slices.Equal(order, want) {
		t.Errorf("rows =\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
}

// In pairs, a figure is the median of the pairs with their range, and a ratio to the
// floor is taken pair by pair, only where both sides converged, and then summed up the
// same way.
func TestMarkdownPairs(t *testing.T) {
	run := func(column string, pair int, seconds, cpu float64, converged bool) runResult {
		return runResult{Column: column, Floor: column == floorName, Foos: 1000, Pair: pair,
			ColdStart: &coldStartResult{Foos: 1000, Converged: converged, Seconds: seconds, DeploymentsDone: 1000, StatusesDone: 990, ControllerCPUSeconds: cpu}}
	}
	res := &results{Runs: []runResult{
		run("ours", 1, 6, 3, true), run("floor", 1, 5, 2, true),
		run("floor", 2, 5.5, 2.5, true), run("ours", 2, 5.5, 3, true),
		run("ours", 3, 8, 4, true), run("floor", 3, 4.4, 2, true),
		run("floor", 4, 700, 9, false), run("ours", 4, 1, 1, true), // the floor timed out: no ratios
	}}
	got := buildTable(res).markdown()
	for _, want := range []string{
		"| case | ours | floor |\n",
		"| cold start, 1000 Foos (s) | 5.75 (1.00-8.00) | 5.00 (4.40-5.50); pair 4: timed out: 990 of 1000 after 700 s |\n",
		"| cold start, 1000 Foos ÷ floor (×) | 1.20 (1.00-1.82) |  |\n",
		"| CPU per Foo, 1000 Foos: the controller (ms) | 3.00 (1.00-4.00) | 2.00 (2.00-2.50); pair 4: n/a (timed out) |\n",
		"| CPU per Foo, 1000 Foos: the controller ÷ floor (×) | 1.50 (1.20-2.00) |  |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q; table:\n%s", want, got)
		}
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
	if strings.Contains(got, "÷ floor") {
		t.Errorf("a table without the floor has a ratio to it:\n%s", got)
	}
}

func TestMarkdownEscapesPipes(t *testing.T) {
	tab := &table{columns: []string{"ours"}, cells: map[rowKey]map[string]*cell{{name: "x"}: {"ours": {texts: map[int]string{1: "a|b"}}}}}
	if got := tab.markdown(); !strings.Contains(got, `| x | a\|b |`) {
		t.Errorf("pipe not escaped:\n%s", got)
	}
}
