// Command bench measures the controller on a local control plane beside its peers and
// its floor and prints one markdown table; README.md says what each figure means.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// config is the command line.
type config struct {
	cases, peers                                             []string
	foos, rates                                              []int
	pairs, steadyFoos, unrelated, workers, namespaces, nodes int
	reactionInflight, reactionSamples, readySamples          int
	memoryLimit                                              int64 // bytes; 0: artifacts/deploy's
	steadyWindow, settle, coldStartTimeout, reactionDeadline time.Duration
	controllerArgs, outDir, docs                             string // outDir: <repo>/_output/bench
	bare                                                     bool
	shipped                                                  shipped  // read from artifacts/deploy
	args                                                     []string // the flags given but --docs, for the page and results.json
}

// podsPerNode is what a simulated node holds (localcluster's nodes).
const podsPerNode = 110

// allCases are what --cases picks from, run after every session's cold start.
var allCases = []string{"floor", "steady", "memory", "reaction", "ready", "restart", "relist"}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	foos := fs.String("foos", "1000,10000", "cold-start sizes: numbers of Foos, comma-separated")
	fs.IntVar(&cfg.pairs, "pairs", 3, "cold starts of every side at each size, in rotating order (AB BA AB, or ABC BCA CAB), each on a fresh cluster")
	fs.IntVar(&cfg.steadyFoos, "steady-foos", 1000, "the size whose sessions go on with the reaction, steady-state and memory cases")
	fs.IntVar(&cfg.nodes, "nodes", 0, "simulated nodes (kwok, 110 Pods each), with the controller manager and scheduler: Deployments roll out, and a cold start lasts until every Foo is Ready; 0 runs none")
	fs.IntVar(&cfg.readySamples, "ready-samples", 20, "ready case: new Foos created one at a time, each timed until its status is done (Ready with --nodes)")
	fs.IntVar(&cfg.namespaces, "namespaces", 1, "the Foos are spread round-robin over this many namespaces: bench, or bench-0, bench-1...")
	fs.IntVar(&cfg.unrelated, "unrelated-deployments", 10000, "unrelated Deployments created in another namespace for the memory case")
	rates := fs.String("rates", "25,100,1000", "reaction case: spec changes per second, comma-separated")
	fs.IntVar(&cfg.reactionSamples, "reaction-samples", 2000, "reaction case: changes sent at each rate, one every 1/rate seconds (2000 at 25/s take 80 s)")
	fs.DurationVar(&cfg.reactionDeadline, "reaction-deadline", 2*time.Minute, "reaction case: how long after the last change the bench waits for the Deployments")
	fs.IntVar(&cfg.reactionInflight, "reaction-inflight", 100, "reaction case: most patches in flight at once; 100 sustain 1000 changes/s while a patch takes under 100 ms")
	fs.DurationVar(&cfg.steadyWindow, "steady-window", 65*time.Second, "steady-state case: how long writes are counted (every controller resyncs every 30 s)")
	fs.DurationVar(&cfg.settle, "settle", 10*time.Second, "wait after convergence before counting requests or reading memory")
	fs.IntVar(&cfg.workers, "workers", 32, "the controller's default --workers, given to the floor and the tuned controller-runtime peer, and the requests the bench has in flight when it creates objects")
	fs.DurationVar(&cfg.coldStartTimeout, "cold-start-timeout", 10*time.Minute, "give up on a cold start after this long and report how far it got")
	peers := fs.String("peers", strings.Join(peerNames, ","), "the controllers a user would pick instead, comma-separated (empty for none), built by hack/build-peers.sh")
	fs.StringVar(&cfg.controllerArgs, "controller-args", "", "space-separated arguments appended to ours")
	memoryLimit := fs.String("memory-limit", "", "ours' memory limit (MEMORY_LIMIT) in place of artifacts/deploy's, a quantity such as 512Mi: what a user who runs more Foos raises")
	fs.BoolVar(&cfg.bare, "bare", false, "also run ours bare, as the bench did before it ran ours as shipped: without election, with plain metrics nobody scrapes")
	fs.StringVar(&cfg.docs, "docs", "", "also write the table into this markdown page, between its lines <!-- bench --> and <!-- end of bench --> (make bench: docs/performance.md)")
	cases := fs.String("cases", strings.Join(allCases, ","), "case groups to run after the cold starts, comma-separated: "+strings.Join(allCases, ", "))
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	var errFoos, errRates, errPeers, err error
	cfg.foos, errFoos = parseList("--foos", *foos, positive)
	cfg.rates, errRates = parseList("--rates", *rates, positive)
	cfg.peers, errPeers = parseList("--peers", *peers, oneOf(peerNames))
	cfg.cases, err = parseList("--cases", *cases, oneOf(allCases))
	if err := errors.Join(errFoos, errRates, errPeers, err); err != nil {
		return cfg, err
	}
	if *memoryLimit != "" {
		q, err := resource.ParseQuantity(*memoryLimit)
		if err != nil || q.Value() <= 0 {
			return cfg, fmt.Errorf("--memory-limit=%q: want a positive quantity such as 512Mi", *memoryLimit)
		}
		cfg.memoryLimit = q.Value()
	}
	for name, v := range map[string]int{"--pairs": cfg.pairs, "--steady-foos": cfg.steadyFoos, "--workers": cfg.workers, "--reaction-inflight": cfg.reactionInflight, "--reaction-samples": cfg.reactionSamples, "--unrelated-deployments": cfg.unrelated, "--namespaces": cfg.namespaces, "--ready-samples": cfg.readySamples} {
		if v < 1 {
			return cfg, fmt.Errorf("%s must be at least 1, got %d", name, v)
		}
	}
	if cfg.nodes < 0 {
		return cfg, fmt.Errorf("--nodes must not be negative, got %d", cfg.nodes)
	}
	if pods := (slices.Max(append(cfg.foos, cfg.steadyFoos)) + cfg.readySamples) * initialReplicas; cfg.nodes > 0 && cfg.nodes*podsPerNode < pods {
		return cfg, fmt.Errorf("--nodes=%d hold %d Pods; the Foos need %d", cfg.nodes, cfg.nodes*podsPerNode, pods)
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "docs" {
			cfg.args = append(cfg.args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return cfg, nil
}

func parseList[T comparable](flagName, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

func positive(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return n, nil
	}
	return 0, fmt.Errorf("%q is not a positive integer", s)
}

func oneOf(known []string) func(string) (string, error) {
	return func(s string) (string, error) {
		if !slices.Contains(known, s) {
			return "", fmt.Errorf("unknown %q; known: %s", s, strings.Join(known, ", "))
		}
		return s, nil
	}
}

type sessionPlan struct {
	side       side
	foos, pair int
	cases      []benchCase
}

// plan is the sessions: for every size, --pairs rounds of every side, the order rotating
// so that a drift of the machine falls on every side alike; at --steady-foos the later
// cases follow the cold start.
func plan(cfg config, controllers []side) []sessionPlan {
	var reactions, later []benchCase
	// Ready first: every reaction change adds a replica, a Pod with --nodes.
	if slices.Contains(cfg.cases, "ready") {
		reactions = append(reactions, benchCase{"ready", timeToReady})
	}
	if slices.Contains(cfg.cases, "reaction") {
		for _, rate := range cfg.rates {
			reactions = append(reactions, reactionCase(rate))
		}
	}
	for _, c := range laterCases {
		if slices.Contains(cfg.cases, c.name) {
			later = append(later, c)
		}
	}
	sides, sizes := slices.Clone(controllers), slices.Clone(cfg.foos)
	if len(reactions)+len(later) > 0 {
		sizes = append(sizes, cfg.steadyFoos)
	}
	slices.Sort(sizes)

	var out []sessionPlan
	for _, n := range slices.Compact(sizes) {
		for pair := 1; pair <= cfg.pairs; pair++ {
			first := (pair - 1) % len(sides)
			for _, d := range slices.Concat(sides[first:], sides[:first]) {
				if d.MaxFoos > 0 && n > d.MaxFoos {
					continue
				}
				cases := []benchCase{{"cold start", coldStart}}
				if n == cfg.steadyFoos {
					cases = append(cases, reactions...)
					if !d.Floor {
						cases = append(cases, later...)
					}
				}
				out = append(out, sessionPlan{side: d, foos: n, pair: pair, cases: cases})
			}
		}
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
	if err := run(klog.NewContext(ctx, klog.Background()), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	cfg.outDir = filepath.Join(root, "_output", "bench")
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		return err
	}
	if cfg.docs != "" { // a page without the markers fails now, not after an hour
		page, err := os.ReadFile(cfg.docs)
		if _, errBlock := replaceBlock(page, ""); err != nil || errBlock != nil {
			return fmt.Errorf("--docs: %w", errors.Join(err, errBlock))
		}
	}

	builtFrom := commit(ctx, root) // before the build: the tree may change while the bench runs
	if cfg.shipped, err = readShipped(root); err != nil {
		return err
	}
	ours := ourController(cfg, filepath.Join(cfg.outDir, "sample-controller"), true)
	progressf("building the controller into %s", ours.Binary)
	if err := localcluster.BuildController(ctx, root, ours.Binary); err != nil {
		return err
	}
	controllers := []side{ours}
	if cfg.bare {
		controllers = append(controllers, ourController(cfg, ours.Binary, false))
	}
	if len(cfg.peers) > 0 {
		var builds []string
		for _, name := range cfg.peers {
			if b := peerBuild(name); !slices.Contains(builds, b) {
				builds = append(builds, b)
			}
		}
		progressf("building the peers %s", strings.Join(builds, ", "))
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-peers.sh"), builds...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("hack/build-peers.sh: %w\n%s", err, out)
		}
	}
	for _, name := range cfg.peers {
		controllers = append(controllers, peer(name, filepath.Join(root, "_output", "bin"), cfg.workers))
	}
	if slices.Contains(cfg.cases, "floor") {
		floor := floorSide(cfg, filepath.Join(cfg.outDir, floorName))
		progressf("building the floor into %s", floor.Binary)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", floor.Binary, "./bench/floor")
		cmd.Dir = filepath.Join(root, "test")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building the floor: %w\n%s", err, out)
		}
		controllers = append(controllers, floor)
	}

	res := &results{Started: time.Now(), Args: cfg.args}
	var runErr error
	for _, p := range plan(cfg, controllers) {
		r, err := runSession(ctx, cfg, root, p)
		res.Runs = append(res.Runs, r)
		if err != nil {
			runErr = fmt.Errorf("%s, %d Foos, pair %d: %w", p.side.Name, p.foos, p.pair, err)
			break
		}
	}

	// What was measured is printed also after an error; only a whole run goes to the page.
	res.Finished = time.Now()
	data, err := json.MarshalIndent(res, "", "  ")
	runErr = errors.Join(runErr, err, os.WriteFile(filepath.Join(cfg.outDir, "results.json"), append(data, '\n'), 0o644))
	table := buildTable(res).markdown()
	fmt.Print(table)
	if cfg.docs != "" && runErr == nil {
		// The page's figures, and every other of the run beside them to check them by.
		runErr = errors.Join(writeDocs(cfg.docs, strings.Join(cfg.args, " "), table, res.Finished, builtFrom),
			os.WriteFile(resultsBeside(cfg.docs), append(data, '\n'), 0o644))
	}
	return runErr
}

// results is everything measured, as written to results.json.
type results struct {
	Started, Finished time.Time
	Args              []string
	Runs              []runResult
}

type runResult struct {
	Column      string
	Floor, Peer bool
	Side        side
	Foos, Pair  int
	ColdStart   *coldStartResult `json:",omitempty"`
	Steady      *steadyResult    `json:",omitempty"`
	Memory      *memoryResult    `json:",omitempty"`
	Restart     *restartResult   `json:",omitempty"`
	Relist      *relistResult    `json:",omitempty"`
	Reactions   []reactionResult `json:",omitempty"`
	Ready       *readyResult     `json:",omitempty"`
}

const sectionColdStart, sectionSteady, sectionMemory, sectionRestart, sectionRelist, sectionReaction, sectionReady = 0, 1, 2, 3, 4, 5, 6

// rowKey names a row and places it: by section, size or rate, place, then name.
type rowKey struct {
	section, n, sub int
	name            string
}

func row(section, n, sub int, format string, args ...any) rowKey {
	return rowKey{section, n, sub, fmt.Sprintf(format, args...)}
}

// table is the report: one row per figure, one column per side. A ratio row is each
// side's figure in another row ÷ the floor's or a peer's, pair by pair.
type table struct {
	columns []string // in the order of the runs
	floors  map[string]bool
	cells   map[rowKey]map[string]*cell
	ratios  map[rowKey]ratioOf
}

type ratioOf struct {
	row rowKey
	to  string
}

// cell is one side's figures in one row by pair, or why a pair has none.
type cell struct {
	pairs map[int]float64
	texts map[int]string
}

const timedOut = "n/a (timed out)"

func buildTable(res *results) *table {
	t := &table{floors: map[string]bool{}, cells: map[rowKey]map[string]*cell{}, ratios: map[rowKey]ratioOf{}}
	keys := map[int][]string{} // every request key of a size
	for _, r := range res.Runs {
		if cs := r.ColdStart; cs != nil {
			keys[cs.Foos] = slices.AppendSeq(keys[cs.Foos], maps.Keys(cs.PerFoo))
		}
	}
	for _, r := range res.Runs {
		if !slices.Contains(t.columns, r.Column) {
			t.columns = append(t.columns, r.Column)
			t.floors[r.Column] = r.Floor
		}
		// set records the pair's figure in row k, or if not ok, why there is none.
		set := func(k rowKey, v float64, ok bool, otherwise string) {
			if t.cells[k] == nil {
				t.cells[k] = map[string]*cell{}
			}
			c := cmp.Or(t.cells[k][r.Column], &cell{pairs: map[int]float64{}, texts: map[int]string{}})
			t.cells[k][r.Column] = c
			if ok {
				c.pairs[r.Pair] = v
			} else {
				c.texts[r.Pair] = otherwise
			}
		}
		put := func(k rowKey, v float64) { set(k, v, true, "") }
		ratio := func(k, of rowKey, to bool) {
			if to {
				t.ratios[k] = ratioOf{of, r.Column}
			}
		}
		if cs := r.ColdStart; cs != nil {
			n, ok := cs.Foos, cs.Converged
			at := func(sub int, format string, args ...any) rowKey {
				return row(sectionColdStart, n, sub, format, append([]any{n}, args...)...)
			}
			seconds := at(0, "cold start, %d Foos (s)")
			set(seconds, cs.Seconds, ok, cs.timedOutText())
			ratio(at(1, "cold start, %d Foos ÷ %s (×)", r.Column), seconds, r.Floor && ok && cs.Seconds > 0)
			lastDeployment, lastStatus := at(2, "cold start, %d Foos: the last Deployment (s)"), at(3, "cold start, %d Foos: the last status (s)")
			set(lastDeployment, cs.DeploymentsSeconds, ok, timedOut)
			set(lastStatus, cs.StatusesSeconds, ok, timedOut)
			ratio(at(2, "cold start, %d Foos: the last Deployment ÷ %s (×)", r.Column), lastDeployment, r.Peer && ok)
			// What a wait before the first write (ours' election) leaves out.
			set(at(2, "cold start, %d Foos: the first Deployment (s)"), cs.FirstDeploymentSeconds, ok, timedOut)
			afterFirst := at(2, "cold start, %d Foos: the last Deployment after the first (s)")
			set(afterFirst, cs.DeploymentsSeconds-cs.FirstDeploymentSeconds, ok, timedOut)
			ratio(at(2, "cold start, %d Foos: the last Deployment after the first ÷ %s (×)", r.Column), afterFirst, r.Peer && ok)
			ratio(at(3, "cold start, %d Foos: the last status ÷ %s (×)", r.Column), lastStatus, r.Peer && ok)
			set(at(4, "requests per Foo, %d Foos: total"), cs.PerFooTotal, ok, timedOut)
			butEvents := at(4, "requests per Foo, %d Foos: all but Events")
			set(butEvents, cs.PerFooTotal-cs.EventWritesPerFoo, ok, timedOut)
			ratio(at(4, "requests per Foo, %d Foos: all but Events ÷ %s (×)", r.Column), butEvents, r.Peer && ok)
			for _, k := range keys[n] {
				set(at(5, "requests per Foo, %d Foos: %s", k), cs.PerFoo[k], ok, timedOut)
			}
			set(at(6, "events written per Foo, %d Foos"), cs.EventWritesPerFoo, ok, timedOut)
			if own := cs.ControllerCPUSeconds; own != 0 {
				ownCPU := at(7, "CPU per Foo, %d Foos: the controller (ms)")
				set(ownCPU, 1000*own/float64(n), ok, timedOut)
				ratio(at(8, "CPU per Foo, %d Foos: the controller ÷ %s (×)", r.Column), ownCPU, (r.Floor || r.Peer) && ok)
				// Every process's CPU moves with the pace of the round, kube-apiserver's too.
				set(at(9, "CPU per Foo, %d Foos: the controller ÷ kube-apiserver's (×)"), own/cs.APIServerCPUSeconds, ok && cs.APIServerCPUSeconds > 0, "n/a")
			}
			if cs.APIServerCPUSeconds > 0 {
				apiserverCPU := at(11, "CPU per Foo, %d Foos: kube-apiserver (ms)")
				set(apiserverCPU, 1000*cs.APIServerCPUSeconds/float64(n), ok, timedOut)
				ratio(at(12, "CPU per Foo, %d Foos: kube-apiserver ÷ %s (×)", r.Column), apiserverCPU, r.Floor && ok)
			}
			if r.Side.Shipped {
				set(at(13, "cold start, %d Foos: ours' Lease, the longest interval between renewals (s)"), cs.LongestRenewalSeconds, ok, timedOut)
			}
		}
		if st := r.Steady; st != nil {
			put(row(sectionSteady, 0, 0, "steady state, %d Foos: writes per minute, Leases apart", st.Foos), st.PerMinute)
			if st.LeasePerMinute > 0 {
				put(row(sectionSteady, 0, 1, "steady state, %d Foos: Lease writes per minute", st.Foos), st.LeasePerMinute)
			}
		}
		if m := r.Memory; m != nil {
			put(row(sectionMemory, 0, 0, "RSS, %d Foos (MiB)", m.Foos), mib(m.RSSBefore))
			if m.RSSPeakBefore > 0 {
				put(row(sectionMemory, 0, 0, "RSS, %d Foos: the peak from the start, the cold start's included (MiB)", m.Foos), mib(m.RSSPeakBefore))
			}
			if m.RSSFileBefore > 0 {
				put(row(sectionMemory, 0, 0, "RSS, %d Foos: of it mapped from files, the binary mostly (MiB)", m.Foos), mib(m.RSSFileBefore))
			}
			put(row(sectionMemory, 0, 1, "RSS, %d Foos + %d unrelated Deployments (MiB)", m.Foos, m.Unrelated), mib(m.RSSAfter))
			put(row(sectionMemory, 0, 2, "RSS per 10000 unrelated Deployments (MiB)"), mib(m.RSSPer10k))
			if m.APIServerRSS > 0 && m.EtcdRSS > 0 {
				put(row(sectionMemory, 0, 3, "RSS of kube-apiserver, %d Foos (MiB)", m.Foos), mib(m.APIServerRSS))
				put(row(sectionMemory, 0, 4, "RSS of etcd, %d Foos (MiB)", m.Foos), mib(m.EtcdRSS))
			}
		}
		if rs := r.Restart; rs != nil {
			put(row(sectionRestart, 0, 0, "restart, %d Foos converged: writes in the steady-state window after it, Leases apart", rs.Foos), rs.WritesTotal)
			set(row(sectionRestart, 0, 1, "restart, %d Foos converged: /readyz (s)", rs.Foos), rs.ReadySeconds, rs.ReadySeconds > 0, "no /readyz")
		}
		if rl := r.Relist; rl != nil {
			put(row(sectionRelist, 0, 0, "kube-apiserver restarted, %d Foos converged: writes in the steady-state window after it, Leases apart", rl.Foos), rl.WritesTotal)
			put(row(sectionRelist, 0, 1, "kube-apiserver restarted, %d Foos converged: kube-apiserver ready (s)", rl.Foos), rl.APIServerReadySeconds)
			put(row(sectionRelist, 0, 2, "kube-apiserver restarted, %d Foos converged: the controller's CPU in the window (s)", rl.Foos), rl.CPUSeconds)
			set(row(sectionRelist, 0, 3, "kube-apiserver restarted, %d Foos converged: the controller's peak RSS ÷ its RSS before (×)", rl.Foos), float64(rl.RSSPeak)/float64(rl.RSSBefore), rl.RSSBefore > 0, "")
		}
		if rd := r.Ready; rd != nil {
			at := func(sub int, format string, args ...any) rowKey {
				return row(sectionReady, 0, sub, "one new Foo on a warm controller, %d in turn, until %s: %s", rd.Samples, rd.Until, fmt.Sprintf(format, args...))
			}
			done := rd.TimedOut < rd.Samples
			p50 := at(0, "p50 (ms)")
			set(p50, rd.P50Ms, done, "none in time")
			set(at(2, "max (ms)"), rd.MaxMs, done, "none in time")
			set(at(3, "not in time"), float64(rd.TimedOut), true, "")
			ratio(at(1, "p50 ÷ %s (×)", r.Column), p50, (r.Floor || r.Peer) && done)
		}
		for _, rr := range r.Reactions {
			at := func(sub int, format string, args ...any) rowKey {
				return row(sectionReaction, rr.Rate, sub, "reaction, %d changes/s: %s", rr.Rate, fmt.Sprintf(format, args...))
			}
			delivered, sent := rr.Delivered > 0, rr.Sent-rr.Failed
			put(at(0, "sent per second"), rr.AchievedRate)
			set(at(1, "delivered within %.0f s (%%)", rr.DeadlineSeconds), 100*float64(rr.Delivered)/float64(max(sent, 1)), sent > 0, "none sent")
			p99 := at(3, "p99 (ms)")
			for k, v := range map[rowKey]float64{at(2, "p50 (ms)"): rr.P50Ms, p99: rr.P99Ms, at(4, "max (ms)"): rr.MaxMs,
				at(6, "p50 from the patch's response (ms)"): rr.AcceptedP50Ms, at(7, "p99 from the patch's response (ms)"): rr.AcceptedP99Ms} {
				set(k, v, delivered, "none delivered")
			}
			ratio(at(5, "p99 ÷ %s (×)", r.Column), p99, (r.Floor || r.Peer) && delivered && rr.P99Ms > 0)
		}
	}
	return t
}

// markdown renders the table: the controllers' columns, then the floor's.
func (t *table) markdown() string {
	isFloor := func(c string) bool { return t.floors[c] }
	notFloor := func(c string) bool { return !t.floors[c] }
	columns := slices.Concat(slices.DeleteFunc(slices.Clone(t.columns), isFloor), slices.DeleteFunc(slices.Clone(t.columns), notFloor))
	var b strings.Builder
	writeLine := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	writeLine(append([]string{"case"}, columns...))
	writeLine(append([]string{"---"}, slices.Repeat([]string{"--:"}, len(columns))...))

	rows := slices.AppendSeq(slices.Collect(maps.Keys(t.cells)), maps.Keys(t.ratios))
	slices.SortFunc(rows, func(a, b rowKey) int {
		return cmp.Or(cmp.Compare(a.section, b.section), cmp.Compare(a.n, b.n), cmp.Compare(a.sub, b.sub), strings.Compare(a.name, b.name))
	})
	for _, k := range rows {
		cells := t.cells[k]
		if r, ok := t.ratios[k]; ok {
			cells = map[string]*cell{}
			for _, c := range columns[:slices.Index(columns, r.to)] {
				cells[c] = divide(t.cells[r.row][c], t.cells[r.row][r.to])
			}
		}
		line := []string{k.name}
		for _, c := range columns {
			line = append(line, strings.ReplaceAll(cells[c].String(), "|", `\|`))
		}
		writeLine(line)
	}
	return b.String()
}

// String is the median of the pairs' figures and their range, "1.21 (1.08-1.40)", then
// the texts.
func (c *cell) String() string {
	if c == nil {
		return ""
	}
	var parts []string
	if len(c.pairs) > 0 {
		sorted := slices.Sorted(maps.Values(c.pairs))
		n := len(sorted)
		parts = append(parts, formatNumber((sorted[(n-1)/2]+sorted[n/2])/2))
		if sorted[0] != sorted[n-1] {
			parts[0] += fmt.Sprintf(" (%s-%s)", formatNumber(sorted[0]), formatNumber(sorted[n-1]))
		}
	}
	for _, pair := range slices.Sorted(maps.Keys(c.texts)) {
		if text := c.texts[pair]; len(c.pairs)+len(c.texts) > 1 {
			parts = append(parts, fmt.Sprintf("pair %d: %s", pair, text))
		} else {
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "; ")
}

func divide(a, b *cell) *cell {
	if a == nil || b == nil {
		return nil
	}
	out := &cell{pairs: map[int]float64{}}
	for pair, v := range a.pairs {
		if d := b.pairs[pair]; d != 0 {
			out.pairs[pair] = v / d
		}
	}
	if len(out.pairs) == 0 {
		return nil
	}
	return out
}

// formatNumber prints about three significant digits.
func formatNumber(v float64) string {
	if v == 0 {
		return "0"
	}
	decimals := 3
	for limit := 1.0; decimals > 0 && math.Abs(v) >= limit; limit *= 10 {
		decimals--
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

const docsBegin, docsEnd = "<!-- bench -->", "<!-- end of bench -->"

// resultsBeside is where --docs keeps the run's results.json: beside the page, under
// its name (docs/performance.md: docs/performance.json).
func resultsBeside(page string) string {
	return strings.TrimSuffix(page, filepath.Ext(page)) + ".json"
}

func docsBlock(args, table string, finished time.Time, machine, commit, results string) string {
	command := "make bench"
	if args != "" {
		command += " BENCH_ARGS='" + args + "'"
	}
	return fmt.Sprintf("\n`%s` on %s, %s, commit %s; each figure is the median of its rounds (--pairs), with their range; every figure of the run is in %s beside this page. Written by the bench; run it again to replace it.\n\n%s\n\n",
		command, finished.UTC().Format("2006-01-02 15:04 MST"), machine, commit, results, strings.TrimRight(table, "\n"))
}

// replaceBlock puts block into page between the marker lines, each once on a line of
// its own and in this order, in place of what was there.
func replaceBlock(page []byte, block string) ([]byte, error) {
	lines := bytes.SplitAfter(page, []byte("\n"))
	var begins, ends []int
	for i, line := range lines {
		switch string(bytes.TrimRight(line, "\r\n")) {
		case docsBegin:
			begins = append(begins, i)
		case docsEnd:
			ends = append(ends, i)
		}
	}
	if len(begins) != 1 || len(ends) != 1 || ends[0] < begins[0] {
		return nil, fmt.Errorf("the bench writes its table only between the lines %s and %s, once each and in this order; the page has %d and %d",
			docsBegin, docsEnd, len(begins), len(ends))
	}
	return slices.Concat(slices.Concat(lines[:begins[0]+1]...), []byte(block), slices.Concat(lines[ends[0]:]...)), nil
}

func writeDocs(path, args, table string, finished time.Time, commit string) error {
	page, err := os.ReadFile(path)
	if err == nil {
		page, err = replaceBlock(page, docsBlock(args, table, finished, machine(), commit, filepath.Base(resultsBeside(path))))
	}
	if err == nil {
		err = os.WriteFile(path, page, 0o644)
	}
	return err
}

func machine() string {
	out := fmt.Sprintf("%s/%s, %d cores", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	if _, rest, ok := strings.Cut(string(cpuinfo), "\nmodel name"); ok {
		line, _, _ := strings.Cut(rest, "\n")
		out += " (" + strings.TrimSpace(strings.TrimLeft(line, " \t:")) + ")"
	}
	meminfo, _ := os.ReadFile("/proc/meminfo")
	var kib int64
	if _, err := fmt.Sscanf(string(meminfo), "MemTotal: %d kB", &kib); err == nil {
		out += fmt.Sprintf(", %.0f GiB", float64(kib)/(1<<20))
	}
	return out
}

// commit is the repository's commit, "-dirty" with uncommitted changes.
func commit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if exec.CommandContext(ctx, "git", "-C", root, "diff", "--quiet", "HEAD", "--").Run() != nil {
		c += "-dirty"
	}
	return c
}
