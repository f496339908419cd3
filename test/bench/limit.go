package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
)

// limit is the bench making our controller's writes itself, with no watch, no cache
// and no other process in between: what this apiserver accepts from one client without
// a rate limit and with --workers requests in flight. A change of a Foo's own spec
// records no event, so the reaction case writes none.
type limit struct {
	Events bool `json:"events"`
	// Inflight is how many requests it has in flight; 0 means --workers.
	Inflight int `json:"inflight,omitempty"`
	// Watching starts informers on the Foos and their Deployments, as our controller
	// builds them, and waits for their caches before it writes: what the list and the
	// watches of a controller cost, with nothing acting on them but this. In the
	// reaction case it learns of a change from the Foo's watch event, as a controller
	// must, where the plain limit follows the patch's response, one apiserver round
	// sooner.
	Watching bool `json:"watching,omitempty"`
}

func (l limit) column() string {
	if l.Events {
		return "limit with events"
	}
	return "limit"
}

func (limit) rule() statusRule { return ruleReady }

// start makes the cold start's writes, and starts the workers that follow the
// reaction case's patches.
func (l limit) start(ctx context.Context, s *session) error {
	writes := "a Deployment and a status"
	if l.Events {
		writes = "a Deployment, an Event and a status"
	}
	inflight := l.Inflight
	if inflight == 0 {
		inflight = s.cfg.workers
	}
	kube, sample, httpClient, err := limitClients(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	run := &limitRun{
		s:           s,
		kube:        kube,
		sample:      sample,
		watching:    l.Watching,
		closeIdle:   httpClient.CloseIdleConnections,
		queue:       workqueue.NewTyped[int](),
		deployments: make([]*appsv1.Deployment, len(s.foos)),
		latest:      map[int]*samplev1alpha1.Foo{},
	}
	stopInformers := func() {}
	if l.Watching {
		if stopInformers, err = startInformers(ctx, s, kube, sample, run.specChanged); err != nil {
			cancel()
			return err
		}
	}
	run.cancel = func() { cancel(); stopInformers() }
	progressf("%s: writing %s per Foo with %d requests in flight", s.name, writes, inflight)
	s.limit = run
	run.wg.Go(func() {
		err := parallel(ctx, len(s.foos), inflight, func(ctx context.Context, i int) error { return run.create(ctx, i, l.Events) })
		if err != nil && ctx.Err() == nil {
			s.fail(err)
		}
	})
	for range s.cfg.workers {
		run.wg.Go(func() {
			for run.work(ctx) {
			}
		})
	}
	return nil
}

// limitClients builds the limit's clients as our controller builds its own: the
// built-in types as protobuf, the Foos as JSON (custom resources have no protobuf),
// both on one connection, as the controller's clients share the one client-go caches
// for their configuration. Built from the bench's configuration, they would share
// the bench's connection instead, and with it the bench's patches and watch.
func limitClients(s *session) (kubernetes.Interface, clientset.Interface, *http.Client, error) {
	cfg, httpClient, err := ownConnection(s, "sample-controller-bench-limit")
	if err != nil {
		return nil, nil, nil, err
	}
	sample, err := clientset.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, nil, nil, err
	}
	return kube, sample, httpClient, nil
}

// ownConnection is the admin configuration with no client-side rate limit and an
// HTTP client whose transport, and so connection, is not the bench's: a Dial function
// keeps client-go from handing out the transport it caches for the configuration.
// Clients built with that HTTP client share its one connection.
func ownConnection(s *session, userAgent string) (*rest.Config, *http.Client, error) {
	cfg := s.cluster.RESTConfig()
	cfg.QPS, cfg.UserAgent = -1, userAgent
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	httpClient, err := rest.HTTPClientFor(cfg)
	return cfg, httpClient, err
}

// startInformers lists and watches the session's Foos and their Deployments as our
// controller does (its namespace, the Deployments' label, managedFields dropped from
// the caches), through the limit's clients, and returns once both caches are filled.
// Its one handler calls changed with each Foo whose spec an update changed. stop shuts
// them down.
func startInformers(ctx context.Context, s *session, kube kubernetes.Interface, sample clientset.Interface, changed func(*samplev1alpha1.Foo)) (stop func(), err error) {
	dropManagedFields := func(obj any) (any, error) {
		if accessor, err := meta.Accessor(obj); err == nil {
			accessor.SetManagedFields(nil)
		}
		return obj, nil
	}
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithNamespace(s.namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = reconcile.FooUIDLabel }),
		kubeinformers.WithTransform(dropManagedFields))
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sample, 0,
		sampleinformers.WithNamespace(s.namespace),
		sampleinformers.WithTransform(dropManagedFields))
	kubeFactory.Apps().V1().Deployments().Informer()
	_, err = sampleFactory.Samplecontroller().V1alpha1().Foos().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, foo := oldObj.(*samplev1alpha1.Foo), newObj.(*samplev1alpha1.Foo)
			if foo.Generation != old.Generation {
				changed(foo)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	stop = func() {
		kubeFactory.Shutdown()
		sampleFactory.Shutdown()
	}
	for _, result := range []cache.SyncResult{kubeFactory.WaitForCacheSyncWithContext(ctx), sampleFactory.WaitForCacheSyncWithContext(ctx)} {
		if err := result.AsError(); err != nil {
			stop()
			return nil, fmt.Errorf("the limit's informers: %w", err)
		}
	}
	return stop, nil
}

