package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

func TestRatioPlan(t *testing.T) {
	cfg, err := parseFlags([]string{"--cases=ratio", "--ratio-pairs=3", "--ratio-foos=100,1000"})
	if err != nil {
		t.Fatal(err)
	}
	ours := controller{Name: ourName, Binary: "/bin/sample-controller", Ours: true}
	var got []string
	var shared *sharedCluster
	for _, p := range plan(cfg, []driver{ours}, ours) {
		side, ok := p.driver.(ratioSide)
		if !ok {
			t.Fatalf("session %+v, want a ratio side", p)
		}
		// Every side: the cold start that waits for the Events, then the reactions at
		// --ratio-rates' default; ours has its RSS read before them, and in the first
		// pair its writes at steady state counted after them, so that no side's
		// reactions come later after its cold start than another's.
		want := []benchCase{coldStartCase{record: true, events: true}}
		if side.Ours != nil {
			want = append(want, rssCase{})
		}
		want = append(want, reactionCase{rate: 25}, reactionCase{rate: 100})
		if side.Ours != nil && side.Pair == 1 {
			want = append(want, steadyCase{})
		}
		if !slices.Equal(p.cases, want) {
			t.Errorf("session %s, %d Foos: cases %+v, want %+v", side.column(), p.foos, p.cases, want)
		}
		if shared == nil {
			shared = p.shared
		}
		if p.shared == nil || p.shared != shared {
			t.Fatalf("session %s is not on the one shared cluster", side.column())
		}
		got = append(got, fmt.Sprintf("%s %d", side.column(), p.foos))
	}
	want := []string{
		"ratio ours 1 100", "ratio limit 1 100", "ratio limit 2 100", "ratio ours 2 100", "ratio ours 3 100", "ratio limit 3 100",
		"ratio ours 1 1000", "ratio limit 1 1000", "ratio limit 2 1000", "ratio ours 2 1000", "ratio ours 3 1000", "ratio limit 3 1000",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sessions %q, want %q", got, want)
	}
}

func TestRatioMarkdown(t *testing.T) {
	ours := &controller{Name: ourName}
	run := func(c *controller, pair, foos int, seconds float64, converged bool) runResult {
		return runResult{Driver: ratioSide{Ours: c, Pair: pair}, Foos: foos, ColdStart: &coldStartResult{Foos: foos, Converged: converged, Seconds: seconds}}
	}
	res := &results{Runs: []runResult{
		run(ours, 1, 1000, 6, true), run(nil, 1, 1000, 4, true),
		run(nil, 2, 1000, 5, true), run(ours, 2, 1000, 5.5, true),
		run(ours, 3, 1000, 8, true), run(nil, 3, 1000, 4, true),
		run(ours, 4, 1000, 1, false), run(nil, 4, 1000, 4, true), // not converged: no pair
	}}
	want := `| cold start, Foos | pair | ours (s) | limit with events, 32 in flight (s) | ours ÷ limit |
| --: | --: | --: | --: | --: |
| 1000 | 1 | 6.00 | 4.00 | 1.50 |
| 1000 | 2 | 5.50 | 5.00 | 1.10 |
| 1000 | 3 | 8.00 | 4.00 | 2.00 |
| 1000 | median of the pairs (range) |  |  | 1.50 (1.10-2.00) |
`
	if got := ratioMarkdown(res, 32); got != want {
		t.Errorf("ratioMarkdown =\n%s\nwant\n%s", got, want)
	}
	if table := buildTable(res); len(table.columns) != 0 {
		t.Errorf("the ratio runs also went into the main table: %q", table.columns)
	}
}

