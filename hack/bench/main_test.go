package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.foos, []int{100, 1000, 5000}) || !slices.Equal(cfg.rates, []int{25, 100, 1000}) {
		t.Errorf("foos %v, rates %v", cfg.foos, cfg.rates)
	}
	if cfg.steadyFoos != 1000 || cfg.unrelated != 10000 || cfg.workers != 8 || cfg.steadyWindow != 65*time.Second {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, c := range allCases {
		if !cfg.cases[c] {
			t.Errorf("case %s is not on by default", c)
		}
	}
	// The steady-state size is one of the cold starts, so it runs once.
	if got := cfg.fooSizes(); !slices.Equal(got, []int{100, 1000, 5000}) {
		t.Errorf("fooSizes = %v", got)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--foos=50, 10", "--steady-foos=20", "--cases=steady,limit", "--controller-binary=/x/sample-controller-classic"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.fooSizes(); !slices.Equal(got, []int{10, 20, 50}) {
		t.Errorf("fooSizes = %v, want the limit's sizes and the steady-state one", got)
	}
	if cfg.controllerName != "sample-controller-classic" {
		t.Errorf("controllerName = %q", cfg.controllerName)
	}

	cfg, err = parseFlags([]string{"--cases=coldstart"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.needsSteadyGroup() {
		t.Error("a cold-start-only run needs the steady-state group")
	}

	for _, bad := range [][]string{{"--foos=0"}, {"--rates=x"}, {"--cases=nope"}, {"--workers=0"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", bad)
		}
	}
}

func TestControllerArgs(t *testing.T) {
	// Without a second controller, --controller-args go to ours, after its defaults.
	cfg := config{controllerArgs: "--workers=4 -v=2"}
	ours, err := ourController(t.Context(), withOurBinary(cfg), "")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(ours.command("/k"), " ")
	if want := "--kubeconfig=/k --metrics-bind-address=127.0.0.1:0 --health-probe-bind-address=127.0.0.1:0 --resync-period=30s --workers=4 -v=2"; got != want {
		t.Errorf("ours = %q, want %q", got, want)
	}

	// With one, they are its whole command line, and ours keeps its defaults.
	cfg = config{controllerBinary: "/bin/classic", controllerName: "classic", controllerArgs: "-kubeconfig={kubeconfig} -v=1"}
	ours, _ = ourController(t.Context(), withOurBinary(cfg), "")
	if got := strings.Join(ours.command("/k"), " "); strings.Contains(got, "-v=1") {
		t.Errorf("ours got the other controller's args: %q", got)
	}
	other := foreignController(cfg)
	if got := strings.Join(other.command("/k"), " "); got != "-kubeconfig=/k -v=1" {
		t.Errorf("other = %q", got)
	}
	if other.rule != ruleWritten || ours.rule != ruleReady {
		t.Errorf("rules: ours %v, other %v", ours.rule, other.rule)
	}

	// With no args, the other controller gets only the kubeconfig.
	cfg.controllerArgs = ""
	if got := strings.Join(foreignController(cfg).command("/k"), " "); got != "-kubeconfig=/k" {
		t.Errorf("default other = %q", got)
	}
}

// withOurBinary skips the build.
func withOurBinary(cfg config) config {
	cfg.ourBinary = "/bin/sample-controller"
	return cfg
}
