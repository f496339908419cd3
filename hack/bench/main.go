// Command bench measures the controller on a local control plane (etcd and
// kube-apiserver only: no Pods, so Deployments get no status) and prints one markdown
// table, with every figure also written to results.json. With --controller-binary it runs the same cases against
// another controller serving the same CRD and prints the two side by side.
//
//	cd hack/bench && go run . [flags]
//
// Progress goes to stderr, the table to stdout. Every process and cluster it starts is
// stopped on exit and on Ctrl-C.
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

	"github.com/seed-e6610ed6/sample-controller/pkg/localcluster"
)

// config is the command line.
type config struct {
	foos             []int
	steadyFoos       int
	unrelated        int
	rates            []int
	reactionDuration time.Duration
	reactionDeadline time.Duration
	steadyWindow     time.Duration
	settle           time.Duration
	workers          int
	coldStartTimeout time.Duration
	memoryTimeout    time.Duration
	parallelism      int
	reactionInflight int
	profile          bool

	ourBinary        string
	controllerBinary string
	controllerName   string
	controllerArgs   string

	outDir string
	cases  caseSet
}

// The case groups --cases can pick.
const (
	caseColdStart = "coldstart" // cold start and its requests per Foo
	caseLimit     = "limit"     // the raw-client limit of the cold start
	caseSteady    = "steady"    // mutating requests per minute once converged
	caseMemory    = "memory"    // RSS and heap, before and after unrelated Deployments
	caseReaction  = "reaction"  // spec change to Deployment latency
)

var allCases = []string{caseColdStart, caseLimit, caseSteady, caseMemory, caseReaction}

type caseSet map[string]bool

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	foos := fs.String("foos", "100,1000,5000", "cold-start sizes: numbers of Foos, comma-separated")
	fs.IntVar(&cfg.steadyFoos, "steady-foos", 1000, "number of Foos for the steady-state, memory and reaction cases")
	fs.IntVar(&cfg.unrelated, "unrelated-deployments", 10000, "unrelated Deployments created in another namespace for the memory case")
	rates := fs.String("rates", "25,100,1000", "reaction case: spec changes per second, comma-separated (the issue asks for 100 and 1000; 25 stays below what a 2-core apiserver saturates at)")
	fs.DurationVar(&cfg.reactionDuration, "reaction-duration", 10*time.Second, "reaction case: how long changes are sent at each rate")
	fs.DurationVar(&cfg.reactionDeadline, "reaction-deadline", 2*time.Minute, "reaction case: how long after the last change the bench waits for the Deployments")
	fs.DurationVar(&cfg.steadyWindow, "steady-window", 65*time.Second, "steady-state case: how long requests are counted")
	fs.DurationVar(&cfg.settle, "settle", 10*time.Second, "wait after convergence before counting requests or reading memory")
	fs.IntVar(&cfg.workers, "workers", 8, "parallel requests of the limit case (the controller's default --workers)")
	fs.DurationVar(&cfg.coldStartTimeout, "cold-start-timeout", 10*time.Minute, "give up on a cold start (or its limit) after this long and report how far it got")
	fs.DurationVar(&cfg.memoryTimeout, "memory-timeout", 5*time.Minute, "give up on creating the unrelated Deployments after this long")
	fs.IntVar(&cfg.parallelism, "parallelism", 32, "parallel requests when the bench creates Foos and unrelated Deployments")
	fs.IntVar(&cfg.reactionInflight, "reaction-inflight", 100, "reaction case: most patches in flight at once; 100 sustain 1000 changes/s while a patch takes under 100 ms")
	fs.BoolVar(&cfg.profile, "profile", false, "reaction case: write CPU profiles of the apiserver and of our controller (started with --profiling) over each rate's changes, for go tool pprof")
	fs.StringVar(&cfg.ourBinary, "our-binary", "", "use this build of our controller instead of building it from the repository root")
	fs.StringVar(&cfg.controllerBinary, "controller-binary", "", "also run every case against this controller, e.g. _output/bin/sample-controller-classic from hack/build-classic.sh")
	fs.StringVar(&cfg.controllerName, "controller-name", "", "column name of --controller-binary (default: its file name)")
	fs.StringVar(&cfg.controllerArgs, "controller-args", "", "space-separated arguments; {kubeconfig} is replaced by the admin kubeconfig path. "+
		"With --controller-binary they are that controller's whole command line (default: -kubeconfig={kubeconfig}); without it they are appended to ours")
	fs.StringVar(&cfg.outDir, "out", "", "directory for results.json and the logs (default: <repo>/_output/bench)")
	cases := fs.String("cases", strings.Join(allCases, ","), "case groups to run, comma-separated: "+strings.Join(allCases, ", "))
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
	cfg.cases = caseSet{}
	for _, c := range strings.Split(*cases, ",") {
		c = strings.TrimSpace(c)
		if !slices.Contains(allCases, c) {
			return cfg, fmt.Errorf("--cases: unknown case %q; known: %s", c, strings.Join(allCases, ", "))
		}
		cfg.cases[c] = true
	}
	for name, v := range map[string]int{"--steady-foos": cfg.steadyFoos, "--workers": cfg.workers, "--parallelism": cfg.parallelism, "--reaction-inflight": cfg.reactionInflight} {
		if v < 1 {
			return cfg, fmt.Errorf("%s must be at least 1, got %d", name, v)
		}
	}
	if cfg.unrelated < 0 {
		return cfg, fmt.Errorf("--unrelated-deployments must not be negative, got %d", cfg.unrelated)
	}
	if cfg.controllerName == "" && cfg.controllerBinary != "" {
		cfg.controllerName = filepath.Base(cfg.controllerBinary)
	}
	return cfg, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
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

