package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
)

// SlotLabel marks, in sharded mode, each Deployment with the slot of its Foo, so that
// the replica holding the slot can list and watch exactly its Deployments by label.
const SlotLabel = samplecontroller.GroupName + "/slot"

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
	kubeFactory, sampleFactory, releaseNames := newInformerFactories(kubeClient, sampleClient, opts.namespace, opts.resyncPeriod, &informerScope{
		deploymentLabels: SlotLabel + "=" + scope.value,
		shardSelector:    shardSelector,
		keep:             func(foo *samplev1alpha1.Foo) bool { return scope.owns(logger, foo) },
	}, fmt.Sprintf("slot-%d", slot))
	// Runs after the factories' shutdown below: the names are free for the slot's
	// return.
	defer releaseNames()
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
	defer countHeldOnceSynced(ctx, controller.waitForCaches)()

	controllers.Store(slot, controller)
	defer controllers.Delete(slot)
	defer sampleFactory.Shutdown()
	defer kubeFactory.Shutdown()
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	return controller.Run(ctx, opts.workers)
}

// countHeldOnceSynced counts the slot in sample_controller_slots_held once waitSynced
// returns true, its caches synced, so that the gauge counts only slots whose workers
// act, and returns the function that uncounts it.
func countHeldOnceSynced(ctx context.Context, waitSynced func(context.Context) bool) (uncount func()) {
	var mu sync.Mutex
	var counted, over bool
	go func() {
		if !waitSynced(ctx) {
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

// informerScope narrows the informers to one slot in sharded mode: Deployments by a
// label selector, Foos by a shard selector, and by keep on this side as well.
type informerScope struct {
	deploymentLabels string
	shardSelector    string
	// keep tells whether a Foo is in the scope. An apiserver without
	// ShardedListAndWatch ignores the shard selector and sends every Foo; the Foos
	// keep refuses are dropped before they reach the cache.
	keep func(*samplev1alpha1.Foo) bool
}

// newScopedFooInformer is the Foo informer of the generated factory, with the shard
// selector, whose lists and watches drop the Foos scope.keep refuses.
func newScopedFooInformer(client clientset.Interface, namespace string, resync time.Duration, scope *informerScope, name *cache.InformerName) cache.SharedIndexInformer {
	foos := client.SamplecontrollerV1alpha1().Foos(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.ShardSelector = scope.shardSelector
			list, err := foos.List(ctx, options)
			if err != nil {
				return nil, err
			}
			list.Items = slices.DeleteFunc(list.Items, func(foo samplev1alpha1.Foo) bool { return !scope.keep(&foo) })
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.ShardSelector = scope.shardSelector
			w, err := foos.Watch(ctx, options)
			if err != nil {
				return nil, err
			}
			return newFilteredWatch(w, func(e watch.Event) bool {
				foo, ok := e.Object.(*samplev1alpha1.Foo)
				// Bookmarks carry only a resourceVersion, and errors no Foo.
				return !ok || e.Type == watch.Bookmark || e.Type == watch.Error || scope.keep(foo)
			}), nil
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &samplev1alpha1.Foo{},
		cache.SharedIndexInformerOptions{
			ResyncPeriod: resync,
			Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			Identifier:   name.WithResource(samplev1alpha1.SchemeGroupVersion.WithResource("foos")),
		})
}

// filteredWatch passes on the events of a watch that keep accepts. Unlike
// apimachinery's watch.Filter, whose goroutine blocks for good on an event nobody reads
// once the reader has stopped, it ends when stopped.
type filteredWatch struct {
	upstream watch.Interface
	result   chan watch.Event
	done     chan struct{}
	stop     sync.Once
}

func newFilteredWatch(upstream watch.Interface, keep func(watch.Event) bool) watch.Interface {
	w := &filteredWatch{upstream: upstream, result: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(w.result)
		for e := range upstream.ResultChan() {
			if !keep(e) {
				continue
			}
			select {
			case w.result <- e:
			case <-w.done:
				return
			}
		}
	}()
	return w
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *filteredWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.upstream.Stop()
	})
}
