// The Foo controller: the informers' events put Foo keys on a rate-limited work queue
// (enqueueFoo, handleObject), workers take them off (processNextWorkItem), and
// syncHandler makes each Foo's Deployment match its spec and writes its status. Read it
// top-down, in the order the data flows.

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/namewatch"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	"github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	listers "github.com/seed-e6610ed6/sample-controller/pkg/generated/listers/samplecontroller/v1alpha1"
)

const controllerAgentName = "sample-controller"

// fieldManager names this controller in the managedFields of what it writes.
const fieldManager = controllerAgentName

// maxNameWatches bounds the Deployment names watched at once for Foos whose name is
// taken by a Deployment outside the cache, one watch each.
const maxNameWatches = 100

// syncTimeout bounds one sync, so that a hung request cannot hold a worker forever.
const syncTimeout = 30 * time.Second

// defaultShutdownTimeout is how long in-flight syncs may take to finish on shutdown.
const defaultShutdownTimeout = 30 * time.Second

// errRejected marks a sync whose Deployment write the API server refused, after the
// rejection was reported on the Foo.
var errRejected = errors.New("deployment write rejected")

// errDeferred marks a sync that created the Foo's Deployment while other Foos were
// queued: its status write, and the Event that reports the create, wait for their turn
// behind them (Deployments first).
var errDeferred = errors.New("status write deferred behind the queued Foos")

// errStaleCache marks a sync skipped because the informer caches do not meet the Foo's
// expectations (c.writes). The event that meets them requeues it.
var errStaleCache = errors.New("the cache is stale")

// Controller keeps, for every Foo, a Deployment that matches the Foo's spec, and
// reports the Deployment's progress in the Foo's status.
type Controller struct {
	// Writes go through the clientsets.
	kubeclientset   kubernetes.Interface
	sampleclientset clientset.Interface

	// Reads come from the informers' caches.
	informers          *informers
	deploymentsIndexer cache.Indexer // of cached.Deployments: see cachedDeployment
	foosLister         listers.FooLister
	foosIndexer        cache.Indexer
	// synced are done once both informers have synced and the handlers have seen
	// every object of the initial lists.
	synced []cache.DoneChecker

	// workqueue holds the names of Foos to sync, each once, rate limited so that a
	// Foo that keeps failing backs off.
	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// rateLimiter is the workqueue's (see newRateLimiter).
	rateLimiter workqueue.TypedRateLimiter[cache.ObjectName]
	recorder    events.EventRecorder
	clock       clock.PassiveClock

	// writes holds, for each Foo, what the caches must show before it syncs: the
	// controller's expectations (internal/writes).
	writes *writes.Tracker
	// nameWatches wakes the Foos whose Deployment name is taken by a Deployment
	// outside the cache when it goes away.
	nameWatches *namewatch.Watcher
	// sync is syncHandler, in a field so that a test can wrap it.
	sync func(ctx context.Context, key cache.ObjectName) error
	// creationKey keys the tokens of the Deployments this process creates
	// (reconcile.CreationToken): random, and never out of the process.
	creationKey []byte

	shutdownTimeout  time.Duration     // Config.ShutdownTimeout
	deploymentLabels map[string]string // Config.DeploymentLabels
}

// Config is what a Controller is made of.
type Config struct {
	// QueueName names the work queue in its metrics; "foos" when empty.
	QueueName string
	// KubeClient and SampleClient are what the controller watches and writes with.
	KubeClient   kubernetes.Interface
	SampleClient clientset.Interface
	// Namespace is the one namespace whose Foos and Deployments it watches; all when
	// empty. ResyncPeriod is how often its informers replay their caches; 0 never.
	Namespace    string
	ResyncPeriod time.Duration
	// InformerName, unless empty, names its informers in client-go's informer
	// metrics.
	InformerName string
	Recorder     events.EventRecorder
	// ShutdownTimeout bounds how long Run lets in-flight syncs finish once its
	// context is cancelled; 30 s when zero.
	ShutdownTimeout time.Duration
	// DeploymentLabels, beyond the controller's own, are put on every Deployment it
	// writes, and its Deployment informer watches only the Deployments that carry them.
	DeploymentLabels map[string]string
	// FooListWatch, unless nil, lists and watches the Foos in place of SampleClient
	// over Namespace, for a controller that acts on some of them.
	FooListWatch *cache.ListWatch
}