// fooSizes are the cold starts to run: every --foos, and --steady-foos, whose cold
// start sets up the later cases.
func (cfg config) fooSizes() []int {
	var sizes []int
	if cfg.cases[caseColdStart] || cfg.cases[caseLimit] {
		sizes = append(sizes, cfg.foos...)
	}
	if cfg.needsSteadyGroup() {
		sizes = append(sizes, cfg.steadyFoos)
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

func (cfg config) needsSteadyGroup() bool {
	return cfg.cases[caseSteady] || cfg.cases[caseMemory] || cfg.cases[caseReaction]
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
		// Further signals take their default action: a second Ctrl-C ends the bench at
		// once, and the processes it started die with it (they get SIGKILL when their
		// parent goes).
		stop()
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
	if cfg.outDir, err = filepath.Abs(cfg.outDir); err != nil {
		return err
	}
	if cfg.controllerBinary != "" {
		if cfg.controllerBinary, err = filepath.Abs(cfg.controllerBinary); err != nil {
			return err
		}
	}
	if cfg.ourBinary != "" {
		if cfg.ourBinary, err = filepath.Abs(cfg.ourBinary); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		return err
	}

	ours, err := ourController(ctx, cfg, root)
	if err != nil {
		return err
	}
	controllers := []controllerSpec{ours}
	if cfg.controllerBinary != "" {
		controllers = append(controllers, foreignController(cfg))
	}

	env := &benchEnv{cfg: cfg, root: root}
	res := newResults(cfg, controllers)
	runErr := runCases(ctx, env, controllers, res)

	// Whatever was measured is reported, also after an error or Ctrl-C.
	res.Finished = time.Now()
	if err := writeOutputs(cfg.outDir, res); err != nil {
		runErr = errors.Join(runErr, err)
	}
	fmt.Print(renderMarkdown(res, buildRows(res)))
	return runErr
}

// runCases runs every cold-start size: for each controller a fresh cluster, then the
// limit in another fresh cluster. The cluster of --steady-foos goes on with the
// steady-state, memory and reaction cases once its cold start has converged, and so
// does the limit's with the reaction case.
func runCases(ctx context.Context, env *benchEnv, controllers []controllerSpec, res *results) error {
	cfg := env.cfg
	for _, n := range cfg.fooSizes() {
		for i, c := range controllers {
			full := n == cfg.steadyFoos && cfg.needsSteadyGroup()
			if !cfg.cases[caseColdStart] && !full {
				continue
			}
			if err := runControllerGroup(ctx, env, c, n, full, &res.Controllers[i]); err != nil {
				return fmt.Errorf("%s, %d Foos: %w", c.name, n, err)
			}
		}
		coldStartLimit := cfg.cases[caseLimit] && slices.Contains(cfg.foos, n)
		var rates []int
		if cfg.cases[caseReaction] && n == cfg.steadyFoos {
			rates = cfg.rates
		}
		if coldStartLimit || len(rates) > 0 {
			lim, reactions, err := runLimit(ctx, env, n, rates)
			res.LimitReactions = append(res.LimitReactions, reactions...)
			if err != nil {
				return fmt.Errorf("limit, %d Foos: %w", n, err)
			}
			if coldStartLimit {
				res.Limit = append(res.Limit, lim)
			}
		}
	}
	return nil
}

// runControllerGroup runs one controller's cold start of n Foos on a fresh cluster,
// and when full is set the later cases on the same cluster.
func runControllerGroup(ctx context.Context, env *benchEnv, c controllerSpec, n int, full bool, out *controllerResults) error {
	cfg := env.cfg
	g, err := startGroup(ctx, env, fmt.Sprintf("%s-%d", c.name, n))
	if err != nil {
		return err
	}
	defer g.stop()

	cs, proc, err := runColdStart(ctx, g, c, n)
	if proc != nil {
		defer proc.stop()
	}
	if err != nil {
		return err
	}
	if cfg.cases[caseColdStart] {
		out.ColdStarts = append(out.ColdStarts, cs)
	}
	if !full {
		return nil
	}
	if !cs.Converged {
		progressf("%s: cold start of %d Foos did not converge; skipping the steady-state, memory and reaction cases", c.name, n)
		out.Skipped = fmt.Sprintf("cold start of %d Foos did not converge", n)
		return nil
	}
	if cfg.cases[caseSteady] {
		st, err := runSteady(ctx, g, c)
		if err != nil {
			return err
		}
		out.Steady = &st
	}
	if cfg.cases[caseMemory] {
		mem, err := runMemory(ctx, g, c, proc)
		if err != nil {
			return err
		}
		out.Memory = &mem
	}
	if cfg.cases[caseReaction] {
		for _, rate := range cfg.rates {
			r, err := runReaction(ctx, g, c.name, proc, nil, rate)
			if err != nil {
				return err
			}
			out.Reactions = append(out.Reactions, r)
		}
	}
	return nil
}

// benchEnv is what every case needs to know about the run.
type benchEnv struct {
	cfg  config
	root string
}

// progressf prints a progress line to stderr.
func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
