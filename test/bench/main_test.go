package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.foos, []int{100, 1000, 5000}) || !slices.Equal(cfg.rates, []int{25, 100, 1000}) {
		t.Errorf("foos %v, rates %v", cfg.foos, cfg.rates)
	}
	if cfg.steadyFoos != 1000 || cfg.unrelated != 10000 || cfg.workers != 32 || cfg.steadyWindow != 65*time.Second {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, c := range allCases {
		if cfg.cases[c] != (c != caseTenure) {
			t.Errorf("case %s on by default: %v", c, cfg.cases[c])
		}
	}
	if cfg.flags["steady-window"] != "1m5s" || cfg.flags["foos"] != "100,1000,5000" {
		t.Errorf("flags for results.json: %v", cfg.flags)
	}

	cfg, err = parseFlags([]string{"--controller-binary=/x/sample-controller-classic"})
	if err != nil || cfg.controllerName != "sample-controller-classic" {
		t.Errorf("controllerName = %q, %v", cfg.controllerName, err)
	}
	for _, bad := range [][]string{{"--foos=0"}, {"--rates=x"}, {"--sharded-replicas=0"}, {"--shard-slots=0"}, {"--cases=nope"}, {"--tenure-pairs=0"}, {"--ratio-pairs=0"}, {"--ratio-foos=0"}, {"--workers=0"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", bad)
		}
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		other bool
		want  []string
	}{{
		name: "every case: limits first, the later cases on the cluster of --steady-foos",
		args: []string{"--foos=100,1000", "--rates=25,100", "--sharded-foos=300", "--sharded-replicas=3", "--ratio-foos=1000", "--ratio-pairs=2"},
		want: []string{
			"limit 100: cold start",
			"limit with events 100: cold start",
			"ours 100: cold start",
			"limit 1000: cold start, reaction 25/s, reaction 100/s",
			"limit with events 1000: cold start",
			"ours 1000: cold start, steady, memory, reaction 25/s, reaction 100/s",
			"ours-unsharded 300 in 40 namespaces: cold start, sharded",
			"ours-sharded-3 300 in 40 namespaces: cold start, sharded",
			"ours-unsharded 300 in half in one namespace: cold start, sharded",
			"ours-sharded-3 300 in half in one namespace: cold start, sharded",
			"ratio ours 1 1000: cold start, rss, reaction 25/s, reaction 100/s, steady",
			"ratio limit 1 1000: cold start, reaction 25/s, reaction 100/s",
			"ratio limit 2 1000: cold start, reaction 25/s, reaction 100/s",
			"ratio ours 2 1000: cold start, rss, reaction 25/s, reaction 100/s",
		},
	}, {
		name: "the sharded case: one unsharded replica, then each number of sharded ones, for each layout",
		args: []string{"--cases=sharded", "--sharded-foos=50", "--sharded-replicas=1,2"},
		want: []string{
			"ours-unsharded 50 in 40 namespaces: cold start, sharded",
			"ours-sharded-1 50 in 40 namespaces: cold start, sharded",
			"ours-sharded-2 50 in 40 namespaces: cold start, sharded",
			"ours-unsharded 50 in half in one namespace: cold start, sharded",
			"ours-sharded-1 50 in half in one namespace: cold start, sharded",
			"ours-sharded-2 50 in half in one namespace: cold start, sharded",
		},
	}, {
		name: "the steady-state size runs once though it is not a cold-start size",
		args: []string{"--foos=50, 10", "--steady-foos=20", "--cases=steady,limit"},
		want: []string{
			"limit 10: cold start",
			"limit with events 10: cold start",
			"ours 20: cold start (unreported), steady",
			"limit 50: cold start",
			"limit with events 50: cold start",
		},
	}, {
		name: "the reaction case alone brings its limit",
		args: []string{"--steady-foos=20", "--rates=5", "--cases=reaction"},
		want: []string{
			"limit 20: cold start (unreported), reaction 5/s",
			"ours 20: cold start (unreported), reaction 5/s",
		},
	}, {
		name:  "cold starts of two controllers",
		args:  []string{"--foos=10", "--cases=coldstart"},
		other: true,
		want:  []string{"ours 10: cold start", "classic 10: cold start"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			controllers := []driver{controller{Name: ourName}}
			if tt.other {
				controllers = append(controllers, controller{Name: "classic"})
			}
			var got []string
			for _, p := range plan(cfg, controllers, controller{Name: ourName}) {
				var cases []string
				for _, c := range p.cases {
					cases = append(cases, describeCase(c))
				}
				where := ""
				if p.layout != nil {
					where = " in " + p.layout.Name
				}
				got = append(got, fmt.Sprintf("%s %d%s: %s", p.driver.column(), p.foos, where, strings.Join(cases, ", ")))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func describeCase(c benchCase) string {
	switch c := c.(type) {
	case coldStartCase:
		if !c.record {
			return "cold start (unreported)"
		}
		return "cold start"
	case steadyCase:
		return "steady"
	case memoryCase:
		return "memory"
	case rssCase:
		return "rss"
	case reactionCase:
		return fmt.Sprintf("reaction %d/s", c.rate)
	case shardedCase:
		return "sharded"
	}
	return fmt.Sprintf("%T", c)
}

func TestControllerArgs(t *testing.T) {
	// Without a second controller, --controller-args go to ours, after its defaults;
	// the kubeconfig and the ports are passed when it starts.
	cfg := config{ourBinary: "/bin/sample-controller", controllerArgs: "--workers=4 -v=2"}
	ours, err := ourController(t.Context(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ours.command("/k"), " "), "--resync-period=30s --workers=4 -v=2"; got != want {
		t.Errorf("ours = %q, want %q", got, want)
	}

	// With one, they are its whole command line, and ours keeps its defaults.
	cfg = config{ourBinary: "/bin/sample-controller", controllerBinary: "/bin/classic", controllerName: "classic", controllerArgs: "-kubeconfig={kubeconfig} -v=1"}
	ours, _ = ourController(t.Context(), cfg, "")
	if got := strings.Join(ours.command("/k"), " "); strings.Contains(got, "-v=1") {
		t.Errorf("ours got the other controller's args: %q", got)
	}
	other := foreignController(cfg)
	if got := strings.Join(other.command("/k"), " "); got != "-kubeconfig=/k -v=1" {
		t.Errorf("other = %q", got)
	}
	if other.rule() != ruleWritten || ours.rule() != ruleReady || other.Ours || !ours.Ours {
		t.Errorf("ours %+v, other %+v", ours, other)
	}

	// With no args, the other controller gets only the kubeconfig.
	cfg.controllerArgs = ""
	if got := strings.Join(foreignController(cfg).command("/k"), " "); got != "-kubeconfig=/k" {
		t.Errorf("default other = %q", got)
	}
}

// TestTenurePlan checks that the tenure case alternates its variants, AB BA AB, each
// session a cold start and then the reaction case.
func TestTenurePlan(t *testing.T) {
	cfg, err := parseFlags([]string{"--cases=tenure", "--tenure-pairs=3", "--tenure-foos=500", "--tenure-rate=25"})
	if err != nil {
		t.Fatal(err)
	}
	ours := controller{Name: ourName, Binary: "/bin/sample-controller", Ours: true}
	var got []string
	for _, p := range plan(cfg, []driver{ours}, ours) {
		v, ok := p.driver.(tenureVariant)
		if !ok || p.foos != 500 || len(p.cases) != 2 || p.cases[1] != (reactionCase{rate: 25}) {
			t.Fatalf("session %+v, want a tenure variant of 500 Foos with a cold start and the reaction case at 25/s", p)
		}
		got = append(got, v.column())
	}
	want := []string{"tenure unelected 1", "tenure elected 1", "tenure elected 2", "tenure unelected 2", "tenure unelected 3", "tenure elected 3"}
	if !slices.Equal(got, want) {
		t.Errorf("sessions %q, want %q", got, want)
	}
}
