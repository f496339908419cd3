// Command bench measures the controller on a local control plane against the limits
// and prints one markdown table; README.md says what each figure means.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// config is the command line.
type config struct {
	cases                              map[string]bool
	foos, rates                        []int
	pairs, steadyFoos, unrelated       int
	workers                            int
	steadyWindow, settle               time.Duration
	coldStartTimeout                   time.Duration
	reactionDuration, reactionDeadline time.Duration
	reactionInflight                   int
	ourBinary, controllerBinary        string
	controllerOurs                     bool
	controllerName, controllerArgs     string
	peers                              []string // names in peerNames, in the order given
	shardReplicas, shardSlots          int
	outDir                             string
	docs                               string   // the page the table is written into; "" for none
	args                               []string // the flags given, but --docs: for the page and results.json
}

// The case groups --cases can pick; every session begins with a cold start.
const (
	caseLimit    = "limit"    // the two limits, in the pairs beside the controllers
	caseSteady   = "steady"   // writes per minute once converged
	caseMemory   = "memory"   // RSS before and after unrelated Deployments
	caseReaction = "reaction" // spec change to Deployment latency
	caseRestart  = "restart"  // writes and readiness after a restart with the Foos converged
	caseRelist   = "relist"   // writes, CPU and peak RSS after kube-apiserver restarts under the controller
)

