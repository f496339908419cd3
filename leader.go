// The mode of one active replica: alone, or, with --leader-elect, the leader of
// several, whose writes are held to its tenure of the Lease. Sharded mode, where every
// replica acts on its slots, is in sharded.go.

package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/serving"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// runReplica runs one controller over every Foo until ctx ends: at once, or with
// lease.leaderElect only while this replica holds the Lease.
func runReplica(ctx context.Context, clients *clients, endpoints serving.Endpoints, opts controllerOptions, lease leaseOptions) error {
	logger := klog.FromContext(ctx)
	// With leader election, the Lease's tenure; without, none.
	var leading *tenure.Tenure
	if lease.leaderElect {
		leading = tenure.New(clock.RealClock{})
	}
	eventRecording, err := eventrecording.Start(ctx, clients.kube.EventsV1(), controllerAgentName, leading, dropEvent, eventsInFlight(opts.workers))
	if err != nil {
		return err
	}
	// Runs once the workers have stopped: the Events of the last syncs are written
	// before the process exits (as a leader, before it releases the Lease).
	defer eventRecording.Shutdown(ctx, eventrecording.FlushTimeout)

	cfg := opts.config(clients)
	cfg.Recorder, cfg.InformerName = eventRecording.Recorder(), controllerAgentName
	controller, err := NewController(ctx, cfg)
	if err != nil {
		return err
	}
	eventRecording.WhileIdle(opts.workers, controller.queueIdle)
	metrics.Registry.MustRegister(newFooReadyCollector(controller.cachedFoos))

	// Leader election reports a leader that cannot renew its Lease as unhealthy, so
	// that the kubelet restarts it.
	var watchdog *leaderelection.HealthzAdaptor
	var healthz func(*http.Request) error
	if lease.leaderElect {
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		healthz = watchdog.Check
	}
	servers, err := endpoints.Start(ctx, clients.config, controller.HasSynced, healthz)
	if err != nil {
		return err
	}
	defer servers.Shutdown(logger)

	// The caches fill on every replica, leader or not, so that a new leader starts
	// from a warm cache. Their shutdown waits for the informers' goroutines; it runs
	// after the workers stop.
	defer controller.ShutdownInformers()
	controller.StartInformers(ctx)

	work := func(ctx context.Context) error {
		if lease.leaderElect {
			catchUp(ctx, controller, clients.metadata, opts.namespace)
		}
		err := controller.Run(ctx, opts.workers)
		eventRecording.Shutdown(ctx, eventrecording.FlushTimeout)
		return err
	}
	if !lease.leaderElect {
		return work(ctx)
	}
	return runAsLeader(ctx, clients, lease.Lease, leading, watchdog, work)
}

// runAsLeader runs work only while this process holds the Lease, until ctx is
// cancelled (election.Run): on cancellation work stops first and the Lease is
// released after; a process that loses the Lease while it works, also while its last
// syncs finish after being asked to stop, exits at once and does not release it, so
// that a standby never starts while this process still works. work's writes are held
// to the tenure held, which the election keeps from its Lease writes and reads.
//
// The leader is one slot of sharded mode's scheme (slots.Single): it acts only once no
// sharded replica of the same group may act, and stops when they take over, so that a
// rolling update that turns sharded mode on or off never has both modes write.
func runAsLeader(ctx context.Context, clients *clients, lease election.Lease, held *tenure.Tenure, watchdog *leaderelection.HealthzAdaptor, work func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	single := slots.NewSingle(clients.lease, lease)
	observing, stopObserving := context.WithCancel(ctx)
	var observed sync.WaitGroup
	observed.Go(func() { single.Run(observing) })
	defer observed.Wait()
	defer stopObserving()
	lock := lease.NewLock(clients.lease, held, election.LockOptions{Labels: slots.SingleLeaseLabels(lease.Name)})
	logger.Info("Waiting to become the leader", "lease", klog.KRef(lease.Namespace, lease.Name), "identity", lease.Identity)
	for {
		if !single.WaitAdmissible(ctx) {
			return nil
		}
		admitted := false
		result := election.Run(ctx, election.Config{
			Lock:     lock,
			WatchDog: watchdog,
			OnLost: func() {
				logger.Error(nil, "Lost the lease; exiting so that two leaders never act at once", "identity", lease.Identity)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			},
			OnNewLeader: func(current string) {
				if current != lease.Identity {
					logger.Info("Another replica leads", "leader", current)
				}
			},
		}, func(ctx context.Context) error {
			if !single.Admit(ctx) {
				logger.Info("Sharded replicas of this group act, or may: releasing the Lease until they are gone", "group", lease.Name)
				return nil
			}
			admitted = true
			logger.Info("Became the leader", "identity", lease.Identity)
			ctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				single.WaitCountChanged(ctx)
				if ctx.Err() == nil {
					logger.Info("Sharded replicas of this group are to act: stopping", "group", lease.Name)
				}
				stop()
			}()
			return work(ctx)
		})
		if !result.Worked {
			return result.Err
		}
		if result.ReleaseErr != nil {
			logger.Error(result.ReleaseErr, "Releasing the lease; another replica takes over once it expires", "identity", lease.Identity)
		} else {
			logger.Info("Released the lease", "identity", lease.Identity)
		}
		metrics.LeaderElectionEnded(lease.Name)
		if admitted || ctx.Err() != nil {
			return result.Err
		}
		// Not admitted: the Lease is released; wait for the sharded replicas to go.
	}
}

