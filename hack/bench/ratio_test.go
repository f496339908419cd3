package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
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
		if !ok || len(p.cases) != 1 || p.cases[0] != (coldStartCase{record: true, events: true}) {
			t.Fatalf("session %+v, want a ratio side with a cold start that waits for the Events", p)
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
