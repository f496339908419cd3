package main

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/pkg/election"
	"github.com/seed-e6610ed6/sample-controller/pkg/metrics"
)

// runAsLeader runs run only while this process holds the Lease, until ctx is
// cancelled (election.Run): on cancellation run stops first and the Lease is released
// after; a process that loses the Lease while it works, also while its last syncs
// finish after being asked to stop, exits at once and does not release it, so that a
// standby never starts while this process still works.
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
	logger.Info("Waiting to become the leader", "lease", klog.KRef(opts.leaderElectNamespace, opts.leaderElectName), "identity", identity)
	result := election.Run(ctx, election.Config{
		Lock:          lock,
		Name:          opts.leaderElectName,
		LeaseDuration: opts.leaderElectLeaseDuration,
		RenewDeadline: opts.leaderElectRenewDeadline,
		RetryPeriod:   opts.leaderElectRetryPeriod,
		WatchDog:      watchdog,
		OnLost: func() {
			logger.Error(nil, "Lost the lease; exiting so that two leaders never act at once", "identity", identity)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		},
		OnNewLeader: func(current string) {
			if current != identity {
				logger.Info("Another replica leads", "leader", current)
			}
		},
	}, func(ctx context.Context) error {
		logger.Info("Became the leader", "identity", identity)
		return run(ctx)
	})
	if !result.Worked {
		return result.Err
	}
	if result.ReleaseErr != nil {
		logger.Error(result.ReleaseErr, "Releasing the lease; another replica takes over once it expires", "identity", identity)
	} else {
		logger.Info("Released the lease", "identity", identity)
	}
	metrics.LeaderElectionEnded(opts.leaderElectName)
	return result.Err
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
