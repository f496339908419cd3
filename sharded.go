// Sharded mode: every replica acts on a share of the Foos, the slots the assignment
// gives it, each slot with a controller and informers of its own, filtered to the slot
// by the API server, and only while the replica holds the slot's Lease.

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/serving"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
)

// runSharded runs the controller in sharded mode until ctx ends: the replica announces
// itself (slots.Membership), and acts on the slots the assignment of n slots gives it,
// each only while it holds the slot's Lease (slots.Holder). The Leases are written with
// the Lease client; the slots' writes, with the clients whose gate holds them to the
// slot's tenure.
func runSharded(ctx context.Context, clients *clients, endpoints serving.Endpoints, opts controllerOptions, lease election.Lease, n int) error {
	logger := klog.FromContext(ctx)
	space, err := slots.NewSpace(n)
	if err != nil {
		return err
	}
	membership := slots.NewMembership(clients.lease, lease.Namespace, lease.Name, lease.Identity, n, lease.Duration, clock.RealClock{})
	// Ready once the replica knows the others; each slot's caches sync before its
	// workers start.
	servers, err := endpoints.Start(ctx, clients.config, membership.HasSynced, nil)
	if err != nil {
		return err
	}
	defer servers.Shutdown(logger)

	var controllers sync.Map // slot -> *Controller
	var holder *slots.Holder
	holder = &slots.Holder{
		Space:      space,
		Membership: membership,
		Client:     clients.lease,
		Lease:      lease,
		Work: func(ctx context.Context, slot int) error {
			slotAcquisitions.Inc()
			if unheld, ok := holder.Unheld(slot); ok {
				slotUnheld.Observe(unheld.Seconds())
			}
			ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("slot", slot))
			return runSlot(ctx, clients, opts, space, slot, &controllers)
		},
		OnLost: func(slot int) {
			logger.Error(nil, "Lost the Lease of a slot; exiting so that two replicas never act on it at once", "slot", slot, "identity", lease.Identity)
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

	logger.Info("Running sharded", "slots", space.Len(), "group", klog.KRef(lease.Namespace, lease.Name), "identity", lease.Identity)
	holder.Run(ctx)
	return nil
}

// runSlot acts on one slot until ctx ends: a controller whose informers the API
// server filters to the slot, and its workers, drained before it returns, with the
// Events of their last syncs. Every write passes the gate only within the slot's tenure, which ctx
// carries.
func runSlot(ctx context.Context, clients *clients, opts controllerOptions, space slots.Space, slot int, controllers *sync.Map) error {
	watch, err := newSlotWatch(space, slot)
	if err != nil {
		return err
	}
	slotTenure := tenure.FromContext(ctx)
	if slotTenure == nil {
		return fmt.Errorf("slot %d runs without a tenure", slot)
	}
	recording, err := eventrecording.Start(ctx, clients.kube.EventsV1(), controllerAgentName, slotTenure, dropEvent, eventsInFlight(opts.workers))
	if err != nil {
		return err
	}
	// Runs once the workers have stopped, before the slot's Lease is released.
	defer recording.Shutdown(ctx, eventrecording.FlushTimeout)
	// Each slot's queue has a name of its own in the workqueue metrics; its gauges go
	// once its workers have returned, and come back if the slot does.
	cfg := opts.config(clients)
	cfg.QueueName = fmt.Sprintf("foos-slot-%d", slot)
	cfg.InformerName = fmt.Sprintf("slot-%d", slot)
	cfg.Recorder = recording.Recorder()
	cfg.DeploymentLabels = map[string]string{SlotLabel: watch.value}
	cfg.FooListWatch = watch.fooListWatch(clients.sample, opts.namespace)
	defer metrics.ForgetQueue(cfg.QueueName)
	controller, err := NewController(ctx, cfg)
	if err != nil {
		return err
	}
	defer countHeldOnceSynced(ctx, controller.waitForCaches)()

	controllers.Store(slot, controller)
	defer controllers.Delete(slot)
	// Runs after the workers have stopped; it frees the informers' names for the
	// slot's return.
	defer controller.ShutdownInformers()
	controller.StartInformers(ctx)
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

// SlotLabel marks each Deployment with the slot of its Foo, so that the replica holding
// the slot can list and watch exactly its Deployments by label.
const SlotLabel = samplecontroller.GroupName + "/slot"

// slotWatch is what the controller of one slot watches: the Foos whose UIDs the space
// puts in the slot, which the API server filters for by a shard selector, and the
// Deployments labelled with the slot (SlotLabel).
type slotWatch struct {
	space    slots.Space
	slot     int
	value    string // slot as the value of SlotLabel
	selector string // the shard selector of the slot
	// outside is set once the controller was sent a Foo of another slot, so that it
	// says so once.
	outside atomic.Bool
}

// newSlotWatch is the watch of one slot of space.
func newSlotWatch(space slots.Space, slot int) (*slotWatch, error) {
	selector, _, err := space.Selector([]int{slot})
	if err != nil {
		return nil, err
	}
	return &slotWatch{space: space, slot: slot, value: strconv.Itoa(slot), selector: selector}, nil
}

// inSlot tells whether foo is in the slot. The API server sends a Foo of another slot
// only when it ignores the shard selector (ShardedListAndWatch off, or older than
// 1.36); the slot's lists and watches then drop it before the cache, and say so once.
func (s *slotWatch) inSlot(logger klog.Logger, foo *samplev1alpha1.Foo) bool {
	if s.space.Of(foo.UID) == s.slot {
		return true
	}
	if !s.outside.Swap(true) {
		logger.Info("The API server sent Foos outside this slot: it ignores shard selectors (feature ShardedListAndWatch off, or older than 1.36); dropping them here instead, at the cost of receiving every Foo",
			"slot", s.slot, "example", klog.KObj(foo))
	}
	return false
}

// fooListWatch lists and watches the slot's Foos in namespace (all when empty) with
// the slot's shard selector, and drops the Foos of other slots, which an API server
// that ignores the selector sends.
func (s *slotWatch) fooListWatch(client clientset.Interface, namespace string) *cache.ListWatch {
	foos := client.SamplecontrollerV1alpha1().Foos(namespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.ShardSelector = s.selector
			list, err := foos.List(ctx, options)
			if err != nil {
				return nil, err
			}
			list.Items = slices.DeleteFunc(list.Items, func(foo samplev1alpha1.Foo) bool { return !s.inSlot(klog.FromContext(ctx), &foo) })
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.ShardSelector = s.selector
			w, err := foos.Watch(ctx, options)
			if err != nil {
				return nil, err
			}
			logger := klog.FromContext(ctx)
			return newFilteredWatch(w, func(e watch.Event) bool {
				foo, ok := e.Object.(*samplev1alpha1.Foo)
				// Bookmarks carry only a resourceVersion, and errors no Foo.
				return !ok || e.Type == watch.Bookmark || e.Type == watch.Error || s.inSlot(logger, foo)
			}), nil
		},
	}
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
