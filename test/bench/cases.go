package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// benchCase is one measurement on a session's cluster. It records its figures in
// s.result, from which the report lays out the table.
type benchCase interface {
	run(ctx context.Context, s *session) error
}

// coldStartCase runs first in every session, since the later cases need it
// converged; record says whether its figures are reported, events whether it waits
// for every Foo's DeploymentCreated Event too.
type coldStartCase struct{ record, events bool }

// coldStartResult is one cold start, or how far it got.
type coldStartResult struct {
	Foos      int  `json:"foos"`
	Converged bool `json:"converged"`
	// Seconds is the time to converge, or the time waited when it did not.
	Seconds         float64 `json:"seconds"`
	DeploymentsDone int     `json:"deploymentsDone"`
	StatusesDone    int     `json:"statusesDone"`
	// Arrivals are the seconds since the start at which each Deployment appeared;
	// StatusArrivals, at which each Foo's status first satisfied the rule;
	// EventArrivals, at which each Foo's DeploymentCreated Event came, when counted.
	// All sorted: where one side's time goes, write by write.
	Arrivals       []float64 `json:"arrivalSeconds"`
	StatusArrivals []float64 `json:"statusArrivalSeconds,omitempty"`
	EventArrivals  []float64 `json:"eventArrivalSeconds,omitempty"`
	// CPUSeconds is the CPU time each process on the machine used from the start
	// until the bench saw the cold start converge, by cpuProcesses' names.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	// Requests on Foos, Deployments and Events (but watches) from the start until
	// --settle after convergence, by "VERB resource[/subresource]".
	Requests          requestCounts      `json:"requests"`
	PerFoo            map[string]float64 `json:"requestsPerFoo"`
	PerFooTotal       float64            `json:"requestsPerFooTotal"`
	EventWritesPerFoo float64            `json:"eventWritesPerFoo"`
	// SyncsPerFoo is our controller's syncs per Foo by result
	// (sample_controller_syncs_total) when the bench saw the cold start converge;
	// nil for the limits and for controllers that do not export it.
	SyncsPerFoo map[string]float64 `json:"syncsPerFoo,omitempty"`
}

// arrivalText is when the first, the median and the last of each kind of write arrived,
// in seconds from the start: "Deployments 0.10/1.20/2.40, statuses ..., Events ...".
func (r coldStartResult) arrivalText() string {
	var parts []string
	for _, kind := range []struct {
		name  string
		times []float64
	}{{"Deployments", r.Arrivals}, {"statuses", r.StatusArrivals}, {"Events", r.EventArrivals}} {
		if n := len(kind.times); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f/%.2f/%.2f", kind.name, kind.times[0], kind.times[n/2], kind.times[n-1]))
		}
	}
	return "first/median/last s: " + strings.Join(parts, ", ")
}

func (c coldStartCase) run(ctx context.Context, s *session) error {
	requests, err := countRequests(ctx, s.cluster)
	if err != nil {
		return err
	}
	progressf("%s: starting the cold start of %d Foos", s.name, len(s.foos))
	cpuBefore := sampleCPU(s)
	start := time.Now()
	conv := newConvergence(s.foos, s.driver.rule(), start)
	s.watch.observe(conv.observeDeployment, conv.observeFoo)
	defer s.watch.observe(nil, nil)
	if c.events {
		conv.countEvents()
		s.watch.observeEvents(conv.observeEvent)
		defer s.watch.observeEvents(nil)
	}
	if err := s.driver.start(ctx, s); err != nil {
		return err
	}
	profiled := func() {}
	if s.cfg.profile {
		profiled = startProfiles(ctx, s, "coldstart", s.cfg.coldStartProfile)
	}
	if err := s.waitUntil(ctx, s.cfg.coldStartTimeout, conv.isDone, conv.progress); err != nil {
		return err
	}
	r := conv.result(time.Since(start))
	r.CPUSeconds = cpuSince(cpuBefore, sampleCPU(s))
	if s.ctrl != nil {
		if m, err := s.ctrl.Metrics(ctx); err == nil {
			r.SyncsPerFoo = perFooByLabel(m, syncsFamily, "result", r.Foos)
		}
	}
	profiled()
	s.converged = r.Converged
	if r.Converged {
		progressf("%s: converged %d Foos in %.2f s; %s; %s%s", s.name, r.Foos, r.Seconds, r.arrivalText(), cpuPerFooText(r.CPUSeconds, r.Foos), syncsText(r.SyncsPerFoo))
	} else {
		progressf("%s: %s", s.name, r.timedOutText())
	}

	// Events are sent in the background; --settle lets the last ones arrive.
	if err := sleep(ctx, s.cfg.settle); err != nil {
		return err
	}
	if r.Requests, err = requests(ctx); err != nil {
		return err
	}
	r.PerFoo = r.Requests.perFoo(r.Foos)
	r.PerFooTotal = r.Requests.total() / float64(r.Foos)
	r.EventWritesPerFoo = r.Requests.eventWrites().total() / float64(r.Foos)
	if c.record {
		s.result.ColdStart = &r
	}
	return nil
}

