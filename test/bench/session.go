package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	// benchNamespace holds the Foos and their Deployments.
	benchNamespace = "bench"
	// unrelatedNamespace holds the Deployments of the memory case, which no Foo owns.
	unrelatedNamespace = "unrelated"
	// initialReplicas is the spec.replicas of every Foo the bench creates.
	initialReplicas = 1
	// progressInterval is how often a long wait reports how far it got.
	progressInterval = 10 * time.Second
)

// session is one planned run on a fresh cluster (etcd and kube-apiserver only) with
// the CRD, the Foos in the bench namespace, the bench's clients and watch, and the
// driver that makes the controller's writes: a controller process, or the limit.
type session struct {
	cfg     config
	name    string // column and size, for progress and file names: "ours-1000"
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	sample  clientset.Interface
	watch   *watcher
	foos    []*samplev1alpha1.Foo
	// namespace holds the Foos (but with a layout); benchNamespace on a cluster of the
	// session's own.
	namespace string
	// shared is the cluster this session shares with others, each in its own namespace;
	// nil when the session has a cluster of its own.
	shared *sharedCluster

	// layout spreads the Foos over namespaces; nil puts them all in benchNamespace.
	layout *layout

	driver driver
	proc   *localcluster.Process    // the controller; nil for a limit
	ctrl   *localcluster.Controller // proc, if it is ours and serves /metrics
	// processes are the replicas of a replicaSet driver (proc is nil then), and
	// killed those a case killed on purpose.
	processes []*localcluster.Controller
	killed    sync.Map    // *localcluster.Controller -> true
	limit     *limitRun   // the limit's writers; nil for a controller
	fail      func(error) // ends the cases with this error: the controller exited, say

	converged bool      // the cold start converged
	replicas  []int32   // the last spec.replicas the reaction case set on each Foo
	result    runResult // what the cases measured
}

// sessionName makes a run's description a name that serves as a namespace's and a
// file's: lower case letters, digits and single dashes, at most 63 characters. A
// longer one keeps its start and ends in a hash of the whole description, so that two
// descriptions that differ only in their ends (the pair, the size) stay apart.
func sessionName(description string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(description) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if len(name) > 63 {
		sum := fnv.New32a()
		_, _ = sum.Write([]byte(description))
		name = fmt.Sprintf("%s-%08x", strings.TrimRight(name[:54], "-"), sum.Sum32())
	}
	return name
}

// runSession runs p's cases in order on a fresh cluster and returns what they
// measured, also when one failed. The cases after the cold start need it converged.
func runSession(ctx context.Context, cfg config, root string, p sessionPlan) (runResult, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	_, isLimit := p.driver.(limit)
	name := fmt.Sprintf("%s-%d", p.driver.column(), p.foos)
	if p.layout != nil {
		name += "-" + p.layout.Key
	}
	s := &session{
		cfg:       cfg,
		name:      sessionName(name),
		layout:    p.layout,
		driver:    p.driver,
		fail:      fail,
		result:    runResult{Column: p.driver.column(), Limit: isLimit, Driver: p.driver, Foos: p.foos},
		namespace: benchNamespace,
		shared:    p.shared,
	}
	if p.shared != nil {
		s.namespace = s.name
	}
	defer s.stop()
	if err := s.setUp(ctx, root, p.foos); err != nil {
		return s.result, err
	}
	for i, c := range p.cases {
		if i > 0 && !s.converged {
			progressf("%s: the cold start did not converge; skipping the cases after it", s.name)
			s.result.Skipped = fmt.Sprintf("cold start of %d Foos did not converge", p.foos)
			break
		}
		if err := c.run(ctx, s); err != nil {
			return s.result, err
		}
	}
	return s.result, nil
}

// sharedCluster is one cluster for several sessions, each in a namespace of its own:
// started by the first, stopped by stop.
type sharedCluster struct {
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	sample  clientset.Interface
}

