package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	benchNamespace     = "bench"     // the Foos and their Deployments
	unrelatedNamespace = "unrelated" // the memory case's Deployments, which no Foo owns
	initialReplicas    = 1           // every Foo's spec.replicas when created
	progressInterval   = 10 * time.Second
)

// session is one planned run on a fresh cluster (etcd and kube-apiserver only) with
// the CRD, the Foos, the bench's clients and watch, and the driver.
type session struct {
	cfg     config
	name    string // side, size and pair, for progress and file names: "ours-1000-2"
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	sample  clientset.Interface
	watch   *watcher
	foos    []*samplev1alpha1.Foo

	driver   driver
	procs    []*localcluster.Process    // the controller's processes; none for a limit
	ctrls    []*localcluster.Controller // ours, with their endpoints; none for the others
	restarts int                        // how often the controller was started again
	limit    *limitRun                  // the limit's writers; nil for a controller
	fail     func(error)                // ends the cases with this error: the controller exited, say

	mu           sync.Mutex
	stoppedProcs map[*localcluster.Process]bool // the controller processes the bench stopped

	converged bool      // the cold start converged
	replicas  []int32   // the last spec.replicas the reaction case set on each Foo
	result    runResult // what the cases measured
}

// sessionName makes a description a file name: runs of letters and digits, dashed.
func sessionName(description string) string {
	other := func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }
	return strings.Join(strings.FieldsFunc(strings.ToLower(description), other), "-")
}

// runSession runs p's cases in order on a fresh cluster and returns what they
// measured, also when one failed.
func runSession(ctx context.Context, cfg config, root string, p sessionPlan) (runResult, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	_, isLimit := p.driver.(limit)
	c, isController := p.driver.(controller)
	s := &session{
		cfg:    cfg,
		name:   sessionName(fmt.Sprintf("%s %d %d", p.driver.column(), p.foos, p.pair)),
		driver: p.driver,
		fail:   fail,
		result: runResult{Column: p.driver.column(), Limit: isLimit, Peer: isController && c.Peer, Driver: p.driver, Foos: p.foos, Pair: p.pair},
	}
	defer s.stop()
	if err := s.setUp(ctx, root, p.foos); err != nil {
		return s.result, err
	}
	for i, c := range p.cases {
		if i > 0 && !s.converged {
			progressf("%s: the cold start did not converge; skipping the cases after it", s.name)
			break
		}
		if err := c.run(ctx, s); err != nil {
			return s.result, err
		}
	}
	return s.result, nil
}

// setUp starts the cluster, the bench's clients and watch, and creates n Foos.
func (s *session) setUp(ctx context.Context, root string, n int) error {
	progressf("%s: starting a fresh cluster", s.name)
	var err error
	s.cluster, err = localcluster.Start(ctx, localcluster.Options{
		Dir:                   filepath.Join(s.cfg.outDir, "clusters", s.name),
		SkipControllerManager: true,
		SkipScheduler:         true,
		SkipKwok:              true,
	})
	if err != nil {
		return err
	}
	// No client-side limit: the bench sends up to 1000 patches per second.
	cfg := s.cluster.RESTConfig()
	cfg.QPS, cfg.UserAgent = -1, "sample-controller-bench"
	if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if s.sample, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}
	if err := localcluster.InstallCRD(ctx, s.cluster.RESTConfig(), filepath.Join(root, "artifacts", "examples", "crd.yaml")); err != nil {
		return err
	}
	for _, ns := range []string{benchNamespace, unrelatedNamespace} {
		if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if s.watch, err = startWatcher(ctx, s.kube, s.sample); err != nil {
		return err
	}
	return s.createFoos(ctx, n)
}

// createFoos creates n Foos and waits until the watch has seen them all.
func (s *session) createFoos(ctx context.Context, n int) error {
	began := time.Now()
	s.foos = make([]*samplev1alpha1.Foo, n)
	err := parallel(ctx, n, s.cfg.workers, func(ctx context.Context, i int) error {
		foo := &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: fooName(i), Namespace: benchNamespace},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: fooName(i), Replicas: ptr.To[int32](initialReplicas)},
		}
		var err error
		if s.foos[i], err = s.sample.SamplecontrollerV1alpha1().Foos(benchNamespace).Create(ctx, foo, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Foo %s: %w", foo.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	seen := func() int { return len(s.watch.foos.ListKeys()) }
	if err := s.waitUntil(ctx, time.Minute, func() bool { return seen() >= n }, nil); err != nil {
		return err
	}
	if seen() < n {
		return fmt.Errorf("the watch saw only %d of the %d Foos created", seen(), n)
	}
	progressf("%s: created %d Foos in %v", s.name, n, time.Since(began).Round(time.Millisecond))
	return nil
}

