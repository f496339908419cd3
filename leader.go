// The mode of one active replica: alone, or, with --leader-elect, the leader of
// several, whose writes pass the gate only within its tenure of the Lease. Sharded mode, where every
// replica acts on its slots, is in sharded.go.

package main

import (
	"context"
	"net/http"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/serving"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
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
	// For a process whose work never ran; work writes the Events of its last syncs
	// itself, once the workers have stopped and (as a leader) before the Lease is
	// released.
	defer eventRecording.Shutdown(ctx, eventrecording.FlushTimeout)

	cfg := opts.config(clients)
	cfg.Recorder, cfg.InformerName = eventRecording.Recorder(), controllerAgentName
	controller, err := NewController(ctx, cfg)
	if err != nil {
		return err
	}
	metrics.Registry.MustRegister(newFooReadyCollector(controller.cachedFoos))

	// Leader election reports a leader that cannot renew its Lease as unhealthy, so
	// that the kubelet restarts it.
	var watchdog *leaderelection.HealthzAdaptor
	var healthz func(*http.Request) error
	// Ready once the caches are synced, and with leader election once the Leases have
	// been listed: a rollout stops the old leader only after the new replica is ready,
	// and a standby that saw the leader hold the Lease takes its release at once.
	ready := controller.HasSynced
	var leader *slots.Leader
	if lease.leaderElect {
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		healthz = watchdog.Check
		leader = slots.NewLeader(clients.lease, lease.Lease)
		ready = func() bool { return leader.Synced() && controller.HasSynced() }
	}
	servers, err := endpoints.Start(ctx, clients.config, ready, healthz)
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
	return runAsLeader(ctx, clients, lease.Lease, leader, leading, watchdog, work)
}

// runAsLeader runs work only while this process holds the Lease, until ctx is
// cancelled (election.Run): work stops first and the Lease is released after; a process
// that loses the Lease while it works exits at once and releases nothing, so that a
// standby never starts while it still works. work's writes pass the gate only within
// the tenure leading. slots.Leader.Lead keeps the leader from acting while sharded
// replicas of its group may, so that a rollout never has both modes write; its watch of
// the group's Leases tells the lock what it saw of the Lease.
func runAsLeader(ctx context.Context, clients *clients, lease election.Lease, leader *slots.Leader, leading *tenure.Tenure, watchdog *leaderelection.HealthzAdaptor, work func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	lock := lease.NewLock(clients.lease, leading, election.LockOptions{Labels: slots.LeaderLeaseLabels(lease.Name), Seen: leader.Seen})
	logger.Info("Waiting to become the leader", "lease", klog.KRef(lease.Namespace, lease.Name), "identity", lease.Identity)
	lead := func(ctx context.Context) error {
		logger.Info("Became the leader", "identity", lease.Identity)
		return work(ctx)
	}
	return leader.Lead(ctx, lead, func(ctx context.Context, work func(context.Context) error) (bool, error) {
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
		}, work)
		if !result.Worked {
			return false, result.Err
		}
		if result.ReleaseErr != nil {
			logger.Error(result.ReleaseErr, "Releasing the lease; another replica takes over once it expires", "identity", lease.Identity)
		} else {
			logger.Info("Released the lease", "identity", lease.Identity)
		}
		metrics.LeaderElectionEnded(lease.Name)
		return true, result.Err
	})
}