// stop stops the cluster, once, whichever of its sessions' plans calls it.
func (c *sharedCluster) stop() {
	if c.cluster == nil {
		return
	}
	if err := c.cluster.Stop(); err != nil {
		progressf("stopping the shared cluster: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(c.cluster.Dir(), "etcd")); err != nil {
		progressf("%v", err)
	}
	c.cluster = nil
}

func (s *session) setUp(ctx context.Context, root string, n int) error {
	switch {
	case s.shared == nil:
		if err := s.startCluster(ctx, root, s.name); err != nil {
			return err
		}
	case s.shared.cluster == nil:
		if err := s.startCluster(ctx, root, "shared"); err != nil {
			return err
		}
		s.shared.cluster, s.shared.kube, s.shared.sample = s.cluster, s.kube, s.sample
	default:
		progressf("%s: on the shared cluster, in namespace %s", s.name, s.namespace)
		s.cluster, s.kube, s.sample = s.shared.cluster, s.shared.kube, s.shared.sample
	}
	if s.shared != nil && s.cfg.ratioRestartAPIServer {
		// Every side alike, the first too, on the cluster it has just started.
		r, err := s.restartAPIServer(ctx)
		if err != nil {
			return fmt.Errorf("restarting the apiserver: %w", err)
		}
		s.result.APIServerRestart = r
		progressf("%s: compacted etcd to revision %d, restarted the apiserver: ready in %.2f s, quiet %.2f s later (%t)",
			s.name, r.CompactedTo, r.ReadySeconds, r.QuietSeconds, r.Quiet)
	}
	namespaces, watched := []string{s.namespace, unrelatedNamespace}, s.namespace
	if s.layout != nil {
		namespaces, watched = append(namespaces, s.layout.Namespaces...), metav1.NamespaceAll
	}
	for _, ns := range namespaces {
		_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) { // default
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	var err error
	if s.watch, err = startWatcher(ctx, s.kube, s.sample, watched); err != nil {
		return err
	}
	return s.createFoos(ctx, n)
}

// startCluster starts a fresh cluster (etcd and kube-apiserver only) in the directory
// named, with the bench's clients and the CRD.
func (s *session) startCluster(ctx context.Context, root, dir string) error {
	progressf("%s: starting a fresh cluster", s.name)
	opts := localcluster.Options{
		Dir:                   filepath.Join(s.cfg.outDir, "clusters", dir),
		SkipControllerManager: true,
		SkipScheduler:         true,
		SkipKwok:              true,
	}
	if s.cfg.profile {
		opts.ExtraArgs = map[string][]string{localcluster.ComponentAPIServer: {"--profiling=true"}}
	}
	var err error
	if s.cluster, err = localcluster.Start(ctx, opts); err != nil {
		return err
	}
	// The bench's own requests never wait on a client-side limiter: it must be able to
	// send 1000 patches per second.
	cfg := s.cluster.RESTConfig()
	cfg.QPS, cfg.UserAgent = -1, "sample-controller-bench"
	if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if s.sample, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}
	return localcluster.InstallCRD(ctx, s.cluster.RESTConfig(), filepath.Join(root, "artifacts", "examples", "crd.yaml"))
}

// createFoos creates n Foos and waits until the watch has seen them all, so that none
// is still in flight when a measurement starts.
func (s *session) createFoos(ctx context.Context, n int) error {
	began := time.Now()
	s.foos = make([]*samplev1alpha1.Foo, n)
	err := parallel(ctx, n, s.cfg.parallelism, func(ctx context.Context, i int) error {
		namespace := s.namespace
		if s.layout != nil {
			namespace = s.layout.namespaceOf(i)
		}
		foo := &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: fooName(i), Namespace: namespace},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: fooName(i), Replicas: ptr.To[int32](initialReplicas)},
		}
		var err error
		if s.foos[i], err = s.sample.SamplecontrollerV1alpha1().Foos(namespace).Create(ctx, foo, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Foo %s: %w", foo.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.waitUntil(ctx, time.Minute, func() bool { return s.watch.fooCount() >= n }, nil); err != nil {
		return err
	}
	if seen := s.watch.fooCount(); seen < n {
		return fmt.Errorf("the watch saw only %d of the %d Foos created", seen, n)
	}
	progressf("%s: created %d Foos in %v", s.name, n, time.Since(began).Round(time.Millisecond))
	return nil
}

