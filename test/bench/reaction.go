package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// reactionCase times spec.replicas changes at rate per second from the merge patch to
// the watch event of the Deployment with that value.
type reactionCase struct{ rate int }

// reactionResult is how fast spec changes reached the Deployments at one rate.
type reactionResult struct {
	Foos         int     `json:"foos"`
	Rate         int     `json:"rate"`
	Seconds      float64 `json:"durationSeconds"`
	Sent         int     `json:"sent"`
	Failed       int     `json:"failed"`
	AchievedRate float64 `json:"achievedRate"`
	// Delivered changes reached the Deployment within the deadline, with their value
	// (Exact) or a later change's of the same Foo.
	Delivered       int     `json:"delivered"`
	Exact           int     `json:"exact"`
	DeadlineSeconds float64 `json:"deadlineSeconds"`
	// Latencies of the delivered changes from sending the patch to the watch event,
	// and from the patch's response: the controller's part alone.
	P50Ms, P99Ms, MaxMs                         float64
	AcceptedP50Ms, AcceptedP99Ms, AcceptedMaxMs float64
}

func (c reactionCase) run(ctx context.Context, s *session) error {
	cfg := s.cfg
	total := int(float64(c.rate) * cfg.reactionDuration.Seconds())
	r := reactionResult{Foos: len(s.foos), Rate: c.rate, Seconds: cfg.reactionDuration.Seconds(), DeadlineSeconds: cfg.reactionDeadline.Seconds()}
	tracker := newLatencyTracker()
	s.watch.observe(observer{deployment: func(d *appsv1.Deployment, at time.Time) {
		if d.Spec.Replicas != nil {
			tracker.observe(d.Name, *d.Spec.Replicas, at)
		}
	}})
	defer s.watch.observe(observer{})
	progressf("%s: changing %d Foos at %d/s for %v", s.name, len(s.foos), c.rate, cfg.reactionDuration)
	if err := s.sendChanges(ctx, tracker, c.rate, total); err != nil {
		return err
	}
	r.Sent = total
	err := s.waitUntil(ctx, cfg.reactionDeadline, func() bool { return tracker.remaining() == 0 }, func() string {
		return fmt.Sprintf("%d changes not delivered yet", tracker.remaining())
	})
	if err != nil {
		return err
	}
	tracker.record(&r)
	s.result.Reactions = append(s.result.Reactions, r)
	progressf("%s: delivered %d of %d changes (sent at %.0f/s); p50 %.0f ms, p99 %.0f ms, max %.0f ms; from the response p50 %.0f ms",
		s.name, r.Delivered, r.Sent-r.Failed, r.AchievedRate, r.P50Ms, r.P99Ms, r.MaxMs, r.AcceptedP50Ms)
	return nil
}

// sendChanges sends total changes at rate per second: change k goes to Foo k mod N at
// start + k/rate, by a goroutine per Foo, so that its changes go out in order. At most
// --reaction-inflight patches are in flight, so that a rate the apiserver cannot take
// does not bury the controller's requests under thousands of the bench's.
func (s *session) sendChanges(ctx context.Context, tracker *latencyTracker, rate, total int) error {
	if s.replicas == nil {
		s.replicas = slices.Repeat([]int32{initialReplicas}, len(s.foos))
	}
	queues := make([]chan struct{}, len(s.foos))
	inflight := make(chan struct{}, s.cfg.reactionInflight)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan struct{}, 64)
		wg.Go(func() {
			name := fooName(i)
			for range queues[i] {
				inflight <- struct{}{}
				s.replicas[i]++
				c := tracker.sent(name, s.replicas[i], time.Now())
				patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, s.replicas[i])
				patched, err := s.sample.SamplecontrollerV1alpha1().Foos(benchNamespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				<-inflight
				if err != nil {
					if tracker.failed(name, c) == 1 && ctx.Err() == nil {
						progressf("%s: patching Foo %s: %v", s.name, name, err)
					}
				} else {
					tracker.accepted(c, time.Now())
					if s.limit != nil && !s.limit.watching {
						s.limit.follow(i, patched)
					}
				}
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for k := 0; k < total && ctx.Err() == nil; k++ {
		if wait := time.Until(start.Add(time.Duration(k) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		queues[k%len(queues)] <- struct{}{}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return context.Cause(ctx)
}

// change is one spec.replicas change of one Foo.
type change struct {
	value     int32
	sent      time.Time // the patch request went out
	accepted  time.Time // its response came back; zero until then
	delivered time.Time // the Deployment showed this value or a later one; zero until then
	exact     bool      // the Deployment showed this very value
}

// latencyTracker matches spec changes to the Deployment watch events that carry them.
// Each Foo's replicas only grow, so a Deployment showing value v delivers every
// pending change up to v: a change the controller skipped for a newer one counts as
// delivered with it, but not as exact.
type latencyTracker struct {
	mu          sync.Mutex
	pending     map[string][]*change // by Deployment name, in increasing value
	all         []*change
	waiting     int
	first, last time.Time // when the first and the last change were sent
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

// record sets r's figures from the changes, given r.Sent. A latency from the patch's
// response is zero when the event came first.
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

// percentile is the p-th percentile (0 < p <= 100) of values by the nearest-rank
// method, or 0 for no values.
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