// syncsFamily counts our controller's syncs by result.
const syncsFamily = "sample_controller_syncs_total"

// perFooByLabel sums family's series by the value of label and divides each sum by
// foos; nil when the family has no series.
func perFooByLabel(m localcluster.Metrics, family, label string, foos int) map[string]float64 {
	var out map[string]float64
	for _, series := range m[family].GetMetric() {
		for _, l := range series.GetLabel() {
			if l.GetName() == label {
				if out == nil {
					out = map[string]float64{}
				}
				out[l.GetValue()] += series.GetCounter().GetValue() / float64(foos)
			}
		}
	}
	return out
}

// syncsText is "; syncs per Foo: conflict 0.01, stale 0.52, success 2.00", or "" for none.
func syncsText(perFoo map[string]float64) string {
	if len(perFoo) == 0 {
		return ""
	}
	var parts []string
	for _, result := range slices.Sorted(maps.Keys(perFoo)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", result, perFoo[result]))
	}
	return "; syncs per Foo: " + strings.Join(parts, ", ")
}

// timedOutText says how far a cold start got, e.g. "timed out: 812 of 1000 after 600 s".
func (r coldStartResult) timedOutText() string {
	return fmt.Sprintf("timed out: %d of %d after %.0f s", min(r.DeploymentsDone, r.StatusesDone), r.Foos, r.Seconds)
}

// steadyCase counts writes over --steady-window, which covers a resync: ours runs with
// --resync-period=30s, the classic one resyncs every 30 s itself.
type steadyCase struct{}

type steadyResult struct {
	Foos          int           `json:"foos"`
	WindowSeconds float64       `json:"windowSeconds"`
	Writes        requestCounts `json:"mutating"`
	PerMinute     float64       `json:"mutatingPerMinute"`
}

func (steadyCase) run(ctx context.Context, s *session) error {
	progressf("%s: counting writes for %v", s.name, s.cfg.steadyWindow)
	requests, err := countRequests(ctx, s.cluster)
	if err != nil {
		return err
	}
	begin := time.Now()
	if err := sleep(ctx, s.cfg.steadyWindow); err != nil {
		return err
	}
	counts, err := requests(ctx)
	if err != nil {
		return err
	}
	elapsed := time.Since(begin)
	writes := counts.mutating()
	s.result.Steady = &steadyResult{Foos: len(s.foos), WindowSeconds: elapsed.Seconds(), Writes: writes, PerMinute: writes.total() / elapsed.Minutes()}
	progressf("%s: %.0f writes in %.0f s", s.name, writes.total(), elapsed.Seconds())
	return nil
}

// memoryCase deletes its unrelated Deployments when done, so that the cases after it
// run against an apiserver with the same objects as the limit's.
type memoryCase struct{}