// stop stops the driver, the watch and the cluster, unless shared, and removes its
// etcd data (at least 64 MB each); the logs stay.
func (s *session) stop() {
	if s.proc != nil {
		if err := s.proc.Stop(localcluster.ControllerStopGrace); err != nil {
			progressf("%s: %v", s.name, err)
		}
	}
	for _, r := range s.processes {
		if _, killed := s.killed.Load(r); killed {
			continue
		}
		if err := r.Stop(localcluster.ControllerStopGrace); err != nil {
			progressf("%s: %v", s.name, err)
		}
	}
	if s.limit != nil {
		s.limit.stop()
	}
	if s.watch != nil {
		s.watch.stop()
	}
	if s.cluster != nil && s.shared != nil {
		s.clearNamespace()
	}
	if s.cluster == nil || s.shared != nil {
		return
	}
	if err := s.cluster.Stop(); err != nil {
		progressf("%s: stopping the cluster: %v", s.name, err)
	}
	if err := os.RemoveAll(filepath.Join(s.cluster.Dir(), "etcd")); err != nil {
		progressf("%s: %v", s.name, err)
	}
}

// waitUntil polls done until it holds, timeout passes (no error: the caller reports
// how far it got) or ctx ends, and prints progress() every progressInterval.
func (s *session) waitUntil(ctx context.Context, timeout time.Duration, done func() bool, progress func() string) error {
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for !done() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-poll.C:
		}
		if progress != nil && time.Since(lastReport) >= progressInterval {
			progressf("%s: %s", s.name, progress())
			lastReport = time.Now()
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// fooName names the i-th Foo of the bench; its Deployment has the same name.
func fooName(i int) string { return fmt.Sprintf("foo-%05d", i) }

// fooIndex is the index of the session's Foo named name, if it is one of them.
func (s *session) fooIndex(name string) (int, bool) {
	var i int
	if _, err := fmt.Sscanf(name, "foo-%d", &i); err != nil || i < 0 || i >= len(s.foos) || s.foos[i].Name != name {
		return 0, false
	}
	return i, true
}

// parallel calls fn for 0..n-1 from at most workers goroutines and returns the first
// error, after which no new calls start.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workqueue.ParallelizeUntil(ctx, workers, n, func(i int) {
		if err := fn(ctx, i); err != nil {
			cancel(err)
		}
	})
	return context.Cause(ctx)
}

func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// clearNamespace deletes what a session on the shared cluster leaves in its
// namespace: its Foos, their Deployments and the Events, which no garbage collector
// removes here. Kept, they would grow the apiserver's caches, and so its collector's
// work, from one session to the next, and each side would run on a larger heap than
// the side before it. Nothing watches them any more: the controller or the limit and
// the bench's watch have stopped.
func (s *session) clearNamespace() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	all, opts := metav1.ListOptions{}, metav1.DeleteOptions{}
	for _, c := range []struct {
		what      string
		deleteAll func() error
	}{
		{"Foos", func() error {
			return s.sample.SamplecontrollerV1alpha1().Foos(s.namespace).DeleteCollection(ctx, opts, all)
		}},
		{"Deployments", func() error { return s.kube.AppsV1().Deployments(s.namespace).DeleteCollection(ctx, opts, all) }},
		{"Events", func() error { return s.kube.EventsV1().Events(s.namespace).DeleteCollection(ctx, opts, all) }},
	} {
		if err := c.deleteAll(); err != nil {
			progressf("%s: deleting the session's %s: %v", s.name, c.what, err)
		}
	}
	progressf("%s: deleted the session's Foos, Deployments and Events in %.1f s", s.name, time.Since(began).Seconds())
}
