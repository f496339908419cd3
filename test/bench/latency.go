package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// change is one spec.replicas change of one Foo.
type change struct {
	value     int32
	sent      time.Time // the patch request went out
	accepted  time.Time // its response came back; zero until then
	delivered time.Time // the Deployment showed this value or a later one; zero until then
	exact     bool      // the Deployment showed this very value
}

// latencyTracker matches spec changes to the Deployment watch events that carry them.
// Each Foo's replicas only grow, one change after another, so a Deployment showing
// value v delivers every pending change up to v: a change the controller skipped
// because a newer one had already arrived counts as delivered when the newer one is,
// but not as exact.
type latencyTracker struct {
	mu      sync.Mutex
	pending map[string][]*change // by Deployment name, in increasing value
	all     []*change
	waiting int
	// first and last are when the first and the last change were sent, failures how
	// many of them failed.
	first, last time.Time
	failures    int
}

func newLatencyTracker() *latencyTracker {
	return &latencyTracker{pending: map[string][]*change{}}
}

// sent records a change before its request goes out, so that a watch event that
// arrives before the response still finds it.
func (t *latencyTracker) sent(deployment string, value int32, at time.Time) *change {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := &change{value: value, sent: at}
	t.pending[deployment] = append(t.pending[deployment], c)
	t.all = append(t.all, c)
	t.waiting++
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if at.After(t.last) {
		t.last = at
	}
	return c
}

func (t *latencyTracker) accepted(c *change, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.accepted = at
}

// failed forgets a change whose patch failed and returns how many failed so far.
func (t *latencyTracker) failed(deployment string, c *change) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures++
	p := t.pending[deployment]
	if i := slices.Index(p, c); i >= 0 {
		t.pending[deployment] = slices.Delete(p, i, i+1)
		t.waiting--
	}
	t.all = slices.DeleteFunc(t.all, func(o *change) bool { return o == c })
	return t.failures
}

// observe takes a Deployment's replicas as the watch delivered it at at.
func (t *latencyTracker) observe(deployment string, replicas int32, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pending[deployment]
	n := 0
	for n < len(p) && p[n].value <= replicas {
		p[n].delivered = at
		p[n].exact = p[n].value == replicas
		n++
	}
	if n > 0 {
		t.pending[deployment] = p[n:]
		t.waiting -= n
	}
}

func (t *latencyTracker) remaining() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting
}

// record sets r's figures from the changes, given r.Sent: the failures, the rate
// achieved, how many were delivered, how many with their own value, and their
// latencies. Latencies from the patch's response leave out the time the apiserver took
// to accept it (zero when the event came first).
func (t *latencyTracker) record(r *reactionResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Failed = t.failures
	if sendTime := t.last.Sub(t.first).Seconds(); sendTime > 0 {
		r.AchievedRate = float64(r.Sent-1) / sendTime
	}
	var fromSent, fromAccepted []float64
	for _, c := range t.all {
		if c.delivered.IsZero() {
			continue
		}
		fromSent = append(fromSent, milliseconds(c.delivered.Sub(c.sent)))
		if !c.accepted.IsZero() {
			fromAccepted = append(fromAccepted, milliseconds(max(0, c.delivered.Sub(c.accepted))))
		}
		if c.exact {
			r.Exact++
		}
	}
	r.Delivered = len(fromSent)
	r.P50Ms, r.P99Ms, r.MaxMs = percentile(fromSent, 50), percentile(fromSent, 99), percentile(fromSent, 100)
	r.AcceptedP50Ms, r.AcceptedP99Ms, r.AcceptedMaxMs = percentile(fromAccepted, 50), percentile(fromAccepted, 99), percentile(fromAccepted, 100)
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile returns the p-th percentile (0 < p <= 100) of values by the nearest-rank
// method: the smallest value that at least p% of the values are at or below. It is 0
// for no values.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}