// NewController builds the controller and its informers, and wires them together.
// The informers run from StartInformers to ShutdownInformers, apart from Run, so that
// a replica that is not the leader keeps its caches warm.
func NewController(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.QueueName == "" {
		cfg.QueueName = "foos"
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = defaultShutdownTimeout
	}
	informers := newInformers(cfg)
	deploymentInformer, fooInformer := informers.deployments, informers.foos
	rateLimiter := newRateLimiter()
	c := &Controller{
		kubeclientset:      cfg.KubeClient,
		sampleclientset:    cfg.SampleClient,
		informers:          informers,
		deploymentsIndexer: deploymentInformer.GetIndexer(),
		foosLister:         fooInformer.Lister(),
		foosIndexer:        fooInformer.Informer().GetIndexer(),
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			rateLimiter,
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: cfg.QueueName},
		),
		rateLimiter:      rateLimiter,
		recorder:         cfg.Recorder,
		clock:            clock.RealClock{},
		shutdownTimeout:  cfg.ShutdownTimeout,
		deploymentLabels: cfg.DeploymentLabels,
		creationKey:      make([]byte, 32),
	}
	if _, err := rand.Read(c.creationKey); err != nil {
		return nil, fmt.Errorf("making the key of creation tokens: %w", err)
	}

	c.writes = writes.NewTracker(fooInformer.Informer().GetStore(), deploymentInformer.GetStore(), func(key cache.ObjectName) { c.workqueue.Add(key) })
	c.sync = c.syncHandler
	c.nameWatches = namewatch.New(ctx, cfg.KubeClient, maxNameWatches, func(foo cache.ObjectName) { c.workqueue.Add(foo) })

	if err := c.addEventHandlers(ctx); err != nil {
		// The informers never ran: informers built later may take their names.
		informers.release()
		return nil, err
	}
	return c, nil
}

// addEventHandlers adds the controller's event handlers to its informers.
func (c *Controller) addEventHandlers(ctx context.Context) error {
	fooRegistration, err := c.informers.foos.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueFoo,
		UpdateFunc: c.updateFoo,
		DeleteFunc: c.forgetFoo,
	})
	if err != nil {
		return fmt.Errorf("adding the Foo event handler: %w", err)
	}

	deploymentRegistration, err := c.informers.deployments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.handleObject(ctx, obj, true) },
		UpdateFunc: func(old, new any) {
			if sameResourceVersion(old, new) {
				return
			}
			c.handleObject(ctx, new, true)
			if !sameController(old, new) {
				// Its former controller must learn that it lost it.
				c.handleObject(ctx, old, false)
			}
		},
		DeleteFunc: func(obj any) { c.handleObject(ctx, obj, false) },
	})
	if err != nil {
		return fmt.Errorf("adding the Deployment event handler: %w", err)
	}

	c.synced = []cache.DoneChecker{fooRegistration.HasSyncedChecker(), deploymentRegistration.HasSyncedChecker()}
	return nil
}

// Retries of failed syncs: each Foo backs off exponentially, and all of them together
// retry at most retryQPS a second after a burst of retryBurst. client-go's default, 10
// a second after 100, had the last of 1000 Foos failed in an outage wait 90 s for its
// turn; the apiserver's priority and fairness protects it from a larger burst.
const (
	retryBaseDelay = 5 * time.Millisecond
	retryMaxDelay  = 1000 * time.Second
	retryQPS       = 100
	retryBurst     = 1000
)

// newRateLimiter is the work queue's rate limiter for failed syncs.
func newRateLimiter() workqueue.TypedRateLimiter[cache.ObjectName] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](retryBaseDelay, retryMaxDelay),
		&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(retryQPS), retryBurst)},
	)
}

// enqueueFoo puts a Foo's name on the work queue.
func (c *Controller) enqueueFoo(obj any) {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("expected a Foo, got %T", obj))
		return
	}
	c.workqueue.Add(cache.MetaObjectToName(foo))
}

// updateFoo handles the informer's update of a Foo from old to new.
func (c *Controller) updateFoo(old, new any) {
	// A resync replays every cached Foo; one whose resourceVersion did not change has
	// nothing new to act on.
	if sameResourceVersion(old, new) {
		return
	}
	if !sameUID(old, new) {
		// Deleted and created again under the same name while the watch was down:
		// the relist that follows reports the two as one update.
		c.forgetFoo(old)
	}
	c.onFooUpdate(new)
}

// onFooUpdate has the expectations enqueue a Foo that changed, unless the change is
// the echo of the controller's own status write and no sync waits for it: requeuing
// on it would undo the Foo's backoff.
func (c *Controller) onFooUpdate(obj any) {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("expected a Foo, got %T", obj))
		return
	}
	c.writes.Observe(writes.Foos, cache.MetaObjectToName(foo), foo.UID, foo.ResourceVersion)
}

// forgetFoo drops what the controller remembers of a deleted Foo, whose echoes the
// informer may never deliver, and stops watching for its Deployment name.
func (c *Controller) forgetFoo(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if foo, ok := obj.(*samplev1alpha1.Foo); ok {
		c.forget(cache.MetaObjectToName(foo), foo.UID)
	}
}

// forget drops the controller's record of the Foo named key with UID uid (any UID
// when empty) and its name watch. A sync that runs meanwhile drops whatever it records
// after this when it ends (writes.Tracker.End), so that nothing outlives the Foo.
func (c *Controller) forget(key cache.ObjectName, uid types.UID) {
	c.writes.Forget(key, uid)
	c.nameWatches.Done(key)
}

