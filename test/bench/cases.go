package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// benchCase is one measurement on a session's cluster, recorded in s.result.
type benchCase interface {
	run(ctx context.Context, s *session) error
}

// coldStartCase runs first in every session: the later cases need it converged.
type coldStartCase struct{}

// coldStartResult is one cold start, or how far it got.
type coldStartResult struct {
	Foos      int  `json:"foos"`
	Converged bool `json:"converged"`
	// Seconds is the time to converge, or the time waited when it did not.
	Seconds         float64 `json:"seconds"`
	DeploymentsDone int     `json:"deploymentsDone"`
	StatusesDone    int     `json:"statusesDone"`
	// DeploymentsSeconds and StatusesSeconds are when the last Deployment, and the
	// last status, was done, of a cold start that converged: the work a user waits
	// for apart from the writes that report it.
	DeploymentsSeconds float64 `json:"deploymentsSeconds,omitempty"`
	StatusesSeconds    float64 `json:"statusesSeconds,omitempty"`
	// Requests from the start until --settle after convergence.
	Requests          requestCounts      `json:"requests"`
	PerFoo            map[string]float64 `json:"requestsPerFoo"`
	PerFooTotal       float64            `json:"requestsPerFooTotal"`
	EventWritesPerFoo float64            `json:"eventWritesPerFoo"`
	// CPU time until convergence: the controller's since it started, every replica's
	// together (none for a limit, which runs in the bench), the API server's since the
	// side started, and the bench's own since the side started: its watches, which
	// observe every side alike, and on a limit's side the limit's writes and informers.
	ControllerCPUSeconds float64 `json:"controllerCPUSeconds,omitempty"`
	APIServerCPUSeconds  float64 `json:"apiserverCPUSeconds,omitempty"`
	BenchCPUSeconds      float64 `json:"benchCPUSeconds,omitempty"`
}

// timedOutText says how far a cold start got, e.g. "timed out: 812 of 1000 after 600 s".
func (r coldStartResult) timedOutText() string {
	return fmt.Sprintf("timed out: %d of %d after %.0f s", min(r.DeploymentsDone, r.StatusesDone), r.Foos, r.Seconds)
}

func (coldStartCase) run(ctx context.Context, s *session) error {
	requests, err := countRequests(ctx, s.cluster)
	if err != nil {
		return err
	}
	progressf("%s: starting the cold start of %d Foos", s.name, len(s.foos))
	start := time.Now()
	conv := newConvergence(s.foos, s.driver.rule(), start)
	if s.driver.events() {
		conv.countEvents()
	}
	s.watch.observe(observer{conv.observeDeployment, conv.observeFoo, conv.observeEvent})
	defer s.watch.observe(observer{})
	apiserver := s.cluster.Component(localcluster.ComponentAPIServer)
	if apiserver == nil {
		return errors.New("the cluster runs no kube-apiserver")
	}
	apiserverCPU, err := apiserver.CPUTime()
	if err != nil {
		return err
	}
	benchCPU, err := ownCPUTime()
	if err != nil {
		return err
	}
	if err := s.driver.start(ctx, s); err != nil {
		return err
	}
	if err := s.waitUntil(ctx, s.cfg.coldStartTimeout, conv.isDone, conv.progress); err != nil {
		return err
	}
	r := conv.result(time.Since(start))
	cpu, err := apiserver.CPUTime()
	if err != nil {
		return err
	}
	r.APIServerCPUSeconds = (cpu - apiserverCPU).Seconds()
	if cpu, err = ownCPUTime(); err != nil {
		return err
	}
	r.BenchCPUSeconds = (cpu - benchCPU).Seconds()
	for _, proc := range s.procs {
		if cpu, err = proc.CPUTime(); err != nil {
			return err
		}
		r.ControllerCPUSeconds += cpu.Seconds()
	}
	s.converged = r.Converged
	if r.Converged {
		progressf("%s: converged %d Foos in %.2f s", s.name, r.Foos, r.Seconds)
	} else {
		progressf("%s: %s", s.name, r.timedOutText())
	}

	// A controller's Events that nobody waited for may still be on their way.
	if err := sleep(ctx, s.cfg.settle); err != nil {
		return err
	}
	if r.Requests, err = requests(ctx); err != nil {
		return err
	}
	r.PerFoo = r.Requests.perFoo(r.Foos)
	r.PerFooTotal = r.Requests.total() / float64(r.Foos)
	r.EventWritesPerFoo = r.Requests.eventWrites().total() / float64(r.Foos)
	s.result.ColdStart = &r
	return nil
}

