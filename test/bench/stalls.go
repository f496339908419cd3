package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	// probeEvery is how often the stall probes ask.
	probeEvery = 50 * time.Millisecond
	// stallThreshold is how long a probe's answer takes before the bench calls it a
	// stall. Unloaded, etcd's /health answers in about a millisecond; at 100 changes a
	// second a window with no stall has a p99 of 30-55 ms (the 2026-11-26 runs).
	stallThreshold = 50 * time.Millisecond
)

// stallRecord is how the control plane answered while a reaction window ran: the
// probes that answered slowly, and the apiserver's and etcd's own counts of what can
// stall them, read before and after.
type stallRecord struct {
	// *Probes is how many times each probe asked. The apiserver's probe reads the
	// session's Namespace (no resourceVersion: a read from etcd) on a connection of
	// its own; etcd's asks its /health, which reads from its store. *Stalls are the
	// answers that took longer than stallThreshold, or failed; *MaxMs the slowest.
	APIServerProbes int          `json:"apiserverProbes"`
	EtcdProbes      int          `json:"etcdProbes"`
	APIServerStalls []probeStall `json:"apiserverStalls,omitempty"`
	APIServerMaxMs  float64      `json:"apiserverMaxMs"`
	EtcdStalls      []probeStall `json:"etcdStalls,omitempty"`
	EtcdMaxMs       float64      `json:"etcdMaxMs"`
	// The apiserver's garbage collections in the window and the CPU they took from
	// its other goroutines (the runtime's estimate: assists, dedicated mark workers
	// and pauses, not the idle mark workers).
	// Of that CPU, the assists: time the goroutines that allocated spent marking
	// instead of serving. And the live heap after the window's last collection.
	APIServerGCCycles        float64 `json:"apiserverGCCycles"`
	APIServerGCCPUSeconds    float64 `json:"apiserverGCCPUSeconds"`
	APIServerGCAssistSeconds float64 `json:"apiserverGCAssistSeconds"`
	APIServerLiveHeapBytes   float64 `json:"apiserverLiveHeapBytes"`
	// WatchCacheCapacity is how many events the apiserver's watch caches of the Foos
	// and the Deployments can hold after the window (they keep each resource's latest
	// events for watchers to resume from); nil if it does not export them. An event
	// that arrives at a full cache doubles it if the cache's oldest event is younger
	// than 75 s, and halves it if fewer than a quarter of its capacity arrived in the
	// last 75 s; nothing else evicts, so events outlive the side that caused them and
	// a full cache keeps all its events' objects in the heap.
	WatchCacheCapacity *watchCacheCapacity `json:"watchCacheCapacity,omitempty"`
	// etcd's compactions (the apiserver asks for one every 5 minutes, a restarted
	// one first after 5 to 10; the bench compacts before each ratio side) and snapshots
	// (one every --snapshot-count applied entries) in the window.
	EtcdCompactions float64 `json:"etcdCompactions"`
	EtcdSnapshots   float64 `json:"etcdSnapshots"`
	// Writes are the writes the apiserver served on the Foos, Deployments and Events
	// in the window, by "VERB resource[/subresource]": every side's and the bench's
	// patches alike.
	Writes requestCounts `json:"writes,omitempty"`
	// MetricsError says why the figures above, from the metrics, are missing.
	MetricsError string `json:"metricsError,omitempty"`
	// SlowChanges are the delivered changes that took longer than slowChange, and
	// SlowInStalls those of them under way while a probe stalled.
	SlowChanges  int `json:"slowChanges"`
	SlowInStalls int `json:"slowInStalls"`
	// P99OutsideStallsMs is the p99 of the delivered changes that no stall overlapped,
	// OutsideStalls how many they were.
	P99OutsideStallsMs float64 `json:"p99OutsideStallsMs"`
	OutsideStalls      int     `json:"outsideStalls"`
}

// slowChange is the latency from which a change counts as slow: two to three times
// the p99 of a window at 100 changes a second with no stall.
const slowChange = 100 * time.Millisecond

// probeStall is one probe that took longer than stallThreshold, or failed.
type probeStall struct {
	At     time.Time `json:"at"`
	Ms     float64   `json:"ms"`
	Failed string    `json:"failed,omitempty"`
}

func (p probeStall) end() time.Time { return p.At.Add(time.Duration(p.Ms * float64(time.Millisecond))) }

// stallProbes asks the apiserver and etcd every probeEvery until stopped, and reads
// their metrics at both ends.
type stallProbes struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	cluster *localcluster.Cluster
	close   func() // closes the apiserver probe's connection

	mu              sync.Mutex
	apiserver, etcd probeLog

	before [2]localcluster.Metrics // the apiserver's, etcd's
}

