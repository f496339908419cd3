package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// reaction is how fast spec changes reach the Deployments at one rate of changes.
type reaction struct {
	Foos         int     `json:"foos"`
	Rate         int     `json:"rate"`
	Seconds      float64 `json:"durationSeconds"`
	Sent         int     `json:"sent"`
	Failed       int     `json:"failed"`
	AchievedRate float64 `json:"achievedRate"`
	// Delivered changes reached the Deployment within the deadline, exactly or
	// through a later change of the same Foo; Exact ones were seen with their value.
	Delivered       int     `json:"delivered"`
	Exact           int     `json:"exact"`
	DeadlineSeconds float64 `json:"deadlineSeconds"`
	// Latencies of the delivered changes, from sending the patch to the watch event.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// The same from the patch's response: the controller's part, without the time the
	// apiserver took to accept the patch.
	AcceptedP50Ms float64 `json:"acceptedP50Ms"`
	AcceptedP99Ms float64 `json:"acceptedP99Ms"`
	AcceptedMaxMs float64 `json:"acceptedMaxMs"`
	// WriteErrors, for the limit, counts its Deployment and status writes that failed,
	// other than a status write superseded by a newer change of the same Foo.
	WriteErrors int `json:"writeErrors,omitempty"`
}

// follower hears, for the limit, that the i-th Foo was patched to foo, and makes the
// writes a controller makes for it, without blocking the sender. Without one, a
// controller process makes them.
type follower func(i int, foo *samplev1alpha1.Foo)

// runReaction changes spec.replicas of the --steady-foos Foos, round-robin, at rate
// changes per second for --reaction-duration, each change to a new (higher) value, and
// times each from sending its merge patch to the watch event of the Deployment with
// that value. It waits up to --reaction-deadline after the last change. name is the
// controller's column; proc is nil for the limit, whose follow makes the Deployment
// and status writes itself.
func runReaction(ctx context.Context, g *group, name string, proc *controllerProcess, follow follower, rate int) (reaction, error) {
	cfg := g.env.cfg
	n := cfg.steadyFoos
	total := int(float64(rate) * cfg.reactionDuration.Seconds())
	r := reaction{Foos: n, Rate: rate, Seconds: cfg.reactionDuration.Seconds(), DeadlineSeconds: cfg.reactionDeadline.Seconds()}
	if g.replicas == nil {
		g.replicas = make([]int32, n)
		for i := range g.replicas {
			g.replicas[i] = initialReplicas
		}
	}

	tracker := newLatencyTracker()
	g.watch.setHandlers(func(d *appsv1.Deployment, at time.Time) {
		if d.Spec.Replicas != nil {
			tracker.observe(d.Name, *d.Spec.Replicas, at)
		}
	}, nil)
	defer g.watch.setHandlers(nil, nil)

	progressf("%s: changing %d Foos at %d/s for %v", g.name, n, rate, cfg.reactionDuration)
	var prof *profiler
	if cfg.profile {
		prof = startProfiles(ctx, g, proc, fmt.Sprintf("reaction-%d", rate), cfg.reactionDuration)
	}
	first, last, failed, err := sendChanges(ctx, g, tracker, rate, total, follow)
	if prof != nil {
		prof.wait()
	}
	if err != nil {
		return r, err
	}
	r.Sent, r.Failed = total, failed
	if sendTime := last.Sub(first).Seconds(); sendTime > 0 {
		r.AchievedRate = float64(total-1) / sendTime
	}

	if err := waitDelivered(ctx, g, tracker, proc, cfg.reactionDeadline); err != nil {
		return r, err
	}
	l := tracker.delivered()
	r.Delivered, r.Exact = len(l.fromSent), l.exact
	r.P50Ms, r.P99Ms, r.MaxMs = percentile(l.fromSent, 50), percentile(l.fromSent, 99), percentile(l.fromSent, 100)
	r.AcceptedP50Ms, r.AcceptedP99Ms, r.AcceptedMaxMs = percentile(l.fromAccepted, 50), percentile(l.fromAccepted, 99), percentile(l.fromAccepted, 100)
	progressf("%s: %s delivered %d of %d changes (sent at %.0f/s); p50 %.0f ms, p99 %.0f ms, max %.0f ms; from the response p50 %.0f ms",
		g.name, name, r.Delivered, r.Sent-r.Failed, r.AchievedRate, r.P50Ms, r.P99Ms, r.MaxMs, r.AcceptedP50Ms)
	return r, nil
}

// sendChanges sends total changes at rate per second: change k goes to Foo k mod N at
// start + k/rate. Every Foo has its own sending goroutine, so that its changes go out
// one after another and in order; at most --reaction-inflight patches are in flight
// at once, so that a rate the apiserver cannot take does not bury the controller's
// own requests under thousands of the bench's. A follow hears of each accepted patch.
// It returns when the first and the last change were sent, and how many changes
// failed.
func sendChanges(ctx context.Context, g *group, tracker *latencyTracker, rate, total int, follow follower) (first, last time.Time, failed int, err error) {
	n := len(g.replicas)
	queues := make([]chan struct{}, n)
	inflight := make(chan struct{}, g.env.cfg.reactionInflight)
	var (
		wg      sync.WaitGroup
		nFailed atomic.Int64
		timesMu sync.Mutex
	)
	for i := range queues {
		queues[i] = make(chan struct{}, 64)
		wg.Go(func() {
			name := fooName(i)
			for range queues[i] {
				inflight <- struct{}{}
				g.replicas[i]++
				value := g.replicas[i]
				at := time.Now()
				c := tracker.sent(name, value, at)
				patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, value)
				patched, err := g.sample.SamplecontrollerV1alpha1().Foos(benchNamespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				<-inflight
				if err != nil {
					tracker.failed(name, c)
					if nFailed.Add(1) == 1 && ctx.Err() == nil {
						progressf("%s: patching Foo %s: %v", g.name, name, err)
					}
				} else {
					tracker.accepted(c, time.Now())
					if follow != nil {
						follow(i, patched)
					}
				}
				timesMu.Lock()
				if first.IsZero() || at.Before(first) {
					first = at
				}
				if at.After(last) {
					last = at
				}
				timesMu.Unlock()
			}
		})
	}

	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for k := 0; k < total && ctx.Err() == nil; k++ {
		if wait := time.Until(start.Add(time.Duration(k) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		queues[k%n] <- struct{}{}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return first, last, int(nFailed.Load()), ctx.Err()
}

// waitDelivered waits until every sent change was delivered, the deadline passes, or
// the controller exits (an error).
func waitDelivered(ctx context.Context, g *group, tracker *latencyTracker, proc *controllerProcess, deadline time.Duration) error {
	var exited <-chan struct{} // nil, never ready, without a process
	if proc != nil {
		exited = proc.exited
	}
	timeout := time.NewTimer(deadline)
	defer timeout.Stop()
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	report := time.NewTicker(progressInterval)
	defer report.Stop()
	for tracker.remaining() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return proc.exitedErr()
		case <-timeout.C:
			return nil
		case <-report.C:
			progressf("%s: %d changes not delivered yet", g.name, tracker.remaining())
		case <-check.C:
		}
	}
	return nil
}