// With --ratio-also, each pair is a triple whose order rotates, and the table has a
// column and a ratio for the variant.
func TestRatioTriples(t *testing.T) {
	cfg, err := parseFlags([]string{"--cases=ratio", "--ratio-pairs=3", "--ratio-foos=100", "--ratio-also=--workers=8 --x"})
	if err != nil {
		t.Fatal(err)
	}
	ours := controller{Name: ourName, Binary: "/bin/sample-controller", Ours: true}
	var got []string
	for _, p := range plan(cfg, []driver{ours}, ours) {
		got = append(got, p.driver.column())
	}
	want := []string{
		"ratio ours 1", "ratio ours --workers=8 --x 1", "ratio limit 1",
		"ratio ours --workers=8 --x 2", "ratio limit 2", "ratio ours 2",
		"ratio limit 3", "ratio ours 3", "ratio ours --workers=8 --x 3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sessions %q, want %q", got, want)
	}

	variant := []string{"--workers=8"}
	run := func(c *controller, also []string, pair int, seconds float64) runResult {
		return runResult{Driver: ratioSide{Ours: c, Also: also, Pair: pair}, Foos: 1000, ColdStart: &coldStartResult{Foos: 1000, Converged: true, Seconds: seconds}}
	}
	res := &results{Runs: []runResult{
		run(&ours, nil, 1, 6), run(&ours, variant, 1, 7), run(nil, nil, 1, 4),
		run(&ours, variant, 2, 6), run(nil, nil, 2, 5), run(&ours, nil, 2, 5.5),
		run(nil, nil, 3, 4), run(&ours, nil, 3, 8), // the variant's third run failed: no row
	}}
	wantTable := `| cold start, Foos | pair | ours (s) | ours --workers=8 (s) | limit with events, 32 in flight (s) | ours ÷ limit | ours --workers=8 ÷ limit |
| --: | --: | --: | --: | --: | --: | --: |
| 1000 | 1 | 6.00 | 7.00 | 4.00 | 1.50 | 1.75 |
| 1000 | 2 | 5.50 | 6.00 | 5.00 | 1.10 | 1.20 |
| 1000 | median of the pairs (range) |  |  |  | 1.30 (1.10-1.50) | 1.48 (1.20-1.75) |
`
	if got := ratioMarkdown(res, 32); got != wantTable {
		t.Errorf("ratioMarkdown =\n%s\nwant\n%s", got, wantTable)
	}
}