// handleObject enqueues, for a Deployment that was added, changed or deleted, the Foo
// that controls it, and every Foo that asks for its name: a Foo recreated under the
// same name, or one waiting for a name another Foo gives up, learns at once that the
// name is free or taken. The controlling Foo is enqueued by its expectations (Observe)
// unless the event is the echo of the controller's own write, whose sync acted on what
// the write returned: a sync on it would do nothing, or retry a failed sync before its
// backoff allows. A deletion, or a Deployment the informer replaced (current false),
// enqueues it at once as well.
func (c *Controller) handleObject(ctx context.Context, obj any, current bool) {
	logger := klog.FromContext(ctx)
	object, ok := obj.(metav1.Object)
	if !ok {
		// A deletion the informer missed arrives as a tombstone holding the last
		// state it knew.
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleErrorWithContext(ctx, nil, "Error decoding object, invalid type", "type", fmt.Sprintf("%T", obj))
			return
		}
		object, ok = tombstone.Obj.(metav1.Object)
		if !ok {
			utilruntime.HandleErrorWithContext(ctx, nil, "Error decoding object tombstone, invalid type", "type", fmt.Sprintf("%T", tombstone.Obj))
			return
		}
		current = false
	}
	var controller types.UID // the Foo that controls it, which its expectations enqueue
	if ref := metav1.GetControllerOf(object); isFooRef(ref) {
		foo, err := c.foosLister.Foos(object.GetNamespace()).Get(ref.Name)
		if err != nil || foo.UID != ref.UID {
			logger.V(4).Info("Deployment of a Foo that no longer exists", "deployment", klog.KObj(object), "foo", ref.Name)
		} else {
			// Every event of the Deployment passes the expectations, a deletion too,
			// whose later version passes the echo.
			controller = foo.UID
			c.writes.Observe(writes.Deployments, cache.MetaObjectToName(foo), foo.UID, object.GetResourceVersion())
			if !current {
				c.enqueueFoo(foo)
			}
		}
	}
	waiting, err := c.foosIndexer.ByIndex(byDeploymentName, object.GetNamespace()+"/"+object.GetName())
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Listing the Foos that ask for a Deployment", "deployment", klog.KObj(object))
		return
	}
	for _, obj := range waiting {
		if foo, ok := obj.(*samplev1alpha1.Foo); ok && controller != "" && foo.UID == controller {
			continue
		}
		c.enqueueFoo(obj)
	}
}

// StartInformers starts the controller's informers until ctx ends.
func (c *Controller) StartInformers(ctx context.Context) { c.informers.start(ctx) }

// ShutdownInformers waits for the informers to stop, once the context StartInformers
// was given has ended.
func (c *Controller) ShutdownInformers() { c.informers.shutdown() }

// Run waits for the caches to sync, then runs workers until ctx is cancelled. On
// cancellation it stops taking new work but the status writes of the Deployments it
// created, lets in-flight syncs and those finish for up to shutdownTimeout, and
// returns once every worker has exited.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.workqueue.ShutDown()
	logger := klog.FromContext(ctx)

	logger.Info("Starting Foo controller")
	logger.Info("Waiting for informer caches to sync")
	// It only gives up when ctx is cancelled, by a shutdown during start-up, which is
	// not an error, as client-go's named wait would report it.
	if !c.waitForCaches(ctx) {
		logger.Info("Stopped before the caches synced")
		return nil
	}
	logger.Info("Caches are synced")

	// Syncs run on a context that cancellation of ctx does not reach, so that they
	// finish instead of failing half-way; abort ends them when the grace runs out.
	workCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	logger.Info("Starting workers", "count", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			defer utilruntime.HandleCrashWithContext(workCtx)
			c.runWorker(workCtx)
		})
	}

	<-ctx.Done()
	logger.Info("Shutting down workers", "gracePeriod", c.shutdownTimeout)
	c.workqueue.ShutDown()
	grace := time.AfterFunc(c.shutdownTimeout, func() {
		logger.Info("Grace period is over, cancelling in-flight syncs")
		abort()
	})
	defer grace.Stop()
	wg.Wait()
	logger.Info("Workers stopped")
	return nil
}

// HasSynced tells whether both informer caches have synced and the event handlers
// have seen everything in them.
func (c *Controller) HasSynced() bool {
	for _, synced := range c.synced {
		if !cache.IsDone(synced) {
			return false
		}
	}
	return true
}

// waitForCaches returns once HasSynced would say true, and false if ctx ends first:
// on the informers' own signal, not a poll, so the workers start at once.
func (c *Controller) waitForCaches(ctx context.Context) bool {
	return cache.WaitFor(ctx, "", c.synced...)
}

// runWorker processes work items until the queue shuts down.
func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

// conflictRecheckInterval is when a Foo whose write met a conflict is synced again if
// no event brought it back first: the event of the newer version its cache lacked does,
// as a rule, within milliseconds.
const conflictRecheckInterval = 5 * time.Second