// steadyCase counts writes over --steady-window, which covers a resync: every
// controller side resyncs every 30 s (resync).
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

// memoryCase reads the controller's RSS, and what the API server and etcd hold for
// the Foos, creates --unrelated-deployments Deployments that no Foo owns, and reads
// the controller's again.
type memoryCase struct{}

type memoryResult struct {
	Foos      int `json:"foos"`
	Unrelated int `json:"unrelatedDeployments"`
	// RSSBefore and RSSAfter are every replica's together; RSSReplicas, with more
	// than one, each one's beside RSSBefore.
	RSSBefore   int64   `json:"rssBeforeBytes"`
	RSSAfter    int64   `json:"rssAfterBytes"`
	RSSReplicas []int64 `json:"rssReplicasBytes,omitempty"`
	// RSSFileBefore is the part of RSSBefore mapped from files: mostly the binary.
	RSSFileBefore int64 `json:"rssFileBeforeBytes"`
	// The API server's and etcd's RSS beside RSSBefore.
	APIServerRSS int64 `json:"apiserverRSSBytes"`
	EtcdRSS      int64 `json:"etcdRSSBytes"`
	// RSSPer10k is (after - before) scaled to 10000 unrelated Deployments.
	RSSPer10k float64 `json:"rssPer10kUnrelatedBytes"`
}

