package slots

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
)

// TestSingleLeaderAndShardedReplicasTakeTurns runs the two modes of one group as a
// rolling update that turns sharded mode off and on again does: a single leader starts
// while a sharded replica works, and acts only once that replica has gone; a sharded
// replica starts while the leader works, and acts only once the leader has gone. Their
// works never overlap on any slot (the leader's covers every slot).
func TestSingleLeaderAndShardedReplicasTakeTurns(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	space := mustSpace(t, 4)
	log := newWorkLog()
	timings := testTimings
	sharded := func(identity string) func() {
		_, stop := testMember{client: client, identity: identity, space: space, memberDuration: 10 * time.Second, timings: timings, log: log}.start(ctx, t)
		return stop
	}
	waitOwners := func(what string, want []string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return slices.Equal(log.owners(space.Len()), want), nil
		})
		if err != nil {
			t.Fatalf("%s: owners %q, want %q", what, log.owners(space.Len()), want)
		}
	}
	// stays checks that the owners stay want for a while: the other mode waits.
	stays := func(what string, want []string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if owners := log.owners(space.Len()); !slices.Equal(owners, want) {
				t.Fatalf("%s: owners %q, want %q", what, owners, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	all := func(identity string) []string { return slices.Repeat([]string{identity}, space.Len()) }

	stopS := sharded("s")
	waitOwners("the sharded replica works on every slot", all("s"))

	// The single leader, as runAsLeader runs it: its work covers every slot.
	lease := election.Lease{Namespace: testNamespace, Name: testGroup, Identity: "l",
		Duration: timings.Duration, RenewDeadline: timings.RenewDeadline, RetryPeriod: timings.RetryPeriod}
	leaderCtx, stopLeader := context.WithCancel(ctx)
	var leaderDone sync.WaitGroup
	leaderDone.Go(func() {
		lock := lease.NewLock(client, nil, election.LockOptions{Labels: LeaderLeaseLabels(testGroup)})
		work := log.work("l", 0, nil)
		_ = NewLeader(client, lease).Lead(leaderCtx, func(ctx context.Context) error {
			var slotsDone sync.WaitGroup
			for slot := range space.Len() {
				slotsDone.Go(func() { _ = work(ctx, slot) })
			}
			slotsDone.Wait()
			return nil
		}, func(ctx context.Context, work func(context.Context) error) (bool, error) {
			result := election.Run(ctx, election.Config{Lock: lock, OnLost: func() { t.Error("the leader lost its Lease") }}, work)
			return result.Worked, result.Err
		})
	})
	t.Cleanup(func() {
		stopLeader()
		leaderDone.Wait()
	})
	stays("the leader waits while the sharded replica works", all("s"))
	stopS()
	waitOwners("the leader works once the sharded replica has gone", all("l"))

	stopT := sharded("t")
	defer stopT()
	stays("the sharded replica waits while the leader works", all("l"))
	stopLeader()
	leaderDone.Wait()
	waitOwners("the sharded replica works once the leader has gone", all("t"))

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("the modes worked on one slot at once:\n%s", log.overlaps)
	}
}

// TestLeaderIsSyncedOnceItSawTheHolder checks what a leader-elect replica's readiness
// and its Lease lock learn from the leader's watch of the group's Leases: not synced
// before Lead starts it; then synced, with the holder of the Lease's record seen, so
// that a standby made ready by it takes that holder's release after a retry period.
func TestLeaderIsSyncedOnceItSawTheHolder(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	held := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testGroup, Labels: LeaderLeaseLabels(testGroup)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](15)},
	}
	held, err := client.CoordinationV1().Leases(testNamespace).Create(ctx, held, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease := testTimings
	lease.Namespace, lease.Name, lease.Identity = testNamespace, testGroup, "c"
	leader := NewLeader(client, lease)
	if leader.Synced() {
		t.Fatal("synced before Lead started its watch")
	}
	ctx, stop := context.WithCancel(ctx)
	var done sync.WaitGroup
	done.Go(func() {
		_ = leader.Lead(ctx, func(context.Context) error { return nil }, func(ctx context.Context, _ func(context.Context) error) (bool, error) {
			<-ctx.Done() // an election that never wins
			return false, nil
		})
	})
	defer done.Wait()
	defer stop()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return leader.Synced(), nil
	}); err != nil {
		t.Fatal("the leader's watch never synced")
	}
	if seen, ok := leader.Seen(held.ResourceVersion); !ok || seen.Holder != "a" {
		t.Errorf("Seen(%s) = %+v, %v; want the holder a", held.ResourceVersion, seen, ok)
	}
	// a releases: the record names no holder, and the watch still tells who held it.
	release := held.DeepCopy()
	release.Spec.HolderIdentity, release.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
	metav1.SetMetaDataAnnotation(&release.ObjectMeta, election.ReleasedByAnnotation, "a "+string(held.UID))
	if release, err = client.CoordinationV1().Leases(testNamespace).Update(ctx, release, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var seen election.Observation
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		seen, ok = leader.Seen(release.ResourceVersion)
		return ok, nil
	}); err != nil || seen.Holder != "a" {
		t.Errorf("Seen of the release = %+v (%v); want the holder a, who released it", seen, err)
	}
}