// With --ratio-watching-limit, the limit that first starts informers joins each pair
// and reacts to the Foos' watch events; the first table compares it with the limit as
// it does our sides, and the second gives its p99 beside ours, against the plain
// limit's, and ours against it.
func TestRatioWatchingLimit(t *testing.T) {
	cfg, err := parseFlags([]string{"--cases=ratio", "--ratio-pairs=2", "--ratio-foos=100", "--ratio-watching-limit"})
	if err != nil {
		t.Fatal(err)
	}
	ours := controller{Name: ourName, Binary: "/bin/sample-controller", Ours: true}
	var got []string
	for _, p := range plan(cfg, []driver{ours}, ours) {
		side := p.driver.(ratioSide)
		got = append(got, side.column())
		if !slices.ContainsFunc(p.cases, func(c benchCase) bool { _, ok := c.(reactionCase); return ok }) {
			t.Errorf("session %s: cases %+v, want the reactions too", side.column(), p.cases)
		}
	}
	want := []string{"ratio ours 1", "ratio limit watching 1", "ratio limit 1", "ratio limit watching 2", "ratio limit 2", "ratio ours 2"}
	if !slices.Equal(got, want) {
		t.Errorf("sessions %q, want %q", got, want)
	}

	run := func(side ratioSide, seconds float64, p99s ...float64) runResult {
		r := runResult{Driver: side, Foos: 1000, ColdStart: &coldStartResult{Foos: 1000, Converged: true, Seconds: seconds}}
		if side.Ours != nil {
			r.RSS = &rssResult{Bytes: 100 << 20}
		}
		for i, p99 := range p99s {
			r.Reactions = append(r.Reactions, reactionResult{Rate: []int{25}[i], Sent: 10, Delivered: 10, P99Ms: p99})
		}
		return r
	}
	res := &results{Runs: []runResult{
		run(ratioSide{Ours: &ours, Pair: 1}, 6, 30), run(ratioSide{Watching: true, Pair: 1}, 5, 22), run(ratioSide{Pair: 1}, 4, 20),
		run(ratioSide{Pair: 2}, 5, 25), run(ratioSide{Watching: true, Pair: 2}, 5.5, 30), run(ratioSide{Ours: &ours, Pair: 2}, 5.5, 25),
	}}
	wantTable := `| cold start, Foos | pair | ours (s) | limit watching (s) | limit with events, 32 in flight (s) | ours ÷ limit | limit watching ÷ limit | ours ÷ limit watching |
| --: | --: | --: | --: | --: | --: | --: | --: |
| 1000 | 1 | 6.00 | 5.00 | 4.00 | 1.50 | 1.25 | 1.20 |
| 1000 | 2 | 5.50 | 5.50 | 5.00 | 1.10 | 1.10 | 1.00 |
| 1000 | median of the pairs (range) |  |  |  | 1.30 (1.10-1.50) | 1.18 (1.10-1.25) | 1.10 (1.00-1.20) |
`
	if got := ratioMarkdown(res, 32); got != wantTable {
		t.Errorf("ratioMarkdown =\n%s\nwant\n%s", got, wantTable)
	}
	// The plain limit is what both p99s are divided by, whichever ran last in a pair.
	wantTargets := `| at the limit, Foos | pair | ours: RSS (MiB) | CPU used (s) | writes per minute at steady state | p99 at 25 changes/s (ms): ours | limit | ÷ | limit watching | limit watching ÷ limit | ours ÷ limit watching |
| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |
| 1000 | 1 | 100 |  |  | 30.0 | 20.0 | 1.50 | 22.0 | 1.10 | 1.36 |
| 1000 | 2 | 100 |  |  | 25.0 | 25.0 | 1.00 | 30.0 | 1.20 | 0.83 |
| 1000 | median of the pairs (range) |  |  |  |  |  | 1.25 (1.00-1.50) |  | 1.15 (1.10-1.20) | 1.10 (0.83-1.36) |
`
	if got := ratioTargetsMarkdown(res); got != wantTargets {
		t.Errorf("ratioTargetsMarkdown =\n%s\nwant\n%s", got, wantTargets)
	}

	// A pair in which one side or another has no reaction keeps its columns.
	for _, missing := range []int{0, 1, 2} {
		pair := []runResult{run(ratioSide{Ours: &ours, Pair: 3}, 6, 30), run(ratioSide{Watching: true, Pair: 3}, 5, 22), run(ratioSide{Pair: 3}, 4, 20)}
		pair[missing].Reactions = nil
		withMissing := &results{Runs: append(slices.Clone(res.Runs), pair...)}
		requireAligned(t, ratioTargetsMarkdown(withMissing))
	}
}

// requireAligned fails unless every line of table has as many cells as its header.
func requireAligned(t *testing.T, table string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	for _, line := range lines {
		if got, want := strings.Count(line, "|"), strings.Count(lines[0], "|"); got != want {
			t.Errorf("a line of %d cells under a header of %d:\n%s\nin\n%s", got-1, want-1, line, table)
		}
	}
}

// A variant's NAME=value words go to its environment, the rest are its flags.
func TestSplitAlso(t *testing.T) {
	flags, env := splitAlso([]string{"--workers=8", "GOGC=100", "-v=2", "--x", "GODEBUG=gctrace=1", "=odd"})
	if want := []string{"--workers=8", "-v=2", "--x", "=odd"}; !slices.Equal(flags, want) {
		t.Errorf("flags %q, want %q", flags, want)
	}
	if want := []string{"GOGC=100", "GODEBUG=gctrace=1"}; !slices.Equal(env, want) {
		t.Errorf("environment %q, want %q", env, want)
	}
}