func (memoryCase) run(ctx context.Context, s *session) error {
	// rss reads every replica's RSS, or the part mapped from files, and their sum.
	rss := func(read func(*localcluster.Process) (int64, error)) (sum int64, each []int64, err error) {
		for _, proc := range s.procs {
			n, err := read(proc)
			if err != nil {
				return 0, nil, err
			}
			sum += n
			each = append(each, n)
		}
		return sum, each, nil
	}
	settledRSS := func() (int64, []int64, error) {
		if err := sleep(ctx, s.cfg.settle); err != nil {
			return 0, nil, err
		}
		return rss((*localcluster.Process).RSSBytes)
	}
	m := memoryResult{Foos: len(s.foos), Unrelated: s.cfg.unrelated}
	var err error
	var each []int64
	if m.RSSBefore, each, err = settledRSS(); err != nil {
		return err
	}
	if len(each) > 1 {
		m.RSSReplicas = each
	}
	if m.RSSFileBefore, _, err = rss((*localcluster.Process).RSSFileBytes); err != nil {
		return err
	}
	for name, rss := range map[string]*int64{localcluster.ComponentAPIServer: &m.APIServerRSS, localcluster.ComponentEtcd: &m.EtcdRSS} {
		if p := s.cluster.Component(name); p != nil {
			if *rss, err = p.RSSBytes(); err != nil {
				return err
			}
		}
	}
	progressf("%s: creating %d unrelated Deployments", s.name, m.Unrelated)
	began := time.Now()
	err = parallel(ctx, m.Unrelated, s.cfg.workers, func(ctx context.Context, i int) error {
		_, err := s.kube.AppsV1().Deployments(unrelatedNamespace).Create(ctx, unrelatedDeployment(i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating the unrelated Deployments: %w", err)
	}
	progressf("%s: created them in %v", s.name, time.Since(began).Round(time.Millisecond))
	if m.RSSAfter, _, err = settledRSS(); err != nil {
		return err
	}
	m.RSSPer10k = float64(m.RSSAfter-m.RSSBefore) * 10000 / float64(m.Unrelated)
	s.result.Memory = &m
	progressf("%s: RSS %.1f -> %.1f MiB", s.name, mib(m.RSSBefore), mib(m.RSSAfter))
	return nil
}

// restartCase stops a converged controller and starts it again on the same cluster.
// It counts the writes of --steady-window from the new start, which a controller that
// trusts what it finds makes none of. For ours it also times /readyz against the time
// the same informers take to fill on this cluster, filled by the bench just before as
// the watching limit fills them, with clients built as ours.
type restartCase struct{}

type restartResult struct {
	Foos          int           `json:"foos"`
	WindowSeconds float64       `json:"windowSeconds"`
	Writes        requestCounts `json:"mutating"`
	WritesTotal   float64       `json:"mutatingTotal"`
	// CacheSyncSeconds is how long the same informers as ours took to fill.
	CacheSyncSeconds float64 `json:"cacheSyncSeconds"`
	// ReadySeconds is, for ours, the time from its start to /readyz answering 200 (on
	// every replica).
	ReadySeconds float64 `json:"readySeconds,omitempty"`
}

func (restartCase) run(ctx context.Context, s *session) error {
	c, ok := s.driver.(controller)
	if !ok {
		return fmt.Errorf("the restart case needs a controller, not %s", s.driver.column())
	}
	kube, sample, closeIdle, err := clientsAsOurs(s.cluster, "sample-controller-bench-informers")
	if err != nil {
		return err
	}
	began := time.Now()
	stopInformers, err := startInformers(ctx, kube, sample, func(*samplev1alpha1.Foo) {})
	if err != nil {
		return err
	}
	r := restartResult{Foos: len(s.foos), CacheSyncSeconds: time.Since(began).Seconds()}
	stopInformers()
	closeIdle()

	progressf("%s: restarting the controller (the same informers filled in %.2f s)", s.name, r.CacheSyncSeconds)
	if err := s.stopController(); err != nil {
		return err
	}
	requests, err := countRequests(ctx, s.cluster)
	if err != nil {
		return err
	}
	s.restarts++
	start := time.Now()
	if err := c.start(ctx, s); err != nil {
		return err
	}
	if c.Ours {
		ready, cancel := context.WithTimeout(ctx, s.cfg.steadyWindow)
		for _, ctrl := range s.ctrls {
			if err = ctrl.WaitReady(ready); err != nil {
				break
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("after the restart: %w", err)
		}
		r.ReadySeconds = time.Since(start).Seconds()
	}
	if err := sleep(ctx, s.cfg.steadyWindow-time.Since(start)); err != nil {
		return err
	}
	counts, err := requests(ctx)
	if err != nil {
		return err
	}
	r.WindowSeconds = time.Since(start).Seconds()
	r.Writes = counts.mutating()
	r.WritesTotal = r.Writes.total()
	s.result.Restart = &r
	progressf("%s: %.0f writes in %.0f s after the restart; ready after %.2f s", s.name, r.WritesTotal, r.WindowSeconds, r.ReadySeconds)
	return nil
}

// relistCase restarts kube-apiserver under a converged controller, whose informers
// then list every Foo and Deployment again. It counts the writes of --steady-window
// from the restart, which a controller that trusts what it finds makes none of, and
// reads the controller's CPU over the window and its RSS at the peak, which comes
// while it holds the old cache and decodes the new list.
type relistCase struct{}

type relistResult struct {
	Foos int `json:"foos"`
	// APIServerReadySeconds is how long kube-apiserver took from its stop to ready.
	APIServerReadySeconds float64 `json:"apiserverReadySeconds"`
	WindowSeconds         float64 `json:"windowSeconds"`
	// Requests counts what the new kube-apiserver served in the window, the lists of
	// the controller's informers and of the bench's watch among them.
	Requests    requestCounts `json:"requests"`
	Writes      requestCounts `json:"mutating"`
	WritesTotal float64       `json:"mutatingTotal"`
	// The controller's (every replica's, summed) RSS before the restart, and the sum
	// of their peaks over the window, with the CPU they used in it.
	RSSBefore  int64   `json:"rssBeforeBytes"`
	RSSPeak    int64   `json:"rssPeakBytes"`
	CPUSeconds float64 `json:"cpuSeconds"`
}

func (relistCase) run(ctx context.Context, s *session) error {
	if _, ok := s.driver.(controller); !ok {
		return fmt.Errorf("the relist case needs a controller, not %s", s.driver.column())
	}
	r := relistResult{Foos: len(s.foos)}
	var cpuBefore time.Duration
	for _, proc := range s.procs {
		rss, err := proc.RSSBytes()
		if err != nil {
			return err
		}
		cpu, err := proc.CPUTime()
		if err != nil {
			return err
		}
		if err := proc.ResetPeakRSS(); err != nil {
			return err
		}
		r.RSSBefore, cpuBefore = r.RSSBefore+rss, cpuBefore+cpu
	}
	progressf("%s: restarting kube-apiserver under the controller", s.name)
	start := time.Now()
	if err := s.cluster.Restart(ctx, localcluster.ComponentAPIServer); err != nil {
		return err
	}
	r.APIServerReadySeconds = time.Since(start).Seconds()
	if err := sleep(ctx, s.cfg.steadyWindow-time.Since(start)); err != nil {
		return err
	}
	// The new kube-apiserver counted from zero: every request it served is since.
	m, err := s.cluster.APIServerMetrics(ctx)
	if err != nil {
		return err
	}
	r.WindowSeconds = time.Since(start).Seconds()
	r.Requests = apiserverRequests(m, countedResources)
	r.Writes = r.Requests.mutating()
	r.WritesTotal = r.Writes.total()
	var cpuAfter time.Duration
	for _, proc := range s.procs {
		peak, err := proc.PeakRSSBytes()
		if err != nil {
			return err
		}
		cpu, err := proc.CPUTime()
		if err != nil {
			return err
		}
		r.RSSPeak, cpuAfter = r.RSSPeak+peak, cpuAfter+cpu
	}
	r.CPUSeconds = (cpuAfter - cpuBefore).Seconds()
	s.result.Relist = &r
	progressf("%s: kube-apiserver ready in %.1f s; %.0f writes in %.0f s; RSS %.1f MiB before, %.1f at the peak",
		s.name, r.APIServerReadySeconds, r.WritesTotal, r.WindowSeconds, mib(r.RSSBefore), mib(r.RSSPeak))
	return nil
}

// unrelatedDeployment is the i-th Deployment of the memory case.
func unrelatedDeployment(i int) *appsv1.Deployment {
	labels := map[string]string{"app": "unrelated", "index": fmt.Sprint(i)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:latest"}}},
			},
		},
	}
}

func mib[T int64 | float64](b T) float64 { return float64(b) / (1 << 20) }

// requestCounts counts API requests by "VERB resource[/subresource]".
type requestCounts map[string]float64

// countedResources are the resources a Foo's convergence costs requests on.
var countedResources = []string{"foos", "deployments", "events"}

// mutatingVerbs are the verbs of apiserver_request_total that write.
var mutatingVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// countRequests reads apiserver_request_total; the function it returns counts the
// requests served since on the counted resources.
func countRequests(ctx context.Context, cluster *localcluster.Cluster) (func(context.Context) (requestCounts, error), error) {
	m, err := cluster.APIServerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	before := apiserverRequests(m, countedResources)
	return func(ctx context.Context) (requestCounts, error) {
		m, err := cluster.APIServerMetrics(ctx)
		if err != nil {
			return nil, err
		}
		return apiserverRequests(m, countedResources).minus(before), nil
	}, nil
}

// apiserverRequests sums apiserver_request_total by verb, resource and subresource,
// for resources and every verb but WATCH (one long request, not work per object).
func apiserverRequests(m localcluster.Metrics, resources []string) requestCounts {
	out := requestCounts{}
	for _, s := range m["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		verb, resource := labels["verb"], labels["resource"]
		if !slices.Contains(resources, resource) || strings.HasPrefix(verb, "WATCH") {
			continue
		}
		key := verb + " " + resource
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += s.GetCounter().GetValue()
	}
	return out
}

// minus returns r - before, leaving out keys that did not change.
func (r requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (r requestCounts) total() float64 {
	var t float64
	for _, v := range r {
		t += v
	}
	return t
}

func (r requestCounts) mutating() requestCounts {
	return r.filter(func(verb, _ string) bool { return slices.Contains(mutatingVerbs, verb) })
}

func (r requestCounts) eventWrites() requestCounts {
	return r.mutating().filter(func(_, resource string) bool { return resource == "events" })
}

func (r requestCounts) filter(keep func(verb, resource string) bool) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		verb, resource, _ := strings.Cut(k, " ")
		resource, _, _ = strings.Cut(resource, "/")
		if keep(verb, resource) {
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

// ownCPUTime is the CPU time the bench has used, in user and kernel mode, since it
// started; its children (the cluster, the controllers) are not in it.
func ownCPUTime() (time.Duration, error) {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0, fmt.Errorf("reading the bench's CPU time: %w", err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()), nil
}
