package main

import (
	"context"
	"fmt"
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
	// Stalls is how the apiserver and etcd answered the stall probes, and what their
	// metrics counted, from just before the first change to just after the last was
	// delivered.
	Stalls *stallRecord `json:"stalls,omitempty"`
}

func (c reactionCase) run(ctx context.Context, s *session) error {
	cfg := s.cfg
	total := int(float64(c.rate) * cfg.reactionDuration.Seconds())
	r := reactionResult{Foos: len(s.foos), Rate: c.rate, Seconds: cfg.reactionDuration.Seconds(), DeadlineSeconds: cfg.reactionDeadline.Seconds()}
	tracker := newLatencyTracker()
	s.watch.observe(func(d *appsv1.Deployment, at time.Time) {
		if d.Spec.Replicas != nil {
			tracker.observe(d.Name, *d.Spec.Replicas, at)
		}
	}, nil)
	defer s.watch.observe(nil, nil)

	progressf("%s: changing %d Foos at %d/s for %v", s.name, len(s.foos), c.rate, cfg.reactionDuration)
	probes, err := startStallProbes(ctx, s)
	if err != nil {
		return err
	}
	defer probes.cancel() // on an error; stop has ended them otherwise
	profiled := func() {}
	if cfg.profile {
		profiled = startProfiles(ctx, s, fmt.Sprintf("reaction-%d", c.rate), cfg.reactionDuration)
	}
	err = s.sendChanges(ctx, tracker, c.rate, total)
	profiled()
	if err != nil {
		return err
	}
	r.Sent = total
	err = s.waitUntil(ctx, cfg.reactionDeadline, func() bool { return tracker.remaining() == 0 }, func() string {
		return fmt.Sprintf("%d changes not delivered yet", tracker.remaining())
	})
	if err != nil {
		return err
	}

	stalls, err := probes.stop(ctx, tracker)
	if err != nil {
		progressf("%s: %v", s.name, err)
	}
	r.Stalls = &stalls
	tracker.record(&r)
	if s.limit != nil {
		if r.WriteErrors = s.limit.takeFailures(); r.WriteErrors > 0 {
			progressf("%s: %d of the limit's writes failed at %d/s", s.name, r.WriteErrors, c.rate)
		}
	}
	s.result.Reactions = append(s.result.Reactions, r)
	progressf("%s: delivered %d of %d changes (sent at %.0f/s); p50 %.0f ms, p99 %.0f ms, max %.0f ms; from the response p50 %.0f ms; %s",
		s.name, r.Delivered, r.Sent-r.Failed, r.AchievedRate, r.P50Ms, r.P99Ms, r.MaxMs, r.AcceptedP50Ms, stalls.summary(r.Sent-r.Failed))
	return nil
}

// sendChanges sends total changes at rate per second: change k goes to Foo k mod N at
// start + k/rate. Each Foo has its own sending goroutine, so that its changes go out
// one after another and in order; at most --reaction-inflight patches are in flight,
// so that a rate the apiserver cannot take does not bury the controller's own requests
// under thousands of the bench's. The tracker records when each was sent, and which
// failed.
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
				patched, err := s.sample.SamplecontrollerV1alpha1().Foos(s.foos[i].Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
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
