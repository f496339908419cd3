package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// benchCase is one measurement on a session's cluster, recorded in s.result.
type benchCase struct {
	name string
	run  func(ctx context.Context, s *session) error
}

// laterCases are the cases of a controller's process, in order.
var laterCases = []benchCase{{"steady", steady}, {"memory", memory}, {"restart", restart}, {"relist", relist}}

type coldStartResult struct {
	Foos, DeploymentsDone, StatusesDone int
	Converged                           bool
	// Seconds is the time to converge, or the time waited when it did not.
	Seconds, DeploymentsSeconds, StatusesSeconds float64
	// Requests from the start until --settle after convergence.
	Requests                       requestCounts
	PerFoo                         map[string]float64
	PerFooTotal, EventWritesPerFoo float64
	// CPU until convergence: the controller's since it started, the others' since the
	// side started.
	ControllerCPUSeconds, APIServerCPUSeconds float64
	// When the first Deployment was done; ours as shipped: the longest interval between
	// two renewals of its Lease until --settle after convergence.
	FirstDeploymentSeconds, LongestRenewalSeconds float64
}

func (r coldStartResult) timedOutText() string {
	return fmt.Sprintf("timed out: %d of %d after %.0f s", min(r.DeploymentsDone, r.StatusesDone), r.Foos, r.Seconds)
}

func coldStart(ctx context.Context, s *session) error {
	progressf("%s: starting the cold start of %d Foos", s.name, len(s.foos))
	start := time.Now()
	conv := newConvergence(s.foos, s.side.AnyStatus, s.cfg.nodes > 0, s.side.events(), start)
	s.watch.observe(conv.observe)
	defer s.watch.observe(nil)
	before, err := s.cpuTimes()
	if err != nil {
		return err
	}
	s.watch.lease.longestRenewal() // the renewals from here
	if err := s.side.start(ctx, s); err != nil {
		return err
	}
	if err := s.waitUntil(ctx, s.cfg.coldStartTimeout, conv.isDone, conv.progress); err != nil {
		return err
	}
	r := conv.result(time.Since(start))
	cpu, err := s.cpuTimes()
	if err != nil {
		return err
	}
	r.APIServerCPUSeconds = (cpu[0] - before[0]).Seconds()
	r.ControllerCPUSeconds, s.converged = cpu[1].Seconds(), r.Converged
	if r.Converged {
		progressf("%s: converged %d Foos in %.2f s", s.name, r.Foos, r.Seconds)
	} else {
		progressf("%s: %s", s.name, r.timedOutText())
	}
	// A controller's Events that nobody waited for may still be on their way.
	if err := sleep(ctx, s.cfg.settle); err != nil {
		return err
	}
	if r.Requests, err = s.requests(start, time.Now()); err != nil {
		return err
	}
	if s.side.Shipped {
		r.LongestRenewalSeconds = s.watch.lease.longestRenewal().Seconds()
		progressf("%s: ours renewed its Lease at most %.2f s apart", s.name, r.LongestRenewalSeconds)
	}
	r.PerFoo, r.PerFooTotal = r.Requests.perFoo(r.Foos), r.Requests.total()/float64(r.Foos)
	r.EventWritesPerFoo = r.Requests.writes("events").total() / float64(r.Foos)
	s.result.ColdStart = &r
	return nil
}

// cpuTimes reads the CPU time of kube-apiserver and of the controller, if it runs, from
// /proc.
func (s *session) cpuTimes() ([2]time.Duration, error) {
	apiserver, err := s.cluster.Component(localcluster.ComponentAPIServer).CPUTime()
	var controller time.Duration
	if err == nil && s.proc != nil {
		controller, err = s.proc.CPUTime()
	}
	return [2]time.Duration{apiserver, controller}, err
}

// statusDone says whether a Foo's status is current with a Ready condition, or with
// anyStatus (the classic peer writes no conditions), written at all; with ready (the
// cluster has nodes), also that its replicas are available: Ready is True.
func statusDone(f *samplev1alpha1.Foo, anyStatus, ready bool) bool {
	if anyStatus {
		return slices.ContainsFunc(f.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.Subresource == "status" }) &&
			(!ready || f.Status.AvailableReplicas == *f.Spec.Replicas)
	}
	cond := meta.FindStatusCondition(f.Status.Conditions, samplev1alpha1.ConditionReady)
	return f.Status.ObservedGeneration == f.Generation && cond != nil && (!ready || cond.Status == metav1.ConditionTrue)
}

