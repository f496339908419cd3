// Sharded mode: every replica acts on a share of the Foos, the slots the assignment
// gives it, each slot with a controller and informers of its own, filtered to the slot
// by the API server, and only while the replica holds the slot's Lease.

package main

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/serving"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
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
// Events of their last syncs. Every write is held to the slot's tenure, which ctx
// carries.
func runSlot(ctx context.Context, clients *clients, opts controllerOptions, space slots.Space, slot int, controllers *sync.Map) error {
	scope, err := newSlotScope(space, slot)
	if err != nil {
		return err
	}
	held := tenure.FromContext(ctx)
	if held == nil {
		return fmt.Errorf("slot %d runs without a tenure", slot)
	}
	recording, err := eventrecording.Start(ctx, clients.kube.EventsV1(), controllerAgentName, held, dropEvent, eventsInFlight(opts.workers))
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
	cfg.Recorder, cfg.Scope = recording.Recorder(), scope
	defer metrics.ForgetQueue(cfg.QueueName)
	controller, err := NewController(ctx, cfg)
	if err != nil {
		return err
	}
	recording.WhileIdle(opts.workers, controller.queueIdle)
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