// stopController stops the controller's processes, whose exits then end nothing.
func (s *session) stopController() error {
	s.mu.Lock()
	if s.stoppedProcs == nil {
		s.stoppedProcs = map[*localcluster.Process]bool{}
	}
	for _, proc := range s.procs {
		s.stoppedProcs[proc] = true
	}
	s.mu.Unlock()
	var errs []error
	for _, proc := range s.procs {
		errs = append(errs, proc.Stop(localcluster.ControllerStopGrace))
	}
	return errors.Join(errs...)
}

// stopped tells whether the bench stopped proc.
func (s *session) stopped(proc *localcluster.Process) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stoppedProcs[proc]
}

// stop stops the driver, the watch and the cluster, and removes its etcd data; the
// logs stay.
func (s *session) stop() {
	if len(s.procs) > 0 {
		if err := s.stopController(); err != nil {
			progressf("%s: %v", s.name, err)
		}
	}
	if s.limit != nil {
		s.limit.stop()
	}
	if s.watch != nil {
		s.watch.stop()
	}
	if s.cluster == nil {
		return
	}
	if err := s.cluster.Stop(); err != nil {
		progressf("%s: stopping the cluster: %v", s.name, err)
	}
	if err := os.RemoveAll(filepath.Join(s.cluster.Dir(), "etcd")); err != nil {
		progressf("%s: %v", s.name, err)
	}
}

// waitUntil polls done until it holds, timeout passes (no error: the caller says how
// far it got) or ctx ends, and prints progress() every progressInterval.
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
	select {
	case <-time.After(d):
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

// parallel calls fn for 0..n-1 from at most workers goroutines and stops at the first
// error.
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

// watcher hands every change of the Foos, Deployments and Events, with the time it
// arrived, to the observer. It only watches: the bench adds no requests meanwhile.
type watcher struct {
	stop func()
	foos cache.Store

	mu sync.Mutex
	to observer
}

// observer takes the changes of each kind; a nil func ignores that kind.
type observer struct {
	deployment func(*appsv1.Deployment, time.Time)
	foo        func(*samplev1alpha1.Foo, time.Time)
	event      func(*eventsv1.Event, time.Time)
}

func startWatcher(ctx context.Context, kube kubernetes.Interface, sample clientset.Interface) (*watcher, error) {
	// Foos keep their managedFields, which tell whether a status was written.
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithNamespace(benchNamespace), kubeinformers.WithTransform(dropManagedFields))
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sample, 0, sampleinformers.WithNamespace(benchNamespace))
	deployments := kubeFactory.Apps().V1().Deployments().Informer()
	foos := sampleFactory.Samplecontroller().V1alpha1().Foos().Informer()
	events := kubeFactory.Events().V1().Events().Informer()
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{foos: foos.GetStore(), stop: func() {
		cancel()
		kubeFactory.Shutdown()
		sampleFactory.Shutdown()
	}}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.deliver(obj, time.Now()) },
		UpdateFunc: func(_, obj any) { w.deliver(obj, time.Now()) },
	}
	for _, informer := range []cache.SharedIndexInformer{deployments, foos, events} {
		if _, err := informer.AddEventHandler(handler); err != nil {
			cancel()
			return nil, err
		}
	}
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), deployments.HasSynced, foos.HasSynced, events.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("watching the Foos, Deployments and Events: caches did not sync: %w", context.Cause(ctx))
	}
	return w, nil
}

func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// observe hands later changes to o.
func (w *watcher) observe(o observer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.to = o
}

func (w *watcher) deliver(obj any, at time.Time) {
	w.mu.Lock()
	to := w.to
	w.mu.Unlock()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if to.deployment != nil {
			to.deployment(o, at)
		}
	case *samplev1alpha1.Foo:
		if to.foo != nil {
			to.foo(o, at)
		}
	case *eventsv1.Event:
		if to.event != nil {
			to.event(o, at)
		}
	}
}
