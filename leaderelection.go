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
	"github.com/seed-e6610ed6/sample-controller/pkg/tenure"
)

// runAsLeader runs run only while this process holds the Lease, until ctx is
// cancelled (election.Run): on cancellation run stops first and the Lease is released
// after; a process that loses the Lease while it works, also while its last syncs
// finish after being asked to stop, exits at once and does not release it, so that a
// standby never starts while this process still works. run's writes are held to the
// tenure held, which the election keeps from its Lease writes and reads.
func runAsLeader(ctx context.Context, kubeClient kubernetes.Interface, opts options, held *tenure.Tenure, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
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
		Tenure:        held,
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

// Environment variables that name the Pod this process runs in, from the downward API
// (artifacts/deploy sets them).
const (
	podNameEnv = "POD_NAME"
	podUIDEnv  = "POD_UID"
)

// newIdentity names this process in Leases. In a Pod it is the Pod's name and UID,
// which a container restarted in place (a crash, an OOM kill, the exit on a lost
// Lease) keeps: it takes back its own member and slot Leases at once instead of
// announcing a new member while its old one lingers. The previous container has
// exited before the kubelet restarts it, and a Pod recreated under the same name has
// another UID. Elsewhere it is the host name and a UUID, new for every process.
func newIdentity() (string, error) {
	return identityFrom(os.Getenv, os.Hostname)
}

func identityFrom(getenv func(string) string, hostname func() (string, error)) (string, error) {
	if name, uid := getenv(podNameEnv), getenv(podUIDEnv); name != "" && uid != "" {
		return name + "_" + uid, nil
	}
	host, err := hostname()
	if err != nil {
		return "", fmt.Errorf("getting the hostname for the Lease identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}