// probeLog is what one probe saw: how often it asked, its stalls and its slowest answer.
type probeLog struct {
	asked   int
	stalls  []probeStall
	slowest time.Duration
}

// probeTimeout ends a probe that has no answer: a stall as long as that.
const probeTimeout = 30 * time.Second

// The families stop reads, which the runtime and etcd export; a family missing would
// read as 0, so the probes do not start without them.
var (
	apiserverFamilies = []string{"go_gc_cycles_total_gc_cycles_total", "go_cpu_classes_gc_mark_assist_cpu_seconds_total",
		"go_cpu_classes_gc_mark_dedicated_cpu_seconds_total", "go_cpu_classes_gc_pause_cpu_seconds_total", "go_gc_heap_live_bytes"}
	etcdFamilies = []string{"etcd_debugging_mvcc_db_compaction_total_duration_milliseconds", "etcd_debugging_snap_save_total_duration_seconds"}
)

// startStallProbes reads the apiserver's and etcd's metrics, then starts both probes
// on s's cluster; stop ends them and returns what they saw, with the metrics'
// differences.
func startStallProbes(ctx context.Context, s *session) (*stallProbes, error) {
	// A connection of its own: a probe queued behind the bench's patches on the
	// shared one would time the bench's client, not the apiserver.
	cfg, httpClient, err := ownConnection(s, "sample-controller-bench-stall-probe")
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	probeAPIServer := func(ctx context.Context) error {
		_, err := kube.CoreV1().Namespaces().Get(ctx, s.namespace, metav1.GetOptions{})
		return err
	}
	probeEtcd := func(ctx context.Context) error {
		_, err := getBody(ctx, s.cluster.EtcdURL()+"/health")
		return err
	}
	p := &stallProbes{cluster: s.cluster, close: httpClient.CloseIdleConnections}
	if p.before[0], err = s.cluster.APIServerMetrics(ctx); err == nil {
		err = requireFamilies(p.before[0], apiserverFamilies)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	if p.before[1], err = localcluster.ScrapeMetrics(ctx, http.DefaultClient, s.cluster.EtcdURL()+"/metrics"); err == nil {
		err = requireFamilies(p.before[1], etcdFamilies)
	}
	if err != nil {
		return nil, fmt.Errorf("reading etcd's metrics: %w", err)
	}
	// One answer each first, unrecorded: the connections' handshakes are no stall.
	if err := errors.Join(probeAPIServer(ctx), probeEtcd(ctx)); err != nil {
		return nil, fmt.Errorf("the stall probes' first answers: %w", err)
	}

	ctx, p.cancel = context.WithCancel(ctx)
	ask := func(log *probeLog, probe func(context.Context) error) {
		ticker := time.NewTicker(probeEvery)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			at := time.Now()
			probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
			err := probe(probeCtx)
			cancel()
			took := time.Since(at)
			stopped := ctx.Err() != nil
			if stopped && took <= stallThreshold {
				return // ended by stop, not slow
			}
			p.mu.Lock()
			log.asked++
			log.slowest = max(log.slowest, took)
			if took > stallThreshold || err != nil {
				st := probeStall{At: at, Ms: milliseconds(took)}
				switch {
				case stopped:
					st.Failed = "no answer yet when the window ended"
				case err != nil:
					st.Failed = err.Error()
				}
				log.stalls = append(log.stalls, st)
			}
			p.mu.Unlock()
			if stopped {
				return
			}
		}
	}
	p.wg.Go(func() { ask(&p.apiserver, probeAPIServer) })
	p.wg.Go(func() { ask(&p.etcd, probeEtcd) })
	return p, nil
}

// watchCacheFamily is the apiserver's gauge of each watch cache's capacity: alpha,
// so the bench does without it when it is gone.
const watchCacheFamily = "watch_cache_capacity"

// watchCacheCapacity is how many events the apiserver's watch caches of the Foos and
// the Deployments can hold.
type watchCacheCapacity struct {
	Foos        float64 `json:"foos"`
	Deployments float64 `json:"deployments"`
}

// String is the two capacities, or "not read".
func (c *watchCacheCapacity) String() string {
	if c == nil {
		return "not read"
	}
	return fmt.Sprintf("%.0f, %.0f", c.Foos, c.Deployments)
}

// readWatchCache reads the capacities from the apiserver's metrics m; nil if either is
// missing.
func readWatchCache(m localcluster.Metrics) *watchCacheCapacity {
	foos := map[string]string{"group": "samplecontroller.k8s.io", "resource": "foos"}
	deployments := map[string]string{"group": "apps", "resource": "deployments"}
	if !m.Has(watchCacheFamily, foos) || !m.Has(watchCacheFamily, deployments) {
		return nil
	}
	return &watchCacheCapacity{Foos: m.Sum(watchCacheFamily, foos), Deployments: m.Sum(watchCacheFamily, deployments)}
}

