// Single: single-leader mode as one slot of the same scheme, so that a rollout that
// turns sharded mode on or off never has the two modes write at once.

package slots

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
)

// SingleLeaseLabels are the labels of the single-leader Lease: it is a slot Lease of
// its group, of one slot covering every Foo (slotLeaseCount), which sharded replicas of
// the same group see held, wait for, and fence once it expires, as any Lease of
// another number of slots.
func SingleLeaseLabels(group string) map[string]string {
	return map[string]string{SlotOfLabel: group}
}

// Single admits a single leader of group (the Lease named as the group, in its
// namespace) by the rules sharded replicas of the group follow between numbers of
// slots (Holder.admit): it acts once the count Lease names one slot, which it sets only
// while no slot Lease of another number is held, and stops when the count names
// another number. Sharded replicas, for their part, wait while the leader's Lease is
// held, and fence it once it expired.
type Single struct {
	holder *Holder
}

// NewSingle is the admission of the leader of lease (its Name is the group's).
func NewSingle(client kubernetes.Interface, lease election.Lease) *Single {
	space, _ := NewSpace(1)
	h := &Holder{Space: space, Client: client, Lease: lease}
	h.observer = newObserver(client, lease.Namespace, lease.Name, lease.Identity, clock.RealClock{})
	return &Single{holder: h}
}

// Run follows the group's Leases until ctx ends.
func (s *Single) Run(ctx context.Context) {
	s.holder.observer.run(ctx)
}

// WaitAdmissible waits until Admit may admit the leader, by what has been seen of the
// group's Leases: the count names one slot, or no slot Lease of another number is held.
// It returns false when ctx ends.
func (s *Single) WaitAdmissible(ctx context.Context) bool {
	return s.holder.waitAdmissible(ctx)
}

// Admit tells whether the leader, holding its Lease, may act. It returns false when
// sharded replicas of another number of slots act, or may (their Leases held): the
// leader then releases its Lease, so that they are not kept waiting for it.
func (s *Single) Admit(ctx context.Context) bool {
	return s.holder.admit(ctx)
}

// WaitCountChanged returns once the count Lease names another number of slots than
// one, or ctx ends: the leader's work must stop.
func (s *Single) WaitCountChanged(ctx context.Context) {
	s.holder.waitCountChanged(ctx)
}