func deploymentMatches(d *appsv1.Deployment, foo *samplev1alpha1.Foo) bool {
	owner := metav1.GetControllerOf(d)
	return d.Spec.Replicas != nil && *d.Spec.Replicas == *foo.Spec.Replicas && owner != nil && owner.UID == foo.UID
}

// convergence collects a cold start from the watch events: done when every Deployment
// is as its Foo asks, every status is done and, with events, every Foo has its Event.
type convergence struct {
	anyStatus, ready, events bool
	start                    time.Time

	mu                 sync.Mutex
	byDeployment       map[string]*fooProgress // by spec.deploymentName
	byUID              map[types.UID]*fooProgress
	nDep, nFoo, nEvent int // the Deployments, statuses and Events done
	// When every Deployment, and every status, was last seen done, until the whole is
	// (one may fall behind and come back); -1 while one is not.
	depsAfter, statusesAfter, doneAfter time.Duration
	firstAfter                          time.Duration // when the first Deployment was done; -1 before
	done                                bool
}

type fooProgress struct {
	foo                       *samplev1alpha1.Foo
	deployment, status, event bool
}

func newConvergence(foos []*samplev1alpha1.Foo, anyStatus, ready, events bool, start time.Time) *convergence {
	c := &convergence{anyStatus: anyStatus, ready: ready, events: events, start: start, depsAfter: -1, statusesAfter: -1, firstAfter: -1,
		byDeployment: map[string]*fooProgress{}, byUID: map[types.UID]*fooProgress{}}
	for _, f := range foos {
		p := &fooProgress{foo: f}
		c.byDeployment[f.Spec.DeploymentName], c.byUID[f.UID] = p, p
	}
	return c
}

func (c *convergence) observe(obj any, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if p, ok := c.byDeployment[o.Name]; ok {
			c.nDep += flip(&p.deployment, deploymentMatches(o, p.foo))
		}
	case *samplev1alpha1.Foo:
		if p, ok := c.byUID[o.UID]; ok {
			c.nFoo += flip(&p.status, statusDone(o, c.anyStatus, c.ready))
		}
	case *eventsv1.Event:
		if p, ok := c.byUID[o.Regarding.UID]; ok && o.Reason == reconcile.EventDeploymentCreated {
			c.nEvent += flip(&p.event, true)
		}
	}
	if c.done {
		return
	}
	n, now := len(c.byUID), at.Sub(c.start)
	lastDone := func(after *time.Duration, all bool) {
		if !all {
			*after = -1
		} else if *after < 0 {
			*after = now
		}
	}
	lastDone(&c.depsAfter, c.nDep == n)
	if c.firstAfter < 0 && c.nDep > 0 {
		c.firstAfter = now
	}
	lastDone(&c.statusesAfter, c.nFoo == n)
	if c.nDep == n && c.nFoo == n && (!c.events || c.nEvent == n) {
		c.done, c.doneAfter = true, now
	}
}

// flip sets *b to v and returns the change in the count of true values.
func flip(b *bool, v bool) (d int) {
	switch {
	case v && !*b:
		d = 1
	case !v && *b:
		d = -1
	}
	*b = v
	return d
}

func (c *convergence) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *convergence) progress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.byUID)
	if c.events {
		return fmt.Sprintf("%d of %d Deployments, %d of %d statuses, %d of %d Events", c.nDep, n, c.nFoo, n, c.nEvent, n)
	}
	return fmt.Sprintf("%d of %d Deployments, %d of %d statuses", c.nDep, n, c.nFoo, n)
}

func (c *convergence) result(waited time.Duration) coldStartResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := coldStartResult{Foos: len(c.byUID), Converged: c.done, Seconds: waited.Seconds(), DeploymentsDone: c.nDep, StatusesDone: c.nFoo}
	if c.done {
		r.Seconds, r.DeploymentsSeconds, r.StatusesSeconds = c.doneAfter.Seconds(), c.depsAfter.Seconds(), c.statusesAfter.Seconds()
		r.FirstDeploymentSeconds = c.firstAfter.Seconds()
	}
	return r
}

