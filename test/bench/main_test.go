package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.foos, []int{1000, 10000}) || !slices.Equal(cfg.rates, []int{25, 100, 1000}) {
		t.Errorf("foos %v, rates %v", cfg.foos, cfg.rates)
	}
	if cfg.pairs != 3 || cfg.steadyFoos != 1000 || cfg.unrelated != 10000 || cfg.workers != 32 || cfg.steadyWindow != 65*time.Second {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, c := range allCases {
		if !slices.Contains(cfg.cases, c) {
			t.Errorf("case %s is not on by default", c)
		}
	}
	if len(cfg.args) != 0 {
		t.Errorf("flags given: %q, want none", cfg.args)
	}
	if !slices.Equal(cfg.peers, peerNames) {
		t.Errorf("peers %q, want every one: %q", cfg.peers, peerNames)
	}
	for flag, want := range map[string][]string{"--peers=": nil, "--peers=controller-runtime, classic,classic": {"controller-runtime", "classic"}} {
		if cfg, err := parseFlags([]string{flag}); err != nil || !slices.Equal(cfg.peers, want) {
			t.Errorf("%s gave peers %q, %v; want %q", flag, cfg.peers, err, want)
		}
	}

	if cfg, err := parseFlags([]string{"--memory-limit=512Mi"}); err != nil || cfg.memoryLimit != 512<<20 {
		t.Errorf("--memory-limit=512Mi gave %d, %v; want 512 MiB in bytes", cfg.memoryLimit, err)
	}
	if cfg, err := parseFlags([]string{"--cases="}); err != nil || len(cfg.cases) != 0 {
		t.Errorf("--cases= gave %v, %v; want cold starts alone", cfg.cases, err)
	}
	for _, bad := range [][]string{{"--foos=0"}, {"--rates=x"}, {"--cases=nope"}, {"--cases=ratio"}, {"--pairs=0"}, {"--workers=0"}, {"--steady-foos=0"}, {"--unrelated-deployments=0"}, {"--peers=kubebuilder"}, {"--memory-limit=lots"}, {"--memory-limit=0"}, {"extra"}} {
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
		name: "every case: pairs in rotating order, the later cases at --steady-foos, reactions first",
		args: []string{"--foos=100,1000", "--rates=25,100", "--pairs=2"},
		want: []string{
			"ours 100 pair 1: cold start",
			"floor 100 pair 1: cold start",
			"floor 100 pair 2: cold start",
			"ours 100 pair 2: cold start",
			"ours 1000 pair 1: cold start, ready, reaction 25/s, reaction 100/s, steady, memory, restart, relist",
			"floor 1000 pair 1: cold start, ready, reaction 25/s, reaction 100/s",
			"floor 1000 pair 2: cold start, ready, reaction 25/s, reaction 100/s",
			"ours 1000 pair 2: cold start, ready, reaction 25/s, reaction 100/s, steady, memory, restart, relist",
		},
	}, {
		name: "the steady-state size runs though it is not a cold-start size",
		args: []string{"--foos=50, 10", "--steady-foos=20", "--cases=steady", "--pairs=1"},
		want: []string{
			"ours 10 pair 1: cold start",
			"ours 20 pair 1: cold start, steady",
			"ours 50 pair 1: cold start",
		},
	}, {
		name: "without later cases, no extra size",
		args: []string{"--foos=10", "--steady-foos=20", "--cases=floor", "--pairs=1"},
		want: []string{
			"ours 10 pair 1: cold start",
			"floor 10 pair 1: cold start",
		},
	}, {
		name:  "two controllers alternate too",
		args:  []string{"--foos=10", "--cases=", "--pairs=3"},
		other: true,
		want: []string{
			"ours 10 pair 1: cold start", "classic 10 pair 1: cold start",
			"classic 10 pair 2: cold start", "ours 10 pair 2: cold start",
			"ours 10 pair 3: cold start", "classic 10 pair 3: cold start",
		},
	}, {
		name:  "a side runs only up to its most Foos",
		args:  []string{"--foos=1000,1001", "--cases=", "--pairs=2"},
		other: true,
		want: []string{
			"ours 1000 pair 1: cold start", "classic 1000 pair 1: cold start",
			"classic 1000 pair 2: cold start", "ours 1000 pair 2: cold start",
			"ours 1001 pair 1: cold start",
			"ours 1001 pair 2: cold start",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			controllers := []side{{Name: ourName}}
			if tt.other {
				controllers = append(controllers, side{Name: "classic", MaxFoos: 1000})
			}
			if slices.Contains(cfg.cases, "floor") { // as run adds it
				controllers = append(controllers, floorSide(cfg, "/bin/floor"))
			}
			var got []string
			for _, p := range plan(cfg, controllers) {
				var cases []string
				for _, c := range p.cases {
					cases = append(cases, c.name)
				}
				got = append(got, fmt.Sprintf("%s %d pair %d: %s", p.side.Name, p.foos, p.pair, strings.Join(cases, ", ")))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestPeers(t *testing.T) {
	// Every peer runs with the admin kubeconfig and, where it takes one, the bench's resync.
	for _, name := range peerNames {
		c := peer(name, "/bin", 32)
		cmd := strings.Join(c.command("/k"), " ")
		if c.Binary != "/bin/peer-"+peerBuild(name) || !strings.Contains(cmd, "kubeconfig=/k") || !c.Peer {
			t.Errorf("peer %s: binary %s, command %q, any status %v", name, c.Binary, cmd, c.AnyStatus)
		}
	}
	for _, name := range []string{"controller-runtime", "controller-runtime-tuned"} {
		if cmd := strings.Join(peer(name, "/bin", 32).command("/k"), " "); !strings.Contains(cmd, "--sync-period="+resync.String()) {
			t.Errorf("the %s peer runs %q, without the bench's resync", name, cmd)
		}
	}
	// Tuned as its documentation shows, with ours' workers.
	tuned := strings.Join(peer("controller-runtime-tuned", "/bin", 32).command("/k"), " ")
	for _, arg := range []string{"--max-concurrent-reconciles=32", "--own-deployments-only", "--strip-managed-fields"} {
		if !strings.Contains(tuned, arg) {
			t.Errorf("the tuned controller-runtime peer runs %q, without %s", tuned, arg)
		}
	}
}

func TestControllerArgs(t *testing.T) {
	// --controller-args go to ours, after its defaults; the kubeconfig and the ports are
	// passed when it starts.
	ours := ourController(config{controllerArgs: "--workers=4 -v=2"}, "/bin/sample-controller", false)
	if got, want := strings.Join(ours.command("/k"), " "), "--resync-period=30s --workers=4 -v=2"; got != want {
		t.Errorf("ours = %q, want %q", got, want)
	}
	if ours.AnyStatus || !ours.Ours {
		t.Errorf("ours %+v", ours)
	}
	// Ours and the floor are done only with their Events; a peer's are not ours to
	// wait for.
	floor := floorSide(config{workers: 32}, "/bin/floor")
	if !ours.events() || peer("classic", "/bin", 32).events() || !floor.events() {
		t.Errorf("events: ours %v, classic %v, floor %v", ours.events(), peer("classic", "/bin", 32).events(), floor.events())
	}
	// The floor watches every namespace, as ours does, with ours' workers and resync.
	if got, want := strings.Join(floor.command("/k"), " "), "--kubeconfig=/k --resync-period=30s --workers=32"; got != want {
		t.Errorf("floor = %q, want %q", got, want)
	}
}

func TestSessionName(t *testing.T) {
	for description, want := range map[string]string{
		"ours 1000 1":                         "ours-1000-1",
		"limit watching 10000 3":              "limit-watching-10000-3",
		"sample-controller-classic 100 2":     "sample-controller-classic-100-2",
		"My_Controller (v2) 100 1":            "my-controller-v2-100-1",
		"--odd-- 1":                           "odd-1",
		"limit+events 1000":                   "limit-events-1000",
		"ratio ours --workers=8 2-10000":      "ratio-ours-workers-8-2-10000",
		"ratio ours 1-1000":                   "ratio-ours-1-1000",
		"tenure elected 1-10000":              "tenure-elected-1-10000",
		"sample-controller-classic 100 2 ---": "sample-controller-classic-100-2",
	} {
		if got := sessionName(description); got != want {
			t.Errorf("sessionName(%q) = %q, want %q", description, got, want)
		}
	}
}

// Ours runs as artifacts/deploy's Deployment runs it, but at the addresses the bench
// gives it; bare is the bench's older configuration.
func TestOursAsShipped(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{controllerArgs: "-v=2"}
	if cfg.shipped, err = readShipped(root); err != nil {
		t.Fatal(err)
	}
	ours := ourController(cfg, "/bin/sample-controller", true)
	args := strings.Join(ours.command("/k"), " ")
	for _, want := range []string{"--resync-period=30s --leader-elect ", "--leader-elect-retry-period=1s", "--graceful-shutdown-timeout=30s", " -v=2"} {
		if !strings.Contains(args, want) {
			t.Errorf("ours as shipped runs %q, without %q", args, want)
		}
	}
	for _, unwanted := range []string{"--metrics-bind-address", "--health-probe-bind-address", "--metrics-secure"} {
		if strings.Contains(args, unwanted) {
			t.Errorf("ours as shipped runs %q, with the manifest's %s: the bench chooses it", args, unwanted)
		}
	}
	if !ours.Shipped || ours.Name != ourName || !slices.Equal(ours.Env, []string{"MEMORY_LIMIT=268435456"}) {
		t.Errorf("ours as shipped: %+v, want Shipped, named %q, with the manifest's 256Mi as MEMORY_LIMIT", ours, ourName)
	}
	cfg.memoryLimit = 512 << 20
	if raised := ourController(cfg, "/bin/sample-controller", true); !slices.Equal(raised.Env, []string{"MEMORY_LIMIT=536870912"}) {
		t.Errorf("ours as shipped with --memory-limit=512Mi has the environment %q", raised.Env)
	}
	if bare := ourController(cfg, "/bin/sample-controller", false); bare.Shipped || bare.Name != "ours bare" || strings.Contains(strings.Join(bare.Args, " "), "--leader-elect") {
		t.Errorf("ours bare: %+v", bare)
	}
}
