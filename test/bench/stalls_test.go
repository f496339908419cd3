package main

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

func TestLatencyTrackerStalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tr := newLatencyTracker()
	// Four Foos, one change each: sent at 0, 100, 300 and 600 ms.
	for i, sent := range []int{0, 100, 300, 600} {
		tr.sent(fooName(i), 2, ms(sent))
	}
	tr.observe(fooName(0), 2, ms(20))                                       // 20 ms, before the stall
	tr.observe(fooName(1), 2, ms(400))                                      // 300 ms, under way through the stall
	tr.observe(fooName(2), 2, ms(320))                                      // 20 ms, inside the stall's span
	tr.observe(fooName(3), 2, ms(750))                                      // 150 ms, slow with no stall
	r := stallRecord{APIServerStalls: []probeStall{{At: ms(150), Ms: 160}}} // 150-310 ms

	tr.stalls(&r)
	if r.SlowChanges != 2 || r.SlowInStalls != 1 {
		t.Errorf("slow changes %d, %d in a stall; want 2, 1", r.SlowChanges, r.SlowInStalls)
	}
	// Outside: the first (20 ms) and the last (150 ms); the nearest-rank p99 of two is
	// the larger.
	if r.OutsideStalls != 2 || r.P99OutsideStallsMs != 150 {
		t.Errorf("%d changes outside stalls, p99 %v ms; want 2, 150", r.OutsideStalls, r.P99OutsideStallsMs)
	}

	// A stall of etcd counts as one of the apiserver does; one that ended before a
	// change was sent, or began after it arrived, does not touch it.
	r = stallRecord{EtcdStalls: []probeStall{{At: ms(610), Ms: 60}}, APIServerStalls: []probeStall{{At: ms(21), Ms: 70}}}
	tr.stalls(&r)
	if r.SlowInStalls != 1 || r.OutsideStalls != 3 {
		t.Errorf("etcd's stall: %d slow in a stall, %d outside; want 1, 3", r.SlowInStalls, r.OutsideStalls)
	}

	// A stall that ends as a change is sent, or begins as it arrives, only touches it:
	// not under way together. A change not delivered counts nowhere.
	tr.sent(fooName(4), 2, ms(900))
	r = stallRecord{APIServerStalls: []probeStall{{At: ms(-50), Ms: 50}, {At: ms(750), Ms: 60}}}
	tr.stalls(&r)
	if r.OutsideStalls != 4 || r.SlowChanges != 2 || r.SlowInStalls != 0 {
		t.Errorf("touching stalls: %d outside, %d slow, %d in a stall; want 4, 2, 0", r.OutsideStalls, r.SlowChanges, r.SlowInStalls)
	}
}

func TestRatioStallsMarkdown(t *testing.T) {
	ours := &controller{Name: ourName}
	run := func(c *controller, pair int, p99, outside float64) runResult {
		return runResult{Driver: ratioSide{Ours: c, Pair: pair}, Foos: 1000, Reactions: []reactionResult{{
			Rate: 100, Sent: 6000, Delivered: 6000, P99Ms: p99,
			Stalls: &stallRecord{P99OutsideStallsMs: outside, OutsideStalls: 5900, SlowChanges: 80, SlowInStalls: 70,
				APIServerStalls: []probeStall{{Ms: 300}, {Ms: 120}}, APIServerMaxMs: 300, EtcdMaxMs: 4,
				APIServerGCCycles: 40, APIServerGCCPUSeconds: 9.5, APIServerGCAssistSeconds: 2.25,
				APIServerLiveHeapBytes: 300 << 20, WatchCacheCapacity: &watchCacheCapacity{Foos: 16384, Deployments: 8192},
				EtcdCompactions: 1, EtcdSnapshots: 2,
				// The bench's patches are writes too, but neither of the two counted.
				Writes: requestCounts{"PUT deployments": 6000, "PUT foos/status": 6600, "PATCH foos": 6000}},
		}}}
	}
	res := &results{Runs: []runResult{
		run(ours, 1, 400, 33), run(nil, 1, 30, 30),
		run(nil, 2, 500, 40), run(ours, 2, 35, 36),
		run(ours, 3, 900, 0), run(nil, 3, 30, 30), // every change of ours in a stall: no ratio
	}}
	res.Runs[4].Reactions[0].Stalls.OutsideStalls = 0
	res.Runs[5].Reactions[0].Stalls.MetricsError = "connection refused"
	got := ratioStallsMarkdown(res)
	for _, want := range []string{
		"| 1000 | 100 | 1 | ours | 400 | 33.0 | 5900 of 6000 | 70 of 80 | 2, 300 | 0, 4.00 | 40, 9.50, 2.25 | 300 | 16384, 8192 | 1, 2 | 1.00, 1.10 |\n",
		"| 1000 | 100 | 2 | limit | 500 | 40.0 |",
		"| 1000 | 100 | 3 | ours | 900 | none | 0 of 6000 |",
		"| 1000 | 100 | 3 | limit | 30.0 | 30.0 | 5900 of 6000 | 70 of 80 | 2, 300 | 0, 4.00 | not read | not read | not read | not read | not read |\n",
		// 33/30 and 36/40; pair 3 has none.
		"| 1000 | 100 | median of the pairs (range) | ours ÷ limit |  | 1.00 (0.90-1.10) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ratioStallsMarkdown has no line with %q:\n%s", want, got)
		}
	}
	requireAligned(t, got)
	if strings.Count(got, "median of the pairs") != 1 {
		t.Errorf("want one summary row, for ours (none for the limit against itself):\n%s", got)
	}
	if ratioStallsMarkdown(&results{}) != "" {
		t.Error("a run with no reactions has a stalls table")
	}
}

func TestReadWatchCache(t *testing.T) {
	const family = "# TYPE watch_cache_capacity gauge\n"
	const foos = `watch_cache_capacity{group="samplecontroller.k8s.io",resource="foos"} 16384` + "\n"
	for _, tc := range []struct {
		name, metrics string
		want          string
	}{
		{"both, beside others of the same resource or group", family +
			`watch_cache_capacity{group="",resource="events"} 4096` + "\n" +
			`watch_cache_capacity{group="",resource="foos"} 1` + "\n" +
			`watch_cache_capacity{group="apps",resource="deployments"} 8192` + "\n" + foos, "16384, 8192"},
		{"the Deployments' missing", family + foos, "not read"},
		{"no such family", "# TYPE go_gc_heap_live_bytes gauge\ngo_gc_heap_live_bytes 1\n", "not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := localcluster.ParseMetrics(strings.NewReader(tc.metrics))
			if err != nil {
				t.Fatal(err)
			}
			if got := readWatchCache(m).String(); got != tc.want {
				t.Errorf("readWatchCache = %s, want %s", got, tc.want)
			}
		})
	}
}