// processNextWorkItem syncs one Foo. A failed sync is retried with per-item
// exponential backoff; a successful one resets the backoff.
func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.workqueue.Get()
	if shutdown {
		return false
	}
	defer c.workqueue.Done(key)
	if c.workqueue.ShuttingDown() && !c.writes.AnyUnrecorded(key) {
		// Stopping: leave what is still queued to the next process, but for the status
		// of a Deployment this process created (Deployments first): the next one would
		// record it only at its first sync of the Foo, and a deploymentName changed
		// before that would leave it behind, a Deployment nobody recorded.
		return true
	}

	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	timedSync := func() error {
		start := time.Now()
		defer func() { syncDuration.Observe(time.Since(start).Seconds()) }()
		return c.sync(syncCtx, key)
	}
	err := timedSync()
	if errors.Is(err, errDeferred) {
		// Deployments first: a user waits for the Deployments, which the Foos queued
		// behind this one lack; the status that reports this one comes after them. At
		// the back of the queue, once: the next sync creates nothing.
		syncsTotal.WithLabelValues(syncDeferred).Inc()
		c.workqueue.Forget(key)
		c.workqueue.Add(key)
		if !c.workqueue.ShuttingDown() {
			return true
		}
		// Stopping, and the queue may have refused the key: the status goes now.
		err = timedSync()
	}
	switch {
	case err == nil:
		syncsTotal.WithLabelValues(syncSuccess).Inc()
		c.workqueue.Forget(key)
	case errors.Is(err, errStaleCache):
		// Nothing done, nothing failed: the Foo keeps its backoff until the event.
		syncsTotal.WithLabelValues(syncStale).Inc()
		klog.FromContext(ctx).V(4).Info("Skipped a sync until the cache catches up", "foo", key, "err", err)
	case errors.Is(err, errRejected):
		// Reported on the Foo by the sync. The cause (a policy, a quota) can go with no
		// event that brings the Foo back: its backoff stops at rejectedRecheckInterval.
		syncsTotal.WithLabelValues(syncRejected).Inc()
		utilruntime.HandleErrorWithContext(ctx, err, "Requeuing with backoff", "foo", key)
		c.workqueue.AddAfter(key, c.rejectedBackoff(key))
	case tenure.Fenced(err):
		// The fencing policy denied a write: another replica holds the Lease now. An
		// error all the same: a denial that lasts is a policy this replica cannot
		// match (a token bound to no Pod, POD_NAME or POD_UID missing).
		syncsTotal.WithLabelValues(syncFenced).Inc()
		utilruntime.HandleErrorWithContext(ctx, err, "A write was refused by the fencing policy, requeuing", "foo", key)
		c.workqueue.AddRateLimited(key)
	case errors.Is(err, tenure.ErrHeldBack):
		// This replica may no longer write; kept with backoff in case its tenure is
		// renewed late.
		syncsTotal.WithLabelValues(syncHeldBack).Inc()
		klog.FromContext(ctx).V(2).Info("A write was held back: the tenure is not valid", "foo", key, "err", err)
		c.workqueue.AddRateLimited(key)
	case apierrors.IsConflict(err):
		// The cache was behind the server: the informer's event for the newer version
		// brings the Foo back (handleObject, enqueueFoo). A retry before it would
		// decide on the same stale copy and conflict again, so none is scheduled
		// sooner than conflictRecheckInterval, the fallback.
		syncsTotal.WithLabelValues(syncConflict).Inc()
		klog.FromContext(ctx).V(4).Info("Conflict while syncing, waiting for the cache", "foo", key, "err", err)
		c.workqueue.AddAfter(key, conflictRecheckInterval)
	default:
		syncsTotal.WithLabelValues(syncError).Inc()
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing Foo, requeuing", "foo", key)
		c.workqueue.AddRateLimited(key)
	}
	return true
}