// catchUpTimeout bounds a new leader's check of its caches. Past it the tenure goes
// on: a Deployment write for a Foo that has had one still confirms it
// (Controller.confirmFoo).
const catchUpTimeout = 30 * time.Second

// catchUpPageSize is how many objects' metadata one request of the check lists.
const catchUpPageSize = 500

// catchUp has a tenure that begins on warm caches decide on the present. A standby's
// caches can lag the API server by any time (a slow watch, a watch cache behind etcd)
// and hold the Foos as they were before the last leader's writes, while its Deployment
// cache is current, or the other way round. Once the caches have synced, catchUp lists
// the metadata of the Foos and of the controller's Deployments in namespace (all when
// empty) from the API server, a consistent read: what it held when the tenure began.
// Every Foo whose cached copy, or one of whose Deployments, is older or missing then
// waits until the cache holds the version listed (writes.Tracker.Expect), and a cached
// Foo the API server no longer had waits for its deletion; every other Foo syncs at
// once. The workers start when it returns.
func catchUp(ctx context.Context, c *Controller, client metadata.Interface, namespace string) {
	logger := klog.FromContext(ctx)
	if !c.waitForCaches(ctx) {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	foos, deployments, err := expectThePresent(ctx, c, client, namespace)
	took := time.Since(start)
	catchUpSeconds.Set(took.Seconds())
	cachesBehindTotal.WithLabelValues(writes.Foos).Add(float64(foos))
	cachesBehindTotal.WithLabelValues(writes.Deployments).Add(float64(deployments))
	if err != nil {
		logger.Error(err, "Checking the caches against the API server; going on, a Deployment write for a Foo that has had one confirms it", "took", took)
		return
	}
	logger.Info("Checked the caches against the API server", "foosBehind", foos, "deploymentsBehind", deployments, "took", took)
}

// expectThePresent is catchUp's comparison. It returns how many Foos and Deployments
// the caches held behind the API server.
func expectThePresent(ctx context.Context, c *Controller, client metadata.Interface, namespace string) (foos, deployments int, err error) {
	listed := map[cache.ObjectName]bool{}
	fooListRV, err := eachMetadata(ctx, client.Resource(samplev1alpha1.SchemeGroupVersion.WithResource("foos")), namespace, "", func(m *metav1.PartialObjectMetadata) {
		key := cache.MetaObjectToName(m)
		listed[key] = true
		cached, err := c.foosLister.Foos(m.Namespace).Get(m.Name)
		switch {
		case err != nil:
			// Not cached yet: the event that brings it in enqueues it.
		case cached.UID != m.UID && olderRV(cached.ResourceVersion, m.ResourceVersion):
			c.writes.Gone(key, cached.UID)
			foos++
		case cached.UID == m.UID && olderRV(cached.ResourceVersion, m.ResourceVersion):
			c.writes.Expect(writes.Foos, key, m.UID, m.ResourceVersion)
			foos++
		}
	})
	if err != nil {
		return foos, deployments, fmt.Errorf("listing the Foos' metadata: %w", err)
	}
	cached, err := c.foosLister.List(labels.Everything())
	if err != nil {
		return foos, deployments, err
	}
	for _, foo := range cached {
		// Not listed, and older than the list: deleted before it was read.
		if key := cache.MetaObjectToName(foo); !listed[key] && olderRV(foo.ResourceVersion, fooListRV) {
			c.writes.Gone(key, foo.UID)
			foos++
		}
	}
	// The controller's Deployments the cache lacks or holds older. One it holds that
	// the API server no longer has needs nothing here: a write to it is refused by its
	// preconditions, and its deletion event brings its Foo back.
	_, err = eachMetadata(ctx, client.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")), namespace, reconcile.FooUIDLabel, func(m *metav1.PartialObjectMetadata) {
		ref := metav1.GetControllerOf(m)
		if !isFooRef(ref) {
			return
		}
		if d, err := c.cachedDeployment(m.Namespace, m.Name); err == nil && d.UID == m.UID && !olderRV(d.ResourceVersion, m.ResourceVersion) {
			return
		}
		// For the Foo the cache holds under that name only: the record of another (an
		// earlier Foo of the name, whose Deployment awaits the garbage collector, or one
		// not cached yet, whose event enqueues it) would replace the Foo's own.
		if foo, err := c.foosLister.Foos(m.Namespace).Get(ref.Name); err != nil || foo.UID != ref.UID {
			return
		}
		c.writes.Expect(writes.Deployments, cache.ObjectName{Namespace: m.Namespace, Name: ref.Name}, ref.UID, m.ResourceVersion)
		deployments++
	})
	if err != nil {
		return foos, deployments, fmt.Errorf("listing the Deployments' metadata: %w", err)
	}
	return foos, deployments, nil
}

// eachMetadata lists the metadata of resource in namespace, a page at a time, and
// calls each for every item. It returns the list's resourceVersion, every page's.
func eachMetadata(ctx context.Context, resource metadata.Getter, namespace, selector string, each func(*metav1.PartialObjectMetadata)) (string, error) {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: catchUpPageSize}
	for {
		list, err := resource.Namespace(namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			each(&list.Items[i])
		}
		if list.Continue == "" {
			return list.ResourceVersion, nil
		}
		opts.Continue = list.Continue
	}
}

// olderRV tells whether resourceVersion a is older than b. Versions that do not
// compare (not from a real API server) count as not older.
func olderRV(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && cmp < 0
}
