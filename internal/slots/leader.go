// Leader: single-leader mode as one slot of the same scheme, so that a rollout that
// turns sharded mode on or off never has the two modes write at once.

package slots

import (
	"context"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
)

// LeaderLeaseLabels are the labels of the single-leader Lease: it is a slot Lease of
// its group, of one slot covering every Foo (slotLeaseCount), which sharded replicas of
// the same group see held, wait for, and fence once it expires, as any Lease of
// another number of slots.
func LeaderLeaseLabels(group string) map[string]string {
	return map[string]string{SlotOfLabel: group}
}

// Leader admits a single leader of group (the Lease named as the group, in its
// namespace) by the rules sharded replicas of the group follow between numbers of
// slots (Holder.mayAct): it acts once the count Lease names one slot, which it sets only
// while no slot Lease of another number is held, and stops when the count names
// another number. Sharded replicas, for their part, wait while the leader's Lease is
// held, and fence it once it expired.
type Leader struct {
	holder *Holder
}

// NewLeader is the admission of the leader of lease (its Name is the group's).
func NewLeader(client kubernetes.Interface, lease election.Lease) *Leader {
	space, _ := NewSpace(1)
	h := &Holder{Space: space, Client: client, Lease: lease}
	h.observer = newObserver(client, lease, clock.RealClock{})
	return &Leader{holder: h}
}

// Seen is what the leader's watch of the group's Leases saw of its Lease's record
// version, for its Lease lock (election.LockOptions.Seen): a standby that saw the holder
// there takes its release after a retry period, though its own first read came after.
func (s *Leader) Seen(version string) (election.Observation, bool) {
	return s.holder.observer.observation(s.holder.Lease.Name, version)
}

// Synced tells whether the watch of the group's Leases, which runs from the start of
// Lead on, has listed them: a replica ready by it has seen the Lease's holder, whose
// release it then takes at once, as a rollout needs.
func (s *Leader) Synced() bool { return s.holder.observer.synced() }

// Lead runs the leader's elections one after another, until ctx ends or the leader
// has acted in one: elect runs an election whose work, once the Lease is held, is the
// function it is given. Each election starts only once the leader may be admitted, by
// what has been seen of the group's Leases (the count names one slot, or no slot Lease
// of another number is held). Its work runs work only if the leader, holding the
// Lease, is admitted, and stops it when the count Lease names another number of
// slots; a leader not admitted returns at once, so that its Lease is released and the
// sharded replicas are not kept waiting, and waits again. elect returns whether its
// work ran, and the election's error, which Lead returns.
func (s *Leader) Lead(ctx context.Context, work func(context.Context) error, elect func(context.Context, func(context.Context) error) (bool, error)) error {
	logger := klog.FromContext(ctx)
	group := s.holder.Lease.Name
	observing, stopObserving := context.WithCancel(ctx)
	var observed sync.WaitGroup
	observed.Go(func() { s.holder.observer.run(observing) })
	defer observed.Wait()
	defer stopObserving()
	for {
		if !s.holder.waitMayAct(ctx) {
			return nil
		}
		admitted := false
		worked, err := elect(ctx, func(ctx context.Context) error {
			if !s.holder.mayAct(ctx) {
				logger.Info("Sharded replicas of this group act, or may: releasing the Lease until they are gone", "group", group)
				return nil
			}
			admitted = true
			ctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				s.holder.waitCountChanged(ctx)
				if ctx.Err() == nil {
					logger.Info("Sharded replicas of this group are to act: stopping", "group", group)
				}
				stop()
			}()
			return work(ctx)
		})
		if !worked || admitted || ctx.Err() != nil {
			return err
		}
	}
}