// limitRun is a limit's writers on one session.
type limitRun struct {
	s      *session
	kube   kubernetes.Interface // the limit's own clients (limitClients)
	sample clientset.Interface
	cancel context.CancelFunc
	// watching: it follows the changes its Foo informer sees (specChanged), not the
	// patches' responses (follow).
	watching bool
	// closeIdle closes the limit's connection once its writers are done.
	closeIdle func()
	wg        sync.WaitGroup
	queue     workqueue.TypedInterface[int] // Foos to follow, by index

	failed atomic.Int64 // writes that failed since the last takeFailures

	mu          sync.Mutex
	deployments []*appsv1.Deployment        // by index, as last written
	latest      map[int]*samplev1alpha1.Foo // by index, as the last change followed left it
}

// create makes a controller's writes for the i-th Foo, new: the Deployment, the
// Event if asked, the status.
func (l *limitRun) create(ctx context.Context, i int, events bool) error {
	foo := l.s.foos[i]
	d, err := l.kube.AppsV1().Deployments(foo.Namespace).Create(ctx, reconcile.NewDeployment(foo), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Deployment %s: %w", foo.Spec.DeploymentName, err)
	}
	l.mu.Lock()
	l.deployments[i] = d
	l.mu.Unlock()
	if events {
		if _, err := l.kube.EventsV1().Events(foo.Namespace).Create(ctx, createdEvent(foo, d, time.Now()), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("recording the creation of Deployment %s: %w", d.Name, err)
		}
	}
	return l.writeStatus(ctx, foo, d)
}

// writeStatus writes the status our controller computes for foo whose Deployment is d.
func (l *limitRun) writeStatus(ctx context.Context, foo *samplev1alpha1.Foo, d *appsv1.Deployment) error {
	withStatus := foo.DeepCopy()
	withStatus.Status = reconcile.CalculateStatus(foo, d, nil, metav1.Now())
	if _, err := l.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).UpdateStatus(ctx, withStatus, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of Foo %s: %w", foo.Name, err)
	}
	return nil
}

// createdEvent is the Event our controller records when it has created d for foo, as
// client-go's events.EventRecorder builds it.
func createdEvent(foo *samplev1alpha1.Foo, d *appsv1.Deployment, now time.Time) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", foo.Name, now.UnixNano()), Namespace: foo.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: "sample-controller",
		ReportingInstance:   "sample-controller-bench",
		Action:              "Create",
		Reason:              reconcile.EventDeploymentCreated,
		Regarding:           objectReference(reconcile.FooGVK.GroupVersion().String(), "Foo", &foo.ObjectMeta),
		Related:             ptr.To(objectReference("apps/v1", "Deployment", &d.ObjectMeta)),
		Note:                fmt.Sprintf("Created Deployment %q", d.Name),
		Type:                corev1.EventTypeNormal,
	}
}

func objectReference(apiVersion, kind string, m *metav1.ObjectMeta) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
}

// follow queues the writes for the i-th Foo, which a change made foo: as the patch's
// response or the watching limit's informer gave it. It does not block the caller.
func (l *limitRun) follow(i int, foo *samplev1alpha1.Foo) {
	l.mu.Lock()
	l.latest[i] = foo
	l.mu.Unlock()
	l.queue.Add(i)
}

// specChanged follows a change of foo's spec that the limit's Foo informer saw.
func (l *limitRun) specChanged(foo *samplev1alpha1.Foo) {
	if i, ok := l.s.fooIndex(foo.Name); ok {
		l.follow(i, foo)
	}
}

// work makes the writes for one queued Foo: the Deployment update, then the status.
func (l *limitRun) work(ctx context.Context) bool {
	i, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(i)
	l.mu.Lock()
	foo, d := l.latest[i], l.deployments[i]
	l.mu.Unlock()
	if d == nil {
		// Its cold start has not created it: no change comes before that converged.
		l.failed.Add(1)
		return true
	}

	d, _ = reconcile.UpdateDeployment(foo, d)
	deployments := l.kube.AppsV1().Deployments(foo.Namespace)
	updated, err := deployments.Update(ctx, d, metav1.UpdateOptions{})
	if err == nil {
		l.mu.Lock()
		l.deployments[i] = updated
		l.mu.Unlock()
		// A conflict means a newer patch of this Foo came in meanwhile and queued it
		// again: that status write supersedes this one, as a controller's would.
		if err = l.writeStatus(ctx, foo, updated); apierrors.IsConflict(err) {
			err = nil
		}
	}
	if err != nil && ctx.Err() == nil {
		if l.failed.Add(1) == 1 {
			progressf("%s: %v", l.s.name, err)
		}
		// Read the Deployment again, so that one failure does not make every later
		// update of this Foo conflict.
		if fresh, getErr := deployments.Get(ctx, d.Name, metav1.GetOptions{}); getErr == nil {
			l.mu.Lock()
			l.deployments[i] = fresh
			l.mu.Unlock()
		}
	}
	return true
}

func (l *limitRun) takeFailures() int { return int(l.failed.Swap(0)) }

func (l *limitRun) stop() {
	l.cancel()
	l.queue.ShutDown()
	l.wg.Wait()
	l.closeIdle()
}