type steadyResult struct {
	Foos                     int
	WindowSeconds, PerMinute float64 // PerMinute: but the Lease renewals
	LeasePerMinute           float64
	Writes                   requestCounts
}

// steady counts writes over --steady-window, which covers a resync.
func steady(ctx context.Context, s *session) error {
	progressf("%s: counting writes for %v", s.name, s.cfg.steadyWindow)
	counts, seconds, err := s.window(ctx, time.Now())
	if err != nil {
		return err
	}
	writes, leases := counts.writes(""), counts.writes("leases").total()
	s.result.Steady = &steadyResult{Foos: len(s.foos), WindowSeconds: seconds, Writes: writes,
		PerMinute: (writes.total() - leases) * 60 / seconds, LeasePerMinute: leases * 60 / seconds}
	progressf("%s: %.0f writes in %.0f s, %.0f of them on Leases", s.name, writes.total(), seconds, leases)
	return nil
}

// memoryResult is in bytes; RSSFileBefore is mapped from files, mostly the binary, and
// RSSPeakBefore the most RSS the controller held from its start (VmHWM), the cold start's
// included.
type memoryResult struct {
	Foos, Unrelated                                                          int
	RSSBefore, RSSAfter, RSSFileBefore, RSSPeakBefore, APIServerRSS, EtcdRSS int64
	RSSPer10k                                                                float64
}