func TestSessionName(t *testing.T) {
	for description, want := range map[string]string{
		"ratio ours 1-1000":              "ratio-ours-1-1000",
		"ratio ours --workers=8 2-10000": "ratio-ours-workers-8-2-10000",
		"tenure elected 1-10000":         "tenure-elected-1-10000",
		"limit+events 1000":              "limit-events-1000",
	} {
		if got := sessionName(description); got != want {
			t.Errorf("sessionName(%q) = %q, want %q", description, got, want)
		}
	}
	// Too long: the ends that tell two runs apart must survive.
	long := "ratio ours --workers=8 --kube-api-qps=200 --kube-api-burst=400 "
	a, b := sessionName(long+"1-1000"), sessionName(long+"1-10000")
	if a == b || len(a) > 63 || len(b) > 63 || !strings.HasPrefix(a, "ratio-ours-workers-8-kube-api-qps-200") {
		t.Errorf("sessionName of two long descriptions = %q and %q, want two names of at most 63 characters", a, b)
	}
}

// The second table: our default side against the limit, pair by pair, with its RSS,
// its steady-state writes where counted and each rate's p99, and the ratios' medians.
func TestRatioTargetsMarkdown(t *testing.T) {
	ours := &controller{Name: ourName}
	reactions := func(p99s ...float64) []reactionResult {
		var out []reactionResult
		for i, p99 := range p99s {
			out = append(out, reactionResult{Rate: []int{25, 100}[i], Sent: 100, Delivered: 100, P99Ms: p99})
		}
		return out
	}
	run := func(c *controller, pair int, p99s ...float64) runResult {
		r := runResult{Driver: ratioSide{Ours: c, Pair: pair}, Foos: 1000,
			ColdStart: &coldStartResult{Foos: 1000, Converged: true, Seconds: 5}, Reactions: reactions(p99s...)}
		if c != nil {
			r.RSS = &rssResult{Foos: 1000, Bytes: 50 << 20, CPU: ptr.To(4.5)}
			if pair == 1 {
				r.Steady = &steadyResult{Foos: 1000, PerMinute: 0}
			}
		}
		return r
	}
	lagging := run(ours, 3, 30, 1200)
	lagging.Reactions[1].Delivered = 90
	res := &results{Runs: []runResult{
		run(ours, 1, 20, 1000), run(nil, 1, 10, 800),
		run(nil, 2, 20, 1000), run(ours, 2, 22, 1000),
		lagging, run(nil, 3, 30, 1000),
		// A variant: only its RSS is in this table, in pair 1, where it ran.
		{Driver: ratioSide{Ours: ours, Also: []string{"GOGC=100"}, Pair: 1}, Foos: 1000,
			ColdStart: &coldStartResult{Foos: 1000, Converged: true}, RSS: &rssResult{Bytes: 60 << 20}, Reactions: reactions(1, 1)},
	}}
	want := `| at the limit, Foos | pair | ours: RSS (MiB) | CPU used (s) | ours GOGC=100: RSS (MiB) | CPU used (s) | writes per minute at steady state | p99 at 25 changes/s (ms): ours | limit | ÷ | p99 at 100 changes/s (ms): ours | limit | ÷ |
| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |
| 1000 | 1 | 50.0 | 4.50 | 60.0 |  | 0 | 20.0 | 10.0 | 2.00 | 1000 | 800 | 1.25 |
| 1000 | 2 | 50.0 | 4.50 |  |  |  | 22.0 | 20.0 | 1.10 | 1000 | 1000 | 1.00 |
| 1000 | 3 | 50.0 | 4.50 |  |  |  | 30.0 | 30.0 | 1.00 | 1200 (90 of 100) | 1000 | 1.20 |
| 1000 | median of the pairs (range) |  |  |  |  |  |  |  | 1.10 (1.00-2.00) |  |  | 1.20 (1.00-1.25) |
`
	if got := ratioTargetsMarkdown(res); got != want {
		t.Errorf("ratioTargetsMarkdown =\n%s\nwant\n%s", got, want)
	}
	if got := ratioTargetsMarkdown(&results{}); got != "" {
		t.Errorf("ratioTargetsMarkdown of no runs = %q, want nothing", got)
	}
}