// syncHandler brings the Deployment of the named Foo in line with the Foo's spec and
// writes the Foo's status. It writes nothing when nothing differs. A sync that creates
// a new Foo's Deployment while other Foos wait in the queue stops there (errDeferred):
// their Deployments, which users wait for, go before the status and the Event that
// report this one, as at a cold start with every Foo new.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "foo", klog.KRef(key.Namespace, key.Name))
	ctx = klog.NewContext(ctx, logger)

	foo, err := c.foosLister.Foos(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		// Deleted: the garbage collector removes its Deployments.
		logger.V(4).Info("Foo no longer exists")
		c.forget(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	// A cache older than what this controller wrote or read for the Foo would have
	// the sync redo or undo it; the Foo's events wait for the sync's end (End).
	behind, ok := c.writes.Begin(key, foo.UID)
	if !ok {
		staleSkipsTotal.WithLabelValues(behind).Inc()
		return fmt.Errorf("%w: the %s cache is behind what the controller wrote or read", errStaleCache, behind)
	}
	defer c.writes.End(key, foo.UID)
	if foo.DeletionTimestamp != nil {
		// Being deleted, perhaps in the foreground: recreating its Deployment would
		// fight the garbage collector.
		return nil
	}

	s := &fooSync{c: c, foo: foo, records: foo.Status.Deployments}
	for _, created := range c.writes.Unrecorded(key, foo.UID) {
		// Created by an earlier sync, which left the status write for later.
		s.records = reconcile.SetRecord(s.records, created)
	}
	deployment, syncErr := c.syncDeployment(ctx, s)
	foo = s.foo
	var retryErr error
	switch {
	case syncErr == nil:
		c.writes.Report(key, foo.UID, "")
		c.nameWatches.Done(key)
		if s.made && c.workqueue.Len() > 0 && !c.workqueue.ShuttingDown() && len(foo.Status.Deployments) == 0 && foo.Status.ObservedGeneration == 0 {
			// A new Foo: its status and Event wait behind the Foos queued.
			return errDeferred
		}
		if err := c.deletePreviousDeployments(ctx, s); err != nil {
			return err
		}
	case errors.Is(syncErr, reconcile.ErrNotOwned):
		c.reportNotOwned(ctx, foo, deployment, syncErr)
	case tenure.Fenced(syncErr):
		// The Lease names another Pod now: nothing to tell the Foo's author.
		return syncErr
	case reconcile.IsRejected(syncErr) && !apierrors.HasStatusCause(syncErr, corev1.NamespaceTerminatingCause):
		// A namespace being deleted refuses creates, events included, and takes the
		// Foo with it; there is no one to tell. The name was not taken.
		c.nameWatches.Done(key)
		retryErr = c.reportRejected(ctx, foo, syncErr)
	default:
		return syncErr
	}
	now := metav1.NewTime(c.clock.Now())
	written, statusErr := c.updateFooStatus(ctx, foo, func(foo *samplev1alpha1.Foo) samplev1alpha1.FooStatus {
		status := reconcile.CalculateStatus(foo, deployment, syncErr, now)
		status.Deployments = s.records
		return status
	})
	recorded := statusErr == nil && written != nil
	if statusErr == nil && written == nil && !equality.Semantic.DeepEqual(s.records, foo.Status.Deployments) {
		// Given up for a new spec: its sync must still know what this one created
		// or deleted.
		recorded, statusErr = c.keepRecords(ctx, foo, s.records)
	}
	if recorded {
		c.recorded(foo)
	}
	return errors.Join(retryErr, statusErr)
}

// recorded is called once a status write of foo carried the records of its sync: the
// Deployments this process created for it that the status did not record yet are
// reported now, with an Event each. Deployments first: after those of the Foos queued
// before it.
func (c *Controller) recorded(foo *samplev1alpha1.Foo) {
	for _, r := range c.writes.Recorded(cache.MetaObjectToName(foo), foo.UID) {
		created := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: foo.Namespace, Name: r.Name, UID: r.UID}}
		c.recorder.Eventf(foo, created, corev1.EventTypeNormal, reconcile.EventDeploymentCreated, "Create",
			"Created Deployment %q", r.Name)
	}
}