// memory reads the RSS, creates --unrelated-deployments Deployments that no Foo owns,
// and reads the controller's again.
func memory(ctx context.Context, s *session) error {
	settledRSS := func() (int64, error) {
		if err := sleep(ctx, s.cfg.settle); err != nil {
			return 0, err
		}
		return s.proc.RSSBytes()
	}
	m := memoryResult{Foos: len(s.foos), Unrelated: s.cfg.unrelated}
	var err error
	if m.RSSBefore, err = settledRSS(); err != nil {
		return err
	}
	if m.RSSFileBefore, err = s.proc.RSSFileBytes(); err != nil {
		return err
	}
	if m.RSSPeakBefore, err = s.proc.PeakRSSBytes(); err != nil {
		return err
	}
	for name, rss := range map[string]*int64{localcluster.ComponentAPIServer: &m.APIServerRSS, localcluster.ComponentEtcd: &m.EtcdRSS} {
		if *rss, err = s.cluster.Component(name).RSSBytes(); err != nil {
			return err
		}
	}
	progressf("%s: creating %d unrelated Deployments", s.name, m.Unrelated)
	err = parallel(ctx, m.Unrelated, s.cfg.workers, func(ctx context.Context, i int) error {
		_, err := s.kube.AppsV1().Deployments(unrelatedNamespace).Create(ctx, unrelatedDeployment(i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating the unrelated Deployments: %w", err)
	}
	if m.RSSAfter, err = settledRSS(); err != nil {
		return err
	}
	m.RSSPer10k = float64(m.RSSAfter-m.RSSBefore) * 10000 / float64(m.Unrelated)
	s.result.Memory = &m
	progressf("%s: RSS %.1f -> %.1f MiB, at most %.1f from the start until the first", s.name, mib(m.RSSBefore), mib(m.RSSAfter), mib(m.RSSPeakBefore))
	return nil
}

func unrelatedDeployment(i int) *appsv1.Deployment {
	labels := map[string]string{"app": "unrelated", "index": fmt.Sprint(i)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:latest"}}}}},
	}
}

func mib[T int64 | float64](b T) float64 { return float64(b) / (1 << 20) }

// restartResult's WritesTotal and relistResult's leave out Lease renewals.
type restartResult struct {
	Foos                                     int
	WindowSeconds, WritesTotal, ReadySeconds float64
	Writes                                   requestCounts
}

// restart stops the controller, starts it again and counts the writes of --steady-window
// from then; for ours also the time to /readyz.
func restart(ctx context.Context, s *session) error {
	progressf("%s: restarting the controller", s.name)
	if err := s.stopController(); err != nil {
		return err
	}
	start := time.Now()
	if err := s.side.start(ctx, s); err != nil {
		return err
	}
	r := restartResult{Foos: len(s.foos)}
	if s.ctrl != nil {
		ready, cancel := context.WithTimeout(ctx, s.cfg.steadyWindow)
		defer cancel()
		if err := s.ctrl.WaitReady(ready); err != nil {
			return fmt.Errorf("after the restart: %w", err)
		}
		r.ReadySeconds = time.Since(start).Seconds()
	}
	counts, seconds, err := s.window(ctx, start)
	if err != nil {
		return err
	}
	r.WindowSeconds, r.Writes, r.WritesTotal = seconds, counts.writes(""), counts.writes("").total()-counts.writes("leases").total()
	s.result.Restart = &r
	progressf("%s: %.0f writes in %.0f s after the restart; ready after %.2f s", s.name, r.WritesTotal, r.WindowSeconds, r.ReadySeconds)
	return nil
}

type relistResult struct {
	Foos                                                          int
	APIServerReadySeconds, WindowSeconds, WritesTotal, CPUSeconds float64
	RSSBefore, RSSPeak                                            int64
	Requests, Writes                                              requestCounts
}

// relist restarts kube-apiserver under the controller, whose informers list everything
// again: its writes, CPU and peak RSS over --steady-window from then.
func relist(ctx context.Context, s *session) error {
	r := relistResult{Foos: len(s.foos)}
	var err error
	if r.RSSBefore, err = s.proc.RSSBytes(); err != nil {
		return err
	}
	cpuBefore, err := s.proc.CPUTime()
	if err == nil {
		err = s.proc.ResetPeakRSS()
	}
	if err != nil {
		return err
	}
	progressf("%s: restarting kube-apiserver under the controller", s.name)
	start := time.Now()
	s.restarting.Store(true)
	defer s.restarting.Store(false)
	if err := s.cluster.Restart(ctx, localcluster.ComponentAPIServer); err != nil {
		return err
	}
	r.APIServerReadySeconds = time.Since(start).Seconds()
	if r.Requests, r.WindowSeconds, err = s.window(ctx, start); err != nil {
		return err
	}
	r.Writes, r.WritesTotal = r.Requests.writes(""), r.Requests.writes("").total()-r.Requests.writes("leases").total()
	if r.RSSPeak, err = s.proc.PeakRSSBytes(); err != nil {
		return err
	}
	cpuAfter, err := s.proc.CPUTime()
	if err != nil {
		return err
	}
	r.CPUSeconds = (cpuAfter - cpuBefore).Seconds()
	s.result.Relist = &r
	progressf("%s: kube-apiserver ready in %.1f s; %.0f writes in %.0f s; RSS %.1f MiB before, %.1f at the peak",
		s.name, r.APIServerReadySeconds, r.WritesTotal, r.WindowSeconds, mib(r.RSSBefore), mib(r.RSSPeak))
	return nil
}

type readyResult struct {
	Samples, TimedOut int
	Until             string // what done meant: Ready with nodes
	P50Ms, MaxMs      float64
}

// timeToReady creates --ready-samples new Foos one at a time on the warm controller,
// and times each from its create until the watch sees its status done: with nodes,
// Ready. One not done within --reaction-deadline counts as not in time.
func timeToReady(ctx context.Context, s *session) error {
	r := readyResult{Samples: s.cfg.readySamples, Until: "its status is written"}
	if s.cfg.nodes > 0 {
		r.Until = "Ready"
	}
	defer s.watch.observe(nil)
	var ms []float64
	for i := range r.Samples {
		foo := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ready-%03d", i), Namespace: s.foos[i%len(s.foos)].Namespace},
			Spec: samplev1alpha1.FooSpec{DeploymentName: fmt.Sprintf("ready-%03d", i), Replicas: ptr.To[int32](initialReplicas)}}
		done := make(chan time.Time, 1)
		s.watch.observe(func(obj any, at time.Time) {
			if f, ok := obj.(*samplev1alpha1.Foo); ok && f.Name == foo.Name && f.Namespace == foo.Namespace && statusDone(f, s.side.AnyStatus, s.cfg.nodes > 0) {
				select {
				case done <- at:
				default:
				}
			}
		})
		began := time.Now()
		if _, err := s.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).Create(ctx, foo, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Foo %s: %w", foo.Name, err)
		}
		timer := time.NewTimer(s.cfg.reactionDeadline)
		select {
		case at := <-done:
			ms = append(ms, float64(at.Sub(began))/float64(time.Millisecond))
		case <-timer.C:
			r.TimedOut++
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		}
		timer.Stop()
	}
	if len(ms) > 0 {
		r.P50Ms, r.MaxMs = percentile(ms, 50), slices.Max(ms)
	}
	s.result.Ready = &r
	progressf("%s: %d new Foos until %s: p50 %.0f ms, max %.0f ms; %d not in time", s.name, r.Samples, r.Until, r.P50Ms, r.MaxMs, r.TimedOut)
	return nil
}

// requestCounts counts API requests by "VERB resource[/subresource]".
type requestCounts map[string]float64

// auditPolicy has kube-apiserver log every request but watches (one long request, not
// work per object) with its user, verb and object: the bench counts a side's requests
// by its controller's user, apart from the cluster's components and its own.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [watch]
- level: Metadata
`

// requests counts the requests of the controller's user that kube-apiserver received
// from from until to, from its audit log.
func (s *session) requests(from, to time.Time) (requestCounts, error) {
	f, err := os.Open(s.auditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return countRequests(f, s.user, from, to)
}

// window returns the requests from start until --steady-window after it.
func (s *session) window(ctx context.Context, start time.Time) (requestCounts, float64, error) {
	if err := sleep(ctx, s.cfg.steadyWindow-time.Since(start)); err != nil {
		return nil, 0, err
	}
	now := time.Now()
	counts, err := s.requests(start, now)
	return counts, now.Sub(start).Seconds(), err
}

// auditVerbs are the HTTP verbs of the audit log's verbs, as apiserver_request_total
// names them.
var auditVerbs = map[string]string{"create": "POST", "update": "PUT", "get": "GET", "list": "LIST"}

// countRequests counts the audit log's requests on objects by user received from from
// until to, by "VERB resource[/subresource]". A line that is not an event is skipped:
// the last may be half written, and a kube-apiserver killed (the relist case's, after
// its grace) may have left one.
func countRequests(log io.Reader, user string, from, to time.Time) (requestCounts, error) {
	out := requestCounts{}
	lines := bufio.NewScanner(log)
	lines.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for lines.Scan() {
		var e struct {
			Verb                     string
			User                     struct{ Username string }
			ObjectRef                *struct{ Resource, Subresource string }
			RequestReceivedTimestamp metav1.MicroTime
		}
		if json.Unmarshal(lines.Bytes(), &e) != nil {
			continue
		}
		at := e.RequestReceivedTimestamp.Time
		if e.User.Username != user || e.ObjectRef == nil || at.Before(from) || !at.Before(to) {
			continue
		}
		key := cmp.Or(auditVerbs[e.Verb], strings.ToUpper(e.Verb)) + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		out[key]++
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("the audit log: %w", err)
	}
	return out, nil
}

func (r requestCounts) total() (t float64) {
	for _, v := range r {
		t += v
	}
	return t
}

// writes keeps the requests that write, on resource, or every one if it is "": the
// reviews secure metrics create (tokenreviews, subjectaccessreviews) store nothing.
func (r requestCounts) writes(resource string) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		verb, res, _ := strings.Cut(k, " ")
		res, _, _ = strings.Cut(res, "/")
		if strings.HasSuffix(res, "reviews") {
			continue
		}
		if slices.Contains([]string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}, verb) && (resource == "" || res == resource) {
			out[k] = v
		}
	}
	return out
}

func (r requestCounts) perFoo(n int) map[string]float64 {
	out := make(map[string]float64, len(r))
	for k, v := range r {
		out[k] = v / float64(n)
	}
	return out
}

// reactionResult: Delivered changes reached the Deployment within the deadline, with
// their value (Exact) or a later one.
type reactionResult struct {
	Foos, Rate, Sent, Failed, Delivered, Exact int
	Seconds, DeadlineSeconds, AchievedRate     float64
	P50Ms, P99Ms, MaxMs                        float64
	AcceptedP50Ms, AcceptedP99Ms               float64
}

// reactionCase times spec.replicas changes at rate per second from the merge patch to
// the watch event of the Deployment with that value.
func reactionCase(rate int) benchCase {
	return benchCase{fmt.Sprintf("reaction %d/s", rate), func(ctx context.Context, s *session) error { return reaction(ctx, s, rate) }}
}

func reaction(ctx context.Context, s *session, rate int) error {
	cfg := s.cfg
	r := reactionResult{Foos: len(s.foos), Rate: rate, Sent: cfg.reactionSamples,
		Seconds: float64(cfg.reactionSamples) / float64(rate), DeadlineSeconds: cfg.reactionDeadline.Seconds()}
	tracker := newLatencyTracker()
	s.watch.observe(func(obj any, at time.Time) {
		if d, ok := obj.(*appsv1.Deployment); ok && d.Spec.Replicas != nil {
			tracker.observe(d.Name, *d.Spec.Replicas, at)
		}
	})
	defer s.watch.observe(nil)
	progressf("%s: changing %d Foos at %d/s, %d changes", s.name, len(s.foos), rate, r.Sent)
	if err := s.sendChanges(ctx, tracker, rate, r.Sent); err != nil {
		return err
	}
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

// sendChanges sends change k to Foo k mod N at start + k/rate, by a goroutine per Foo,
// so that its changes go out in order, with at most --reaction-inflight in flight.
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
				_, err := s.sample.SamplecontrollerV1alpha1().Foos(s.foos[i].Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				<-inflight
				if tracker.answered(c, time.Now(), err) == 1 && err != nil && ctx.Err() == nil {
					progressf("%s: patching Foo %s: %v", s.name, name, err)
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
	value                     int32
	sent, accepted, delivered time.Time
	exact, failed             bool
}

// latencyTracker matches spec changes to the Deployment watch events that carry them.
// Each Foo's replicas only grow, so a Deployment showing value v delivers every
// pending change up to v: a change the controller skipped for a newer one counts as
// delivered with it, but not as exact.
type latencyTracker struct {
	mu       sync.Mutex
	pending  map[string][]*change // by Deployment name, in increasing value
	all      []*change
	failures int
}

func newLatencyTracker() *latencyTracker {
	return &latencyTracker{pending: map[string][]*change{}}
}

// sent records a change before its request goes out, for a watch event before the response.
func (t *latencyTracker) sent(deployment string, value int32, at time.Time) *change {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := &change{value: value, sent: at}
	t.pending[deployment] = append(t.pending[deployment], c)
	t.all = append(t.all, c)
	return c
}

// answered records the patch's response, or its failure; it returns the failures so far.
func (t *latencyTracker) answered(c *change, at time.Time, err error) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		c.failed, t.failures = true, t.failures+1
	} else {
		c.accepted = at
	}
	return t.failures
}

func (t *latencyTracker) observe(deployment string, replicas int32, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pending[deployment]
	for ; len(p) > 0 && p[0].value <= replicas; p = p[1:] {
		p[0].delivered, p[0].exact = at, p[0].value == replicas
	}
	t.pending[deployment] = p
}

func (t *latencyTracker) remaining() (n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.all {
		if c.delivered.IsZero() && !c.failed {
			n++
		}
	}
	return n
}

// record sets r's figures, given r.Sent; a latency from the response is zero when the
// event came first.
func (t *latencyTracker) record(r *reactionResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Failed = t.failures
	var fromSent, fromAccepted, sent []float64
	for _, c := range t.all {
		sent = append(sent, c.sent.Sub(t.all[0].sent).Seconds())
		if c.delivered.IsZero() || c.failed {
			continue
		}
		fromSent = append(fromSent, float64(c.delivered.Sub(c.sent))/1e6)
		if !c.accepted.IsZero() {
			fromAccepted = append(fromAccepted, float64(max(0, c.delivered.Sub(c.accepted)))/1e6)
		}
		if c.exact {
			r.Exact++
		}
	}
	if len(sent) > 1 && slices.Max(sent) > slices.Min(sent) {
		r.AchievedRate = float64(r.Sent-1) / (slices.Max(sent) - slices.Min(sent))
	}
	r.Delivered = len(fromSent)
	r.P50Ms, r.P99Ms, r.MaxMs = percentile(fromSent, 50), percentile(fromSent, 99), percentile(fromSent, 100)
	r.AcceptedP50Ms, r.AcceptedP99Ms = percentile(fromAccepted, 50), percentile(fromAccepted, 99)
}

// percentile is the p-th percentile (0 < p <= 100) of values, nearest-rank; 0 for none.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return sorted[max(1, min(int(math.Ceil(p/100*float64(len(sorted)))), len(sorted)))-1]
}
