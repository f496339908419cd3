package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/eventrecording"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/pkg/metrics"
	"github.com/seed-e6610ed6/sample-controller/pkg/slots"
	"github.com/seed-e6610ed6/sample-controller/pkg/tenure"
	"github.com/seed-e6610ed6/sample-controller/pkg/writes"
)

// SlotLabel marks, in sharded mode, each Deployment with the slot of its Foo, so that
// the replica holding the slot can list and watch exactly its Deployments by label.
const SlotLabel = samplecontroller.GroupName + "/slot"

var (
	slotCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sample_controller_slots",
		Help: "Slots the Foos are divided into (--shard-slots); 0 when not sharded.",
	})
	slotsHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sample_controller_slots_held",
		Help: "Slots whose Lease this replica holds and whose Foos it acts on, their caches synced (sharded mode).",
	})
	slotAcquisitions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sample_controller_slot_acquisitions_total",
		Help: "Times this replica took a slot over and started acting on it (sharded mode).",
	})
	slotUnheld = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "sample_controller_slot_unheld_seconds",
		Help: "When this replica took a slot over, how long the slot had gone without a holder, at most: since another replica last renewed or released the slot's Lease, as this replica saw it (sharded mode).",
		// From a hand-over (one retry period) to a dead holder's Lease expiring.
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
	})
)

// slotScope is what a controller of one slot needs to know of it.
type slotScope struct {
	space slots.Space
	slot  int
	value string
	// outside is set once the controller saw a Foo of another slot, so that it says
	// so once.
	outside atomic.Bool
}

// owns tells whether foo is in the slot. The apiserver sends a Foo of another slot only
// when it ignores the shard selector (ShardedListAndWatch off, or older than 1.36); the
// slot's informer then drops it before the cache, and the controller says so once.
func (s *slotScope) owns(logger klog.Logger, foo *samplev1alpha1.Foo) bool {
	if s.space.Of(foo.UID) == s.slot {
		return true
	}
	if !s.outside.Swap(true) {
		logger.Info("The API server sent Foos outside this slot: it ignores shard selectors (feature ShardedListAndWatch off, or older than 1.36); dropping them here instead, at the cost of receiving every Foo",
			"slot", s.slot, "example", klog.KObj(foo))
	}
	return false
}

// label sets the slot label on d, and tells whether it changed.
func (s *slotScope) label(d *appsv1.Deployment) bool {
	if d.Labels[SlotLabel] == s.value {
		return false
	}
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	d.Labels[SlotLabel] = s.value
	return true
}

// runSharded runs the controller in sharded mode until ctx ends: the replica announces
// itself (slots.Membership), and acts on the slots the assignment gives it, each with
// informers of its own that the apiserver filters to the slot, only while it holds the
// slot's Lease (slots.Holder).
// The Leases are written with leaseClient; the slots' writes, with the clients whose
// gate holds them to the slot's tenure.
func runSharded(ctx context.Context, opts options, leaseClient, kubeClient kubernetes.Interface, sampleClient clientset.Interface, identity string, membership *slots.Membership) error {
	logger := klog.FromContext(ctx)
	space, err := slots.NewSpace(opts.shardSlots)
	if err != nil {
		return err
	}
	var controllers sync.Map // slot -> *Controller
	var holder *slots.Holder
	holder = &slots.Holder{
		Space:      space,
		Membership: membership,
		Client:     leaseClient,
		Namespace:  opts.leaderElectNamespace,
		Group:      opts.leaderElectName,
		Identity:   identity,
		Timings: slots.LeaseTimings{
			Duration:      opts.leaderElectLeaseDuration,
			RenewDeadline: opts.leaderElectRenewDeadline,
			RetryPeriod:   opts.leaderElectRetryPeriod,
		},
		Work: func(ctx context.Context, slot int) error {
			slotAcquisitions.Inc()
			if unheld, ok := holder.Unheld(slot); ok {
				slotUnheld.Observe(unheld.Seconds())
			}
			ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("slot", slot))
			return runSlot(ctx, opts, space, slot, kubeClient, sampleClient, &controllers)
		},
		OnLost: func(slot int) {
			logger.Error(nil, "Lost the Lease of a slot; exiting so that two replicas never act on it at once", "slot", slot, "identity", identity)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		},
	}
	metrics.Registry.MustRegister(slotAcquisitions, slotUnheld, newCachedObjectsCollector(&controllers),
		newFooReadyCollector(func() ([]*samplev1alpha1.Foo, bool) {
			var all []*samplev1alpha1.Foo
			synced := true
			controllers.Range(func(_, v any) bool {
				foos, ok := v.(*Controller).cachedFoos()
				all, synced = append(all, foos...), ok
				return ok
			})
			return all, synced
		}))

	logger.Info("Running sharded", "slots", space.Len(), "group", klog.KRef(opts.leaderElectNamespace, opts.leaderElectName), "identity", identity)
	holder.Run(ctx)
	return nil
}