// keepRecords writes records, the record of the Deployments created for foo as a sync
// left it, onto the Foo as the API server has it now, unless that Foo is another or
// its record changed since foo; it tells whether it wrote them.
func (c *Controller) keepRecords(ctx context.Context, foo *samplev1alpha1.Foo, records []samplev1alpha1.CreatedDeployment) (bool, error) {
	foos := c.sampleclientset.SamplecontrollerV1alpha1().Foos(foo.Namespace)
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := foos.Get(ctx, foo.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if current.UID != foo.UID || !equality.Semantic.DeepEqual(current.Status.Deployments, foo.Status.Deployments) {
			return nil
		}
		current.Status.Deployments = records
		written, err := foos.UpdateStatus(ctx, current, metav1.UpdateOptions{FieldManager: fieldManager})
		if err == nil {
			// Not the echo of a sync's write: no sync has seen the new spec. The Foo
			// syncs again once the cache holds the record.
			c.writes.Expect(writes.Foos, cache.MetaObjectToName(written), written.UID, written.ResourceVersion)
			wrote = true
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return false, nil // the garbage collector deletes its Deployments
	}
	if err != nil {
		return false, fmt.Errorf("recording the Deployments of Foo %s/%s: %w", foo.Namespace, foo.Name, err)
	}
	return wrote, nil
}

// fooSync is what the steps of one sync of a Foo share.
type fooSync struct {
	c *Controller
	// foo is the Foo as the cache had it, or as the sync last wrote its status.
	foo *samplev1alpha1.Foo
	// records are the Foo's record of the Deployments created for it
	// (status.deployments) as the sync leaves it; its status write ends with them.
	records []samplev1alpha1.CreatedDeployment
	// confirmed is set once the API server has confirmed foo current.
	confirmed bool
	// made is set when the sync created the Foo's Deployment.
	made bool
}

// confirm makes sure, at most once a sync, that the Foo is as the cache has it
// (confirmFoo): a write that a cached Foo older than the API server's would get wrong
// waits for it.
func (s *fooSync) confirm(ctx context.Context) error {
	if s.confirmed {
		return nil
	}
	err := s.c.confirmFoo(ctx, s.foo)
	s.confirmed = err == nil
	return err
}

// created tells whether d, which the Foo controls, is a Deployment the controller
// created for it, by its record. A record of d's name still being created is checked
// against d as the API server serves it (live; the cache keeps no annotations), and
// then holds d's UID. A Foo without records (reconcile.Unrecorded), on the API server
// too, has the Deployment under its current name recorded as created. A cached d not
// created for the Foo is checked against the API server, which may no longer have it
// (the controller's own delete, not yet in the cache).
func (s *fooSync) created(ctx context.Context, d *appsv1.Deployment, live bool) (bool, error) {
	deployments := s.c.kubeclientset.AppsV1().Deployments(d.Namespace)
	// read replaces d with the Deployment as the API server has it, if it is d.
	read := func() error {
		if live {
			return nil
		}
		current, err := deployments.Get(ctx, d.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && current.UID != d.UID:
			return fmt.Errorf("%w: Deployment %s/%s is gone from the API server", errStaleCache, d.Namespace, d.Name)
		case err != nil:
			return fmt.Errorf("getting Deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		d, live = current, true
		return nil
	}
	r := reconcile.Record(s.records, d.Name)
	switch {
	case r != nil && r.UID == d.UID:
	case r == nil && reconcile.Unrecorded(s.foo) && d.Name == s.foo.Spec.DeploymentName:
		// The API server's Foo must have no record either (confirmFoo).
		if err := s.confirm(ctx); err != nil {
			return false, err
		}
	case r != nil && r.UID == "":
		if err := read(); err != nil {
			return false, err
		}
		if !reconcile.Created(s.records, d) {
			return false, nil
		}
	default:
		return false, read()
	}
	s.records = reconcile.SetRecord(s.records, samplev1alpha1.CreatedDeployment{Name: d.Name, UID: d.UID})
	return true, nil
}

// syncDeployment makes sure the Deployment named in foo's spec exists and matches the
// spec, and returns it. When that name is taken by a Deployment foo does not control,
// it returns that Deployment with reconcile.ErrNotOwned and changes nothing. When the
// update is refused, it returns the Deployment as it is, for its replica counts.
// A Deployment that foo controls but that its record says the controller did not
// create is not owned either (reconcile.ErrNotCreated).
func (c *Controller) syncDeployment(ctx context.Context, s *fooSync) (*appsv1.Deployment, error) {
	foo := s.foo
	deployment, err := c.cachedDeployment(foo.Namespace, foo.Spec.DeploymentName)
	live := false
	if apierrors.IsNotFound(err) {
		deployment, err = c.createDeployment(ctx, s)
		foo, live = s.foo, true
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(deployment, foo) {
		return deployment, reconcile.ErrNotOwned
	}
	if created, err := s.created(ctx, deployment, live); err != nil {
		return nil, err
	} else if !created {
		return deployment, reconcile.ErrNotCreated
	}
	if deployment.DeletionTimestamp != nil {
		// Its deletion event will bring the Foo back to create a new one.
		return deployment, nil
	}

	updated, changed := reconcile.UpdateDeployment(foo, deployment)
	if setLabels(updated, c.deploymentLabels) {
		changed = true
	}
	if !changed {
		return deployment, nil
	}
	// A patch back to a spec the status says was applied (drift, or a cached Foo older
	// than the Deployment, which would undo what its author asked for) waits for the
	// API server to confirm the Foo. A spec not applied yet, the change a user waits
	// for, goes at once: the expectations and catchUp cover a cache behind it.
	if foo.Status.ObservedGeneration == foo.Generation {
		if err := s.confirm(ctx); err != nil {
			return deployment, err
		}
	}
	// The cached copy is trimmed (cached.Deployment): an update from it would wipe what
	// it lacks, so the changed fields go as a patch, conditional on the cached version.
	patch, err := reconcile.DeploymentPatch(deployment, updated)
	if err != nil {
		return deployment, err
	}
	updated, err = c.kubeclientset.AppsV1().Deployments(foo.Namespace).Patch(ctx, deployment.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		return deployment, fmt.Errorf("updating Deployment %s/%s: %w", foo.Namespace, foo.Spec.DeploymentName, err)
	}
	c.writes.ExpectWrite(writes.Deployments, cache.MetaObjectToName(foo), foo.UID, updated.ResourceVersion)
	// A new spec's update is told by status.observedGeneration; an Event, a write per
	// change, is kept for the surprise: drift after the spec was applied.
	drifted := reconcile.SpecApplied(foo)
	klog.FromContext(ctx).Info("Updated Deployment to match the Foo", "deployment", klog.KObj(updated), "drifted", drifted)
	if drifted {
		c.recorder.Eventf(foo, updated, corev1.EventTypeNormal, reconcile.EventDeploymentUpdated, "Update",
			"Updated Deployment %q to match the Foo's spec", updated.Name)
	}
	return updated, nil
}

// createDeployment creates foo's Deployment, which is not in the cache. The cache holds
// only Deployments this controller labelled, so the name may still be taken on the
// server: then it returns the Deployment found there, for the caller to judge.
//
// A Foo that has a record of Deployments created for it records that this one is
// being created before it is: a process that dies between the create and the status
// write that records its UID leaves a record that tells the next one this Deployment
// from one that someone else gave the Foo's owner reference. A Foo without records
// needs none (reconcile.Unrecorded): a new Foo's create costs no extra write.
func (c *Controller) createDeployment(ctx context.Context, s *fooSync) (*appsv1.Deployment, error) {
	foo := s.foo
	deployments := c.kubeclientset.AppsV1().Deployments(foo.Namespace)
	name := foo.Spec.DeploymentName
	token := reconcile.CreationToken(c.creationKey, foo, name)
	creating := samplev1alpha1.CreatedDeployment{Name: name, Creating: reconcile.TokenHash(token)}
	// previous is the record of the name before this sync's (SetRecord copies).
	previous := reconcile.Record(s.records, name)
	// lookFirst looks for the Deployment on the server, which has it when the cache
	// does not hold every Deployment of the name.
	looked := false
	lookFirst := func() (*appsv1.Deployment, error) {
		looked = true
		existing, err := deployments.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("getting Deployment %s/%s: %w", foo.Namespace, name, err)
		}
		return existing, nil
	}
	if reconcile.NotOwnedReported(foo, nil) {
		// Known to be taken at the last look: check before trying to create.
		if existing, err := lookFirst(); err != nil || existing != nil {
			return existing, err
		}
	}
	if foo.Status.ObservedGeneration > 0 || c.controlsAny(foo) {
		// The Foo had a Deployment before: make sure it is not gone with it, and that
		// this name is not one its spec gave up.
		if err := s.confirm(ctx); err != nil {
			return nil, err
		}
	}
	if previous != nil && *previous != creating && !looked {
		// Recorded as created (by its UID, or by the token of another process) but
		// not in the cache: gone, no longer labelled, or the cache is behind. Check
		// before a new record hides the old.
		if existing, err := lookFirst(); err != nil || existing != nil {
			return existing, err
		}
	}
	if (len(s.records) > 0 || !reconcile.Unrecorded(foo)) && (previous == nil || *previous != creating) {
		s.records = reconcile.SetRecord(s.records, creating)
		written, err := c.updateFooStatus(ctx, foo, func(current *samplev1alpha1.Foo) samplev1alpha1.FooStatus {
			status := *current.Status.DeepCopy()
			status.Deployments = s.records
			return status
		})
		if err != nil {
			return nil, err
		}
		if written == nil {
			return nil, fmt.Errorf("%w: the Foo changed or went before its Deployment was recorded", errStaleCache)
		}
		s.foo, foo = written, written
		c.recorded(foo)
	}
	desired := reconcile.NewDeployment(foo)
	setLabels(desired, c.deploymentLabels)
	if r := reconcile.Record(s.records, name); r != nil && r.Creating != "" {
		desired.Annotations = map[string]string{reconcile.CreationTokenAnnotation: token}
	}
	created, err := deployments.Create(ctx, desired, metav1.CreateOptions{FieldManager: fieldManager})
	if err == nil {
		s.records = reconcile.SetRecord(s.records, samplev1alpha1.CreatedDeployment{Name: name, UID: created.UID})
		s.made = true
		key := cache.MetaObjectToName(foo)
		c.writes.ExpectWrite(writes.Deployments, key, foo.UID, created.ResourceVersion)
		// Until the status records it, and the Event reports it (syncHandler).
		c.writes.Created(key, foo.UID, samplev1alpha1.CreatedDeployment{Name: name, UID: created.UID})
		klog.FromContext(ctx).Info("Created Deployment", "deployment", klog.KObj(created))
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating Deployment %s/%s: %w", foo.Namespace, foo.Spec.DeploymentName, err)
	}
	existing, err := deployments.Get(ctx, foo.Spec.DeploymentName, metav1.GetOptions{})
	if err != nil {
		// Including NotFound: it was deleted in between, and the retry creates it.
		return nil, fmt.Errorf("getting Deployment %s/%s that already exists: %w", foo.Namespace, foo.Spec.DeploymentName, err)
	}
	if previous != nil && previous.Creating != "" && metav1.IsControlledBy(existing, foo) &&
		reconcile.Created([]samplev1alpha1.CreatedDeployment{*previous}, existing) {
		// Created under the record this sync replaced: by a process that died, or
		// whose create landed late.
		s.records = reconcile.SetRecord(s.records, samplev1alpha1.CreatedDeployment{Name: name, UID: existing.UID})
	}
	return existing, nil
}

// deletePreviousDeployments deletes the Deployments created for foo under a name other
// than its current deploymentName: those left behind when the name changed, as its
// record has them. Only for foo confirmed current: from an older Foo, the one left
// behind is the one it uses now. A Deployment that names foo as its controller without
// being recorded is left alone, and the record of one that is gone is dropped.
func (c *Controller) deletePreviousDeployments(ctx context.Context, s *fooSync) error {
	foo := s.foo
	deployments := c.kubeclientset.AppsV1().Deployments(foo.Namespace)
	for _, r := range s.records {
		if r.Name == foo.Spec.DeploymentName {
			continue
		}
		if err := s.confirm(ctx); err != nil {
			return err
		}
		d, err := c.cachedDeployment(foo.Namespace, r.Name)
		live := false
		if apierrors.IsNotFound(err) {
			// Not in the cache: gone, or no longer labelled as the controller's. Only
			// the API server can tell.
			d, err = deployments.Get(ctx, r.Name, metav1.GetOptions{})
			live = true
		}
		switch {
		case apierrors.IsNotFound(err):
			s.records = reconcile.DropRecord(s.records, r.Name)
			continue
		case err != nil:
			return fmt.Errorf("getting Deployment %s/%s: %w", foo.Namespace, r.Name, err)
		case d.DeletionTimestamp != nil:
			continue // its deletion event brings the Foo back
		}
		if !metav1.IsControlledBy(d, foo) {
			// Another Deployment took the name, or someone took this one over.
			s.records = reconcile.DropRecord(s.records, r.Name)
			continue
		}
		if created, err := s.created(ctx, d, live); err != nil {
			return err
		} else if !created {
			s.records = reconcile.DropRecord(s.records, r.Name)
			continue
		}
		err = deployments.Delete(ctx, d.Name, metav1.DeleteOptions{
			// Never delete a different Deployment that took the name meanwhile, nor
			// this one if it changed since it was read: someone may have taken it
			// over. The conflict requeues the Foo, and the next sync decides on what
			// the informer then brings.
			Preconditions: &metav1.Preconditions{UID: &d.UID, ResourceVersion: &d.ResourceVersion},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		s.records = reconcile.DropRecord(s.records, r.Name)
		if err == nil {
			klog.FromContext(ctx).Info("Deleted Deployment left under a previous deploymentName", "deployment", klog.KObj(d))
			c.recorder.Eventf(foo, d, corev1.EventTypeNormal, reconcile.EventDeploymentDeleted, "Delete",
				"Deleted Deployment %q, replaced by %q", d.Name, foo.Spec.DeploymentName)
		}
	}
	return nil
}

// updateFooStatus writes the status that compute derives from a Foo, unless the Foo
// already has it, and returns the Foo as it left it: foo when nothing was written, nil
// when it gave up. On a conflict it computes it again from the Foo as the server has it
// now, whose stored conditions may differ; it gives up when that Foo is not the one
// this sync decided for.
func (c *Controller) updateFooStatus(ctx context.Context, foo *samplev1alpha1.Foo, compute func(*samplev1alpha1.Foo) samplev1alpha1.FooStatus) (*samplev1alpha1.Foo, error) {
	status := compute(foo)
	if equality.Semantic.DeepEqual(foo.Status, status) {
		return foo, nil
	}
	var written *samplev1alpha1.Foo
	foos := c.sampleclientset.SamplecontrollerV1alpha1().Foos(foo.Namespace)
	generation := foo.Generation
	attempt := 0
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if attempt++; attempt > 1 {
			fresh, err := foos.Get(ctx, foo.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != foo.UID {
				c.writes.ExpectDeletion(cache.MetaObjectToName(foo), foo.UID)
			}
			if fresh.UID != foo.UID || fresh.Generation != generation || fresh.DeletionTimestamp != nil ||
				!equality.Semantic.DeepEqual(fresh.Status.Deployments, foo.Status.Deployments) {
				// Another Foo under the same name, a new spec, or a record this sync
				// did not decide on: its view of the Deployment is not for that Foo.
				// The informer brings it back to the queue, and that sync writes its
				// status.
				return nil
			}
			foo, status = fresh, compute(fresh)
			if equality.Semantic.DeepEqual(foo.Status, status) {
				written = foo
				return nil
			}
		}
		updated := foo.DeepCopy()
		updated.Status = status
		w, err := foos.UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
		if err != nil {
			return err // w is an empty Foo
		}
		written = w
		c.writes.ExpectWrite(writes.Foos, cache.MetaObjectToName(written), written.UID, written.ResourceVersion)
		return nil
	})
	if apierrors.IsNotFound(err) {
		// No Foo of that name, so none of this UID, which is never reused.
		c.writes.ExpectDeletion(cache.MetaObjectToName(foo), foo.UID)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("updating the status of Foo %s/%s: %w", foo.Namespace, foo.Name, err)
	}
	return written, nil
}

// isFooRef tells whether an owner reference points at a Foo, by API group and kind: a
// kind named Foo in another group is not ours.
func isFooRef(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != reconcile.FooGVK.Kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == samplecontroller.GroupName
}

// sameController tells whether two states of an object name the same controller, by
// UID; neither having one counts as the same.
func sameController(old, new any) bool {
	o, err1 := meta.Accessor(old)
	n, err2 := meta.Accessor(new)
	if err1 != nil || err2 != nil {
		return false
	}
	oref, nref := metav1.GetControllerOf(o), metav1.GetControllerOf(n)
	if oref == nil || nref == nil {
		return oref == nil && nref == nil
	}
	return oref.UID == nref.UID
}

// sameUID tells whether two states of a cached object are one object: a name deleted
// and taken again between two lists of the same informer is another object.
func sameUID(old, new any) bool {
	o, err1 := meta.Accessor(old)
	n, err2 := meta.Accessor(new)
	return err1 == nil && err2 == nil && o.GetUID() == n.GetUID()
}

// sameResourceVersion tells whether an update event carries no change, as during a
// resync.
func sameResourceVersion(old, new any) bool {
	o, err1 := meta.Accessor(old)
	n, err2 := meta.Accessor(new)
	return err1 == nil && err2 == nil && o.GetResourceVersion() == n.GetResourceVersion()
}