type memoryResult struct {
	Foos      int   `json:"foos"`
	Unrelated int   `json:"unrelatedDeployments"`
	RSSBefore int64 `json:"rssBeforeBytes"`
	RSSAfter  int64 `json:"rssAfterBytes"`
	// RSSPer10k is (after - before) scaled to 10000 unrelated Deployments.
	RSSPer10k float64 `json:"rssPer10kUnrelatedBytes"`
	// The heap figures are there only when the controller serves /metrics.
	HeapBefore *float64 `json:"heapInuseBeforeBytes,omitempty"`
	HeapAfter  *float64 `json:"heapInuseAfterBytes,omitempty"`
	HeapPer10k *float64 `json:"heapInusePer10kUnrelatedBytes,omitempty"`
	// TimedOut says how far the creation got when it ran out of --memory-timeout.
	TimedOut string `json:"timedOut,omitempty"`
}

func (memoryCase) run(ctx context.Context, s *session) error {
	if err := sleep(ctx, s.cfg.settle); err != nil {
		return err
	}
	rssBefore, heapBefore, _, err := s.readMemory(ctx)
	if err != nil {
		return err
	}
	progressf("%s: creating %d unrelated Deployments", s.name, s.cfg.unrelated)
	began := time.Now()
	created, err := s.createUnrelated(ctx)
	if err != nil {
		return err
	}
	m := memoryResult{Foos: len(s.foos), Unrelated: created}
	if created < s.cfg.unrelated {
		m.TimedOut = fmt.Sprintf("timed out: %d of %d created after %.0f s", created, s.cfg.unrelated, time.Since(began).Seconds())
		progressf("%s: %s", s.name, m.TimedOut)
	} else {
		progressf("%s: created %d unrelated Deployments in %v", s.name, created, time.Since(began).Round(time.Millisecond))
	}
	if err := sleep(ctx, s.cfg.settle); err != nil {
		return err
	}
	rssAfter, heapAfter, _, err := s.readMemory(ctx)
	if err != nil {
		return err
	}
	m.RSSBefore, m.RSSAfter, m.HeapBefore, m.HeapAfter = rssBefore, rssAfter, heapBefore, heapAfter
	if created > 0 {
		scale := 10000 / float64(created)
		m.RSSPer10k = float64(rssAfter-rssBefore) * scale
		if heapBefore != nil && heapAfter != nil {
			m.HeapPer10k = ptr.To((*heapAfter - *heapBefore) * scale)
		}
	}
	s.result.Memory = &m
	progressf("%s: RSS %.1f -> %.1f MiB", s.name, mib(m.RSSBefore), mib(m.RSSAfter))
	if err := s.deleteUnrelated(ctx); err != nil {
		// The figures stand; the cases after this one run with the Deployments left.
		progressf("%s: %v", s.name, err)
	}
	return context.Cause(ctx)
}

// rssCase reads our controller's RSS, and its Go heap in use, once its cold start has
// settled: what it holds for the Foos it manages, with nothing else on the cluster.
// With them, the CPU time it has used since it started: its cold start's, mostly.
type rssCase struct{}

type rssResult struct {
	Foos  int      `json:"foos"`
	Bytes int64    `json:"bytes"`
	Heap  *float64 `json:"heapInuseBytes,omitempty"`
	CPU   *float64 `json:"cpuSeconds,omitempty"`
}

func (rssCase) run(ctx context.Context, s *session) error {
	rss, heap, cpu, err := s.readMemory(ctx)
	if err != nil {
		return err
	}
	s.result.RSS = &rssResult{Foos: len(s.foos), Bytes: rss, Heap: heap, CPU: cpu}
	if cpu != nil {
		progressf("%s: RSS %.1f MiB with %d Foos, %.1f s of CPU used", s.name, mib(rss), len(s.foos), *cpu)
	} else {
		progressf("%s: RSS %.1f MiB with %d Foos", s.name, mib(rss), len(s.foos))
	}
	return nil
}

func mib[T int64 | float64](b T) float64 { return float64(b) / (1 << 20) }