var allCases = []string{caseLimit, caseSteady, caseMemory, caseReaction, caseRestart, caseRelist}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	foos := fs.String("foos", "1000,10000", "cold-start sizes: numbers of Foos, comma-separated")
	fs.IntVar(&cfg.pairs, "pairs", 3, "cold starts of every side at each size, in rotating order (AB BA AB, or ABC BCA CAB), each on a fresh cluster")
	fs.IntVar(&cfg.steadyFoos, "steady-foos", 1000, "the size whose sessions go on with the reaction, steady-state and memory cases")
	fs.IntVar(&cfg.unrelated, "unrelated-deployments", 10000, "unrelated Deployments created in another namespace for the memory case")
	rates := fs.String("rates", "25,100,1000", "reaction case: spec changes per second, comma-separated")
	fs.DurationVar(&cfg.reactionDuration, "reaction-duration", 10*time.Second, "reaction case: how long changes are sent at each rate")
	fs.DurationVar(&cfg.reactionDeadline, "reaction-deadline", 2*time.Minute, "reaction case: how long after the last change the bench waits for the Deployments")
	fs.IntVar(&cfg.reactionInflight, "reaction-inflight", 100, "reaction case: most patches in flight at once; 100 sustain 1000 changes/s while a patch takes under 100 ms")
	fs.DurationVar(&cfg.steadyWindow, "steady-window", 65*time.Second, "steady-state case: how long writes are counted (every controller resyncs every 30 s)")
	fs.DurationVar(&cfg.settle, "settle", 10*time.Second, "wait after convergence before counting requests or reading memory")
	fs.IntVar(&cfg.workers, "workers", 32, "requests the limits have in flight (the controller's default --workers), and the bench when it creates objects")
	fs.DurationVar(&cfg.coldStartTimeout, "cold-start-timeout", 10*time.Minute, "give up on a cold start after this long and report how far it got")
	peers := fs.String("peers", strings.Join(peerNames, ","), "the controllers a user would pick instead, comma-separated ("+strings.Join(peerNames, ", ")+"; empty for none): "+
		"built by hack/build-peers.sh into <repo>/_output/bin and run at their defaults, with the bench's resync where they take one")
	fs.StringVar(&cfg.ourBinary, "our-binary", "", "use this build of our controller instead of building it from the repository root")
	fs.StringVar(&cfg.controllerBinary, "controller-binary", "", "also run every case against this controller, e.g. another build of ours")
	fs.StringVar(&cfg.controllerName, "controller-name", "", "column name of --controller-binary (default: its file name)")
	fs.BoolVar(&cfg.controllerOurs, "controller-ours", false, "--controller-binary is another build of ours: it runs as ours (metrics and probes served, its Events awaited, the bench's resync and --controller-args appended), for alternating runs of two builds")
	fs.StringVar(&cfg.controllerArgs, "controller-args", "", "space-separated arguments; {kubeconfig} is replaced by the admin kubeconfig path. "+
		"With --controller-binary they are that controller's whole command line (default: -kubeconfig={kubeconfig}); without it they are appended to ours")
	fs.IntVar(&cfg.shardReplicas, "shard-replicas", 1, "run ours as this many replicas in sharded mode (--shard-slots), with the Lease timings of artifacts/deploy/components/sharded; 1 runs one replica, unsharded")
	fs.IntVar(&cfg.shardSlots, "shard-slots", 16, "with --shard-replicas above 1: the number of slots, as the sharded component sets it")
	fs.StringVar(&cfg.outDir, "out", "", "directory for results.json and the logs (default: <repo>/_output/bench)")
	fs.StringVar(&cfg.docs, "docs", "", "also write the table into this markdown page, between its lines <!-- bench --> and <!-- end of bench --> (make bench: docs/performance.md)")
	cases := fs.String("cases", strings.Join(allCases, ","), "case groups to run after the cold starts, comma-separated: "+strings.Join(allCases, ", "))
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	var err error
	if cfg.foos, err = parseInts("--foos", *foos); err != nil {
		return cfg, err
	}
	if cfg.rates, err = parseInts("--rates", *rates); err != nil {
		return cfg, err
	}
	for _, p := range strings.Split(*peers, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(peerNames, p) {
			return cfg, fmt.Errorf("--peers: unknown peer %q; known: %s", p, strings.Join(peerNames, ", "))
		}
		if !slices.Contains(cfg.peers, p) {
			cfg.peers = append(cfg.peers, p)
		}
	}
	cfg.cases = map[string]bool{}
	for _, c := range strings.Split(*cases, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if !slices.Contains(allCases, c) {
			return cfg, fmt.Errorf("--cases: unknown case %q; known: %s", c, strings.Join(allCases, ", "))
		}
		cfg.cases[c] = true
	}
	for name, v := range map[string]int{"--shard-replicas": cfg.shardReplicas, "--shard-slots": cfg.shardSlots, "--pairs": cfg.pairs, "--steady-foos": cfg.steadyFoos, "--workers": cfg.workers, "--reaction-inflight": cfg.reactionInflight, "--unrelated-deployments": cfg.unrelated} {
		if v < 1 {
			return cfg, fmt.Errorf("%s must be at least 1, got %d", name, v)
		}
	}
	if cfg.controllerOurs && cfg.controllerBinary == "" {
		return cfg, errors.New("--controller-ours needs --controller-binary")
	}
	if cfg.controllerName == "" && cfg.controllerBinary != "" {
		cfg.controllerName = filepath.Base(cfg.controllerBinary)
	}
	if taken := append([]string{ourName, limit{}.column(), limit{Watching: true}.column()}, peerNames...); cfg.controllerBinary != "" && slices.Contains(taken, cfg.controllerName) {
		return cfg, fmt.Errorf("--controller-name %q is another side's column", cfg.controllerName)
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "docs" {
			cfg.args = append(cfg.args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return cfg, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// sessionPlan is one session: a side on a fresh cluster with foos Foos, and its cases.
type sessionPlan struct {
	driver driver
	foos   int
	pair   int
	cases  []benchCase
}

// plan is the table of sessions: for every size, --pairs rounds of every side (the
// controllers, the watching limit, the limit), the order rotating from round to round
// so that a drift of the machine falls on every side alike. At --steady-foos the
// reactions follow every side's cold start, then the controllers' steady state and
// memory.
func plan(cfg config, controllers []driver) []sessionPlan {
	sides := slices.Clone(controllers)
	if cfg.cases[caseLimit] {
		sides = append(sides, limit{Watching: true}, limit{})
	}
	sizes := slices.Clone(cfg.foos)
	if cfg.cases[caseSteady] || cfg.cases[caseMemory] || cfg.cases[caseReaction] || cfg.cases[caseRestart] || cfg.cases[caseRelist] {
		sizes = append(sizes, cfg.steadyFoos)
	}
	slices.Sort(sizes)

	var out []sessionPlan
	for _, n := range slices.Compact(sizes) {
		for pair := 1; pair <= cfg.pairs; pair++ {
			first := (pair - 1) % len(sides)
			for _, d := range slices.Concat(sides[first:], sides[:first]) {
				if c, ok := d.(controller); ok && c.MaxFoos > 0 && n > c.MaxFoos {
					continue
				}
				cases := []benchCase{coldStartCase{}}
				if n == cfg.steadyFoos {
					cases = append(cases, laterCases(cfg, d)...)
				}
				out = append(out, sessionPlan{driver: d, foos: n, pair: pair, cases: cases})
			}
		}
	}
	return out
}

// laterCases are the cases after the cold start at --steady-foos; a limit has no
// steady state and no process of its own.
func laterCases(cfg config, d driver) []benchCase {
	var out []benchCase
	if cfg.cases[caseReaction] {
		for _, rate := range cfg.rates {
			out = append(out, reactionCase{rate: rate})
		}
	}
	if _, isLimit := d.(limit); isLimit {
		return out
	}
	if cfg.cases[caseSteady] {
		out = append(out, steadyCase{})
	}
	if cfg.cases[caseMemory] {
		out = append(out, memoryCase{})
	}
	if cfg.cases[caseRestart] {
		out = append(out, restartCase{})
	}
	if cfg.cases[caseRelist] {
		out = append(out, relistCase{})
	}
	return out
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the bench at once, and its processes with it
	}()
	ctx = klog.NewContext(ctx, klog.Background())

	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	if cfg.outDir == "" {
		cfg.outDir = filepath.Join(root, "_output", "bench")
	}
	// The controller is built, and run, from other directories.
	for _, path := range []*string{&cfg.outDir, &cfg.controllerBinary, &cfg.ourBinary, &cfg.docs} {
		if *path != "" {
			*path, _ = filepath.Abs(*path) // fails only without a working directory, which RepoRoot had
		}
	}
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		return err
	}
	if cfg.docs != "" { // a page without the markers fails now, not after an hour
		page, err := os.ReadFile(cfg.docs)
		if _, errBlock := replaceBlock(page, ""); err != nil || errBlock != nil {
			return fmt.Errorf("--docs: %w", errors.Join(err, errBlock))
		}
	}

	// Read before the build: the tree may change while the bench runs.
	builtFrom := commit(ctx, root)
	ours, err := ourController(ctx, cfg, root)
	if err != nil {
		return err
	}
	controllers := []driver{ours}
	peers, err := buildPeers(ctx, root, cfg.peers)
	if err != nil {
		return err
	}
	controllers = append(controllers, peers...)
	if cfg.controllerBinary != "" {
		controllers = append(controllers, foreignController(cfg))
	}

	res := &results{Started: time.Now(), Args: cfg.args}
	var runErr error
	for _, p := range plan(cfg, controllers) {
		r, err := runSession(ctx, cfg, root, p)
		res.Runs = append(res.Runs, r)
		if err != nil {
			runErr = fmt.Errorf("%s, %d Foos, pair %d: %w", p.driver.column(), p.foos, p.pair, err)
			break
		}
	}

	// What was measured is printed also after an error; only a whole run goes to the page.
	res.Finished = time.Now()
	if err := writeResults(cfg.outDir, res); err != nil {
		runErr = errors.Join(runErr, err)
	}
	table := buildTable(res).markdown()
	fmt.Print(table)
	if cfg.docs != "" && runErr == nil {
		runErr = writeDocs(cfg.docs, strings.Join(cfg.args, " "), table, res.Finished, builtFrom)
	}
	return runErr
}