// requireFamilies says which of names m lacks.
func requireFamilies(m localcluster.Metrics, names []string) error {
	var missing []string
	for _, name := range names {
		if _, ok := m[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no %s", strings.Join(missing, ", "))
	}
	return nil
}

// stop ends the probes and returns what they saw; the tracker's changes say which
// slow changes fell in a stall.
func (p *stallProbes) stop(ctx context.Context, tracker *latencyTracker) (stallRecord, error) {
	p.cancel()
	p.wg.Wait()
	p.close()
	after, apiErr := p.cluster.APIServerMetrics(ctx)
	etcdAfter, etcdErr := localcluster.ScrapeMetrics(ctx, http.DefaultClient, p.cluster.EtcdURL()+"/metrics")

	p.mu.Lock()
	defer p.mu.Unlock()
	r := stallRecord{
		APIServerProbes: p.apiserver.asked,
		APIServerStalls: p.apiserver.stalls,
		APIServerMaxMs:  milliseconds(p.apiserver.slowest),
		EtcdProbes:      p.etcd.asked,
		EtcdStalls:      p.etcd.stalls,
		EtcdMaxMs:       milliseconds(p.etcd.slowest),
	}
	tracker.stalls(&r)
	if err := errors.Join(apiErr, etcdErr); err != nil {
		// The probes' findings stand; only the counts from the metrics are missing.
		r.MetricsError = err.Error()
		return r, fmt.Errorf("reading the metrics after the window: %w", err)
	}
	grew := func(before, after localcluster.Metrics, name string) float64 {
		return after.Sum(name, nil) - before.Sum(name, nil)
	}
	// The collector's CPU but for its idle mark workers, which use only time no other
	// goroutine wanted.
	for _, class := range []string{"mark_assist", "mark_dedicated", "pause"} {
		r.APIServerGCCPUSeconds += grew(p.before[0], after, "go_cpu_classes_gc_"+class+"_cpu_seconds_total")
	}
	r.APIServerGCCycles = grew(p.before[0], after, "go_gc_cycles_total_gc_cycles_total")
	r.APIServerGCAssistSeconds = grew(p.before[0], after, "go_cpu_classes_gc_mark_assist_cpu_seconds_total")
	r.APIServerLiveHeapBytes = after.Sum("go_gc_heap_live_bytes", nil)
	r.WatchCacheCapacity = readWatchCache(after)
	r.EtcdCompactions = grew(p.before[1], etcdAfter, "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds")
	r.EtcdSnapshots = grew(p.before[1], etcdAfter, "etcd_debugging_snap_save_total_duration_seconds")
	r.Writes = apiserverRequests(after, countedResources).minus(apiserverRequests(p.before[0], countedResources)).mutating()
	return r, nil
}

// stalls sets r's counts of slow changes, and the p99 of those under way while no
// probe stalled, from r's probe stalls.
func (t *latencyTracker) stalls(r *stallRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	stalls := append(append([]probeStall(nil), r.APIServerStalls...), r.EtcdStalls...)
	var outside []float64
	for _, c := range t.all {
		if c.delivered.IsZero() {
			continue
		}
		in := false
		for _, st := range stalls {
			if st.At.Before(c.delivered) && st.end().After(c.sent) {
				in = true
				break
			}
		}
		took := c.delivered.Sub(c.sent)
		if took > slowChange {
			r.SlowChanges++
			if in {
				r.SlowInStalls++
			}
		}
		if !in {
			outside = append(outside, milliseconds(took))
		}
	}
	r.OutsideStalls = len(outside)
	r.P99OutsideStallsMs = percentile(outside, 99)
}

// summary is the record in one line, for the bench's progress; changes is how many
// the apiserver accepted in the window.
func (r stallRecord) summary(changes int) string {
	return fmt.Sprintf("stalls (probes over %v) apiserver %d (slowest %.0f ms), etcd %d (slowest %.0f ms); %d changes over %v, %d of them in a stall; p99 outside stalls %.0f ms; apiserver GC %.0f cycles, %.2f s of CPU (%.2f s assists), %.0f MiB live; watch cache capacity (Foos, Deployments) %s; etcd %.0f compactions, %.0f snapshots; per change %s",
		stallThreshold, len(r.APIServerStalls), r.APIServerMaxMs, len(r.EtcdStalls), r.EtcdMaxMs,
		r.SlowChanges, slowChange, r.SlowInStalls, r.P99OutsideStallsMs,
		r.APIServerGCCycles, r.APIServerGCCPUSeconds, r.APIServerGCAssistSeconds, mib(r.APIServerLiveHeapBytes),
		r.WatchCacheCapacity, r.EtcdCompactions, r.EtcdSnapshots,
		r.writesPerChange(changes, "%s Deployment updates, %s status writes"))
}

// writesPerChange formats how many Deployment updates and Foo status writes the
// window had per change accepted (changes): a side that writes each once per change
// has 1 and 1. Refused writes count too, a status write superseded by a newer change
// (a conflict) among them.
func (r stallRecord) writesPerChange(changes int, format string) string {
	if changes <= 0 || r.MetricsError != "" {
		return "n/a"
	}
	per := func(key string) string { return formatNumber(r.Writes[key] / float64(changes)) }
	return fmt.Sprintf(format, per("PUT deployments"), per("PUT foos/status"))
}

// ratioStallsMarkdown is the ratio case's fourth table: every reaction window of every
// side, in the order they ran, with its p99, the p99 of the changes no stall touched,
// and what the probes and metrics saw meanwhile; then, for every side but the limit,
// the median and range of its p99 outside stalls over the limit's in the same pair.
// The target is the p99 itself; this table says whether a side's slow changes
// coincided with stalls of the control plane.
func ratioStallsMarkdown(res *results) string {
	type key struct{ foos, rate, pair int }
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	type outsideKey struct {
		foos, rate int
		side       string
	}
	outside := map[key]map[string]float64{} // p99 outside stalls, by side
	var order []outsideKey                  // the sides other than the limit, as they first ran
	rows := 0
	for _, r := range res.Runs {
		side, ok := r.Driver.(ratioSide)
		if !ok {
			continue
		}
		for _, rr := range r.Reactions {
			st := rr.Stalls
			if st == nil {
				continue
			}
			if rows == 0 {
				header := []string{"reaction windows, Foos", "changes/s", "pair", "side", "p99 (ms)", "p99 outside stalls (ms)",
					"changes in no stall", "changes over " + fmt.Sprint(slowChange) + ": in a stall",
					"apiserver probe: stalls over " + fmt.Sprint(stallThreshold) + ", slowest (ms)", "etcd probe: stalls, slowest (ms)",
					"apiserver GC: cycles, CPU (s), of it assists (s)", "apiserver live heap (MiB)",
					"apiserver watch cache capacity: Foos, Deployments", "etcd: compactions, snapshots",
					"per change: Deployment updates, status writes"}
				writeLine(header...)
				writeLine(slices.Repeat([]string{"--:"}, len(header))...)
			}
			rows++
			outsideP99 := "none"
			if st.OutsideStalls > 0 {
				outsideP99 = formatNumber(st.P99OutsideStallsMs)
			}
			metrics := []string{
				fmt.Sprintf("%.0f, %s, %s", st.APIServerGCCycles, formatNumber(st.APIServerGCCPUSeconds), formatNumber(st.APIServerGCAssistSeconds)),
				formatNumber(mib(st.APIServerLiveHeapBytes)),
				st.WatchCacheCapacity.String(),
				fmt.Sprintf("%.0f, %.0f", st.EtcdCompactions, st.EtcdSnapshots),
				st.writesPerChange(rr.Sent-rr.Failed, "%s, %s"),
			}
			if st.MetricsError != "" {
				metrics = slices.Repeat([]string{"not read"}, len(metrics))
			}
			writeLine(append([]string{fmt.Sprint(r.Foos), fmt.Sprint(rr.Rate), fmt.Sprint(side.Pair), side.side(),
				p99Text(rr), outsideP99,
				fmt.Sprintf("%d of %d", st.OutsideStalls, rr.Delivered),
				fmt.Sprintf("%d of %d", st.SlowInStalls, st.SlowChanges),
				fmt.Sprintf("%d, %s", len(st.APIServerStalls), formatNumber(st.APIServerMaxMs)),
				fmt.Sprintf("%d, %s", len(st.EtcdStalls), formatNumber(st.EtcdMaxMs))}, metrics...)...)
			k := key{r.Foos, rr.Rate, side.Pair}
			if outside[k] == nil {
				outside[k] = map[string]float64{}
			}
			if st.OutsideStalls > 0 {
				outside[k][side.side()] = st.P99OutsideStallsMs
			}
			if o := (outsideKey{r.Foos, rr.Rate, side.side()}); side.side() != "limit" && !slices.Contains(order, o) {
				order = append(order, o)
			}
		}
	}
	for _, o := range order {
		var ratios []float64
		for k, bySide := range outside {
			if k.foos != o.foos || k.rate != o.rate {
				continue
			}
			if l, ok := bySide["limit"]; ok && l > 0 {
				if v, ok := bySide[o.side]; ok {
					ratios = append(ratios, v/l)
				}
			}
		}
		writeLine(fmt.Sprint(o.foos), fmt.Sprint(o.rate), "median of the pairs (range)", o.side+" ÷ limit", "", spread(ratios),
			"", "", "", "", "", "", "", "", "")
	}
	return b.String()
}
