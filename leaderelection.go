package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/pkg/metrics"
	"github.com/seed-e6610ed6/sample-controller/pkg/slots"
)

// runAsLeader runs run only while this process holds the Lease, until ctx is
// cancelled.
//
// On cancellation, run stops first and the Lease is released after, so that the next
// leader never works alongside this one; releasing hands over in about one retry
// period instead of a lease duration. A process that loses the Lease without being
// asked to stop exits at once, for the same reason, and does not release it: the
// elector's own release on cancel would come before that exit, and a standby could
// start while this process still works.
func runAsLeader(ctx context.Context, kubeClient kubernetes.Interface, opts options, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	identity, err := newIdentity()
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: opts.leaderElectName, Namespace: opts.leaderElectNamespace},
		Client:     kubeClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}

	// The election outlives ctx: it ends when run has returned, or when ctx is
	// cancelled before this process ever led.
	electionCtx, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer endElection()
	var (
		mu      sync.Mutex
		leading bool // run has started
		ran     bool // run has returned
		runErr  = make(chan error, 1)
	)
	stopWaiting := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			endElection()
		}
	})
	defer stopWaiting()

	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   opts.leaderElectLeaseDuration,
		RenewDeadline:   opts.leaderElectRenewDeadline,
		RetryPeriod:     opts.leaderElectRetryPeriod,
		ReleaseOnCancel: false, // released below, once run has returned
		WatchDog:        watchdog,
		Name:            opts.leaderElectName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				mu.Lock()
				if ctx.Err() != nil {
					mu.Unlock()
					endElection()
					return
				}
				leading = true
				mu.Unlock()
				logger.Info("Became the leader", "identity", identity)
				// Work stops when asked to (ctx) or when the Lease is lost (leaderCtx).
				workCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				err := run(workCtx)
				mu.Lock()
				ran = true
				mu.Unlock()
				runErr <- err
				endElection()
			},
			OnStoppedLeading: func() {
				mu.Lock()
				lost := leading && !ran
				mu.Unlock()
				if lost && ctx.Err() == nil {
					logger.Error(nil, "Lost the lease; exiting so that two leaders never act at once", "identity", identity)
					klog.FlushAndExit(klog.ExitFlushTimeout, 1)
				}
			},
			OnNewLeader: func(current string) {
				if current != identity {
					logger.Info("Another replica leads", "leader", current)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("setting up leader election: %w", err)
	}
	logger.Info("Waiting to become the leader", "lease", klog.KRef(opts.leaderElectNamespace, opts.leaderElectName), "identity", identity)
	elector.Run(electionCtx)

	select {
	case err := <-runErr:
		// run has returned: hand the Lease over now rather than after it expires.
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.leaderElectRenewDeadline)
		defer cancel()
		if releaseErr := slots.ReleaseLease(releaseCtx, lock, identity); releaseErr != nil {
			logger.Error(releaseErr, "Releasing the lease; another replica takes over once it expires", "identity", identity)
		} else {
			logger.Info("Released the lease", "identity", identity)
		}
		metrics.LeaderElectionEnded(opts.leaderElectName)
		return err
	default:
		return nil
	}
}

// newIdentity names this process in Leases: the host name (the Pod's name) and a UUID,
// so that a restarted container is not mistaken for the one before it.
func newIdentity() (string, error) {
	hostname, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("getting the hostname for the Lease identity: %w", err)
	}
	return hostname + "_" + string(uuid.NewUUID()), nil
}