// runSlot acts on one slot until ctx ends: informers filtered to the slot by the
// apiserver, a controller on them, and its workers, drained before it returns, with
// the Events of their last syncs. Every write is held to the slot's tenure, which ctx
// carries.
func runSlot(ctx context.Context, opts options, space slots.Space, slot int, kubeClient kubernetes.Interface, sampleClient clientset.Interface, controllers *sync.Map) error {
	shardSelector, _, err := space.Selector([]int{slot})
	if err != nil {
		return err
	}
	scope := &slotScope{space: space, slot: slot, value: strconv.Itoa(slot)}
	logger := klog.FromContext(ctx)
	kubeFactory, sampleFactory := newInformerFactories(kubeClient, sampleClient, opts.namespace, opts.resyncPeriod, &informerScope{
		deploymentLabels: SlotLabel + "=" + scope.value,
		shardSelector:    shardSelector,
		keep:             func(foo *samplev1alpha1.Foo) bool { return scope.owns(logger, foo) },
	})
	held := tenure.FromContext(ctx)
	if held == nil {
		return fmt.Errorf("slot %d runs without a tenure", slot)
	}
	recording, err := eventrecording.Start(ctx, kubeClient.EventsV1(), controllerAgentName, held)
	if err != nil {
		return err
	}
	// Runs once the workers have stopped, before the slot's Lease is released.
	defer recording.Shutdown(ctx, eventrecording.FlushTimeout)
	// Each slot's queue has a name of its own in the workqueue metrics; its gauges go
	// once its workers have returned, and come back if the slot does.
	queueName := fmt.Sprintf("foos-slot-%d", slot)
	defer metrics.ForgetQueue(queueName)
	controller, err := NewController(ctx, Config{
		QueueName: queueName, KubeClient: kubeClient, SampleClient: sampleClient,
		Deployments: kubeFactory.Apps().V1().Deployments(), Foos: sampleFactory.Samplecontroller().V1alpha1().Foos(),
		Recorder: recording.Recorder(), ShutdownTimeout: opts.gracefulShutdownTimeout, Scope: scope,
	})
	if err != nil {
		return err
	}
	defer countHeldOnceSynced(ctx, controller.HasSynced)()

	controllers.Store(slot, controller)
	defer controllers.Delete(slot)
	defer sampleFactory.Shutdown()
	defer kubeFactory.Shutdown()
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	return controller.Run(ctx, opts.workers)
}

// countHeldOnceSynced counts the slot in sample_controller_slots_held once synced
// says its caches have synced, so that the gauge counts only slots whose workers act,
// and returns the function that uncounts it.
func countHeldOnceSynced(ctx context.Context, synced cache.InformerSynced) (uncount func()) {
	var mu sync.Mutex
	var counted, over bool
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !over {
			counted = true
			slotsHeld.Inc()
		}
	}()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		over = true
		if counted {
			slotsHeld.Dec()
		}
	}
}

// cachedObjectsCollector reports the objects in the caches of the slots this replica
// acts on: with the apiserver filtering, about 1/N of all with N replicas.
type cachedObjectsCollector struct {
	controllers *sync.Map
	desc        *prometheus.Desc
}

func newCachedObjectsCollector(controllers *sync.Map) *cachedObjectsCollector {
	return &cachedObjectsCollector{
		controllers: controllers,
		desc: prometheus.NewDesc("sample_controller_cached_objects",
			"Objects in the informer caches of the slots this replica acts on (sharded mode), by resource.",
			[]string{"resource"}, nil),
	}
}

func (c *cachedObjectsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cachedObjectsCollector) Collect(ch chan<- prometheus.Metric) {
	var foos, deployments int
	c.controllers.Range(func(_, v any) bool {
		controller := v.(*Controller)
		foos += len(controller.foosIndexer.ListKeys())
		deployments += len(controller.deploymentsIndexer.ListKeys())
		return true
	})
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(foos), writes.Foos)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(deployments), writes.Deployments)
}
