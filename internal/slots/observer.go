// The observer: what this member has seen of the group's Leases, and when, by its own
// clock.

package slots

import (
	"context"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
)

// SlotOfLabel marks the fencing Leases of a group's slots; its value is the group. It
// is for people and tools (kubectl get -l): the members find the Leases by name, which
// another client's edit of the labels cannot hide from them.
const SlotOfLabel = "samplecontroller.k8s.io/slot-of"

// observer follows a group's slot Leases all the time, and remembers when this process
// first saw each Lease's current record. client-go's elector judges a Lease expired
// once it has seen the same record for the Lease's duration, counted from its own first
// look; an elector started only when a slot is assigned, after its holder died, would
// wait a whole duration more. The observer counts from the first sight of the record
// instead, which is the same rule with an earlier first look: it is never earlier than
// the holder's write, so a Lease it calls expired has gone unrenewed for at least its
// duration.
type observer struct {
	namespace string
	group     string
	identity  string
	clock     clock.Clock
	// lease is this member's Lease timings: no wait for another's Lease is shorter
	// than its duration, which an edit cannot lower.
	lease election.Lease

	factory informers.SharedInformerFactory
	lister  coordinationlisters.LeaseLister
	synced  cache.InformerSynced

	mu   sync.Mutex
	seen map[string]observation
	// gone is, per Lease deleted while held, when this process saw it go and its last
	// duration: its holder may have renewed it unseen just before, and acts until that
	// renewal's duration ends at the latest.
	gone map[string]observation
	// count is the number of slots the group's count Lease names; 0 when there is none.
	count int
	// heldByOther is, per Lease, when it was last seen written by someone else (a renewal by
	// another holder, or a release): the latest moment the slot was held by another.
	heldByOther map[string]time.Time
	// changed is closed, and replaced, whenever a Lease comes or goes or changes
	// holder, or the count changes; not on a renewal, which only moves an expiry later (a timer set for the
	// earlier one finds that out when it fires).
	changed chan struct{}
}

// observation is a Lease's record, by its resourceVersion, and when this process first
// saw it; with the last holder it saw the Lease name, in this record or before, the
// longest duration it saw the Lease carry, and the longest retry period its holders
// announced (both at least this member's own).
type observation struct {
	version    string
	holder     string
	lastHolder string
	at         time.Time
	duration   time.Duration
	slowest    time.Duration
}

// newObserver follows the Leases of the group of lease (its Name), in its namespace.
func newObserver(client kubernetes.Interface, lease election.Lease, clk clock.Clock) *observer {
	namespace := lease.Namespace
	o := &observer{
		namespace: namespace, group: lease.Name, identity: lease.Identity, clock: clk, lease: lease,
		seen: map[string]observation{}, gone: map[string]observation{}, heldByOther: map[string]time.Time{}, changed: make(chan struct{}),
	}
	// Every Lease of the namespace, sorted by name (ours): a selector would lose a Lease
	// whose label someone removed, and a member would act beside its holder.
	o.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	leases := o.factory.Coordination().V1().Leases()
	o.lister = leases.Lister()
	registration, _ := leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    o.saw,
		UpdateFunc: func(_, obj any) { o.saw(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if lease, ok := obj.(*coordinationv1.Lease); ok && o.ours(lease) {
				o.forget(lease)
			}
		},
	})
	// Synced once this handler, not only the cache, has seen the listed Leases.
	o.synced = registration.HasSynced
	return o
}

// ours tells whether lease is one of the group's slot Leases (the single leader's
// included) or its count Lease, by its name. A slot Lease of a version before names
// said the number of slots ("<group>-slot-3") could be another group's leader Lease
// too: that one is the group's only with its label.
func (o *observer) ours(lease *coordinationv1.Lease) bool {
	count, slot := slotLeaseCount(o.group, lease.Name)
	if slot && count == 0 {
		return lease.Labels[SlotOfLabel] == o.group
	}
	return slot || lease.Name == CountLeaseName(o.group)
}

// run follows the Leases until ctx ends.
func (o *observer) run(ctx context.Context) {
	o.factory.Start(ctx.Done())
	<-ctx.Done()
	o.factory.Shutdown()
}

// record is a Lease's election record.
func record(lease *coordinationv1.Lease) *resourcelock.LeaderElectionRecord {
	return resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
}

func (o *observer) saw(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || !o.ours(lease) {
		return
	}
	r := record(lease)
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if lease.Name == CountLeaseName(o.group) {
		if n := countOf(lease); n != o.count {
			o.count = n
			o.broadcast()
		}
		return
	}
	previous, known := o.seen[lease.Name]
	if previous.version == lease.ResourceVersion {
		return
	}
	s := observation{
		version: lease.ResourceVersion, holder: r.HolderIdentity, lastHolder: previous.lastHolder, at: now,
		duration: max(previous.duration, time.Duration(r.LeaseDurationSeconds)*time.Second, o.lease.Duration),
		slowest:  max(previous.slowest, election.AnnouncedRetryPeriod(lease), o.lease.RetryPeriod),
	}
	if g, ok := o.gone[lease.Name]; ok {
		s.duration, s.slowest = max(s.duration, g.duration), max(s.slowest, g.slowest)
		if s.lastHolder == "" {
			s.lastHolder = g.holder
		}
	}
	if r.HolderIdentity != "" {
		s.lastHolder = r.HolderIdentity
	}
	o.seen[lease.Name] = s
	if r.HolderIdentity != o.identity {
		o.heldByOther[lease.Name] = now
	}
	if !known || previous.holder != r.HolderIdentity {
		o.broadcast()
	}
}

// forget drops a deleted Lease. One deleted while held (by hand, or by a client that
// thinks it stale) is remembered as gone: its holder may act until its tenure ends.
func (o *observer) forget(lease *coordinationv1.Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if lease.Name == CountLeaseName(o.group) {
		o.count = 0
	} else if s, ok := o.seen[lease.Name]; ok && s.holder != "" {
		o.gone[lease.Name] = observation{holder: s.holder, at: o.clock.Now(), duration: s.duration, slowest: s.slowest}
	}
	delete(o.seen, lease.Name)
	delete(o.heldByOther, lease.Name)
	o.broadcast()
}

// currentCount is the number of slots the count Lease names as this process last saw
// it (0: none), and the channel that is closed when that may change.
func (o *observer) currentCount() (int, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count, o.changed
}

// cachedOthersHeld is the number of slot Leases of another count than n that may still
// be acted on, by the Leases as watched; 1 before they are listed.
func (o *observer) cachedOthersHeld(n int) int {
	if !o.synced() {
		return 1
	}
	cached, err := o.lister.Leases(o.namespace).List(labels.Everything())
	if err != nil {
		return 1
	}
	leases := make([]coordinationv1.Lease, len(cached))
	for i, l := range cached {
		leases[i] = *l
	}
	return len(o.othersHeld(leases, n).held)
}

// otherLeases are the slot Leases of another number of slots than a member's.
type otherLeases struct {
	// held may still be acted on by their holders.
	held []string
	// fence have expired by the observer's count: those that still name a holder,
	// who would renew them if it woke, and those left empty, so that a member that
	// starts later finds them fenced for its number (FenceHolder) and need not wait
	// for them a duration from its own first look.
	fence []coordinationv1.Lease
	// next is when the first of held expires by the observer's count; the zero time
	// when that is not known (a record not seen yet).
	next time.Time
}

// othersHeld sorts the group's slot Leases of another count than n, given leases, a
// list just read from the apiserver, and what this process saw of them. Held: a Lease
// that names a holder and was not seen unchanged for its whole duration; one with no
// holder, until a release by the holder seen last has stood for its ReleaseWait, and
// anything else that emptied it (an edit) for the whole duration; and one deleted while
// held, less than its duration after the deletion was seen, whatever was created under
// its name since. Those fenced for n (FenceHolder) hold nothing; the rest are to be
// fenced.
func (o *observer) othersHeld(leases []coordinationv1.Lease, n int) otherLeases {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out otherLeases
	now := o.clock.Now()
	later := func(at time.Time) {
		if out.next.IsZero() || at.Before(out.next) {
			out.next = at
		}
	}
	for i := range leases {
		name := leases[i].Name
		if count, ok := slotLeaseCount(o.group, name); !ok || count == n {
			continue
		}
		if !o.ours(&leases[i]) {
			continue
		}
		r := record(&leases[i])
		if r.HolderIdentity == FenceHolder(n) {
			continue
		}
		s, ok := o.seen[name]
		if !ok || s.version != leases[i].ResourceVersion {
			// Renewed, taken or emptied since the watch last said: not known to be
			// free yet.
			out.held = append(out.held, name)
			continue
		}
		if r.HolderIdentity == "" {
			// Emptied while its holder may still act, unless released by that holder.
			wait := s.duration
			if by, released := election.ReleasedBy(&leases[i]); released && by == s.lastHolder {
				wait = election.ReleaseWait(s.slowest, s.duration)
			}
			if at := s.at.Add(wait); now.Before(at) {
				out.held = append(out.held, name)
				later(at)
				continue
			}
			out.fence = append(out.fence, leases[i])
			continue
		}
		if at := s.at.Add(s.duration); now.Before(at) {
			out.held = append(out.held, name)
			later(at)
			continue
		}
		out.fence = append(out.fence, leases[i])
	}
	for name, g := range o.gone {
		if at := g.at.Add(g.duration); !now.Before(at) {
			delete(o.gone, name)
		} else if count, ok := slotLeaseCount(o.group, name); ok && count != n && !slices.Contains(out.held, name) {
			out.held = append(out.held, name)
			later(at)
		}
	}
	// What the group may still act on is not fenced yet.
	out.fence = slices.DeleteFunc(out.fence, func(l coordinationv1.Lease) bool { return slices.Contains(out.held, l.Name) })
	return out
}

// broadcast wakes every waiter; o.mu is held.
func (o *observer) broadcast() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// expiresAt is when the Lease name becomes free for this process by the observer's
// count, and the channel that is closed when that may change. The zero time means free
// now (no Lease, an empty holder, or this process's own), and so does an unsynced
// observer: the elector then counts from its own first look, as client-go's always does.
func (o *observer) expiresAt(name string) (time.Time, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.synced() {
		return time.Time{}, o.changed
	}
	lease, err := o.lister.Leases(o.namespace).Get(name)
	if err != nil {
		return time.Time{}, o.changed
	}
	if h := record(lease).HolderIdentity; h == "" || h == o.identity {
		// The slot's Lease lock decides whether an empty or own record may be
		// taken now (a release) or waited out (an edit).
		return time.Time{}, o.changed
	}
	s, ok := o.seen[name]
	if !ok || s.version != lease.ResourceVersion {
		return time.Time{}, o.changed
	}
	return s.at.Add(s.duration), o.changed
}

// observation is what the observer saw of the record version of the Lease name, for the
// slot's Lease lock (election.LockOptions.Seen).
func (o *observer) observation(name, version string) (election.Observation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.seen[name]
	if !ok || s.version != version {
		return election.Observation{}, false
	}
	return election.Observation{At: s.at, Holder: s.lastHolder, Longest: s.duration, Slowest: s.slowest}, true
}

// changes is closed when a Lease next comes, goes or changes holder.
func (o *observer) changes() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// heldBy is the names of the Leases whose holder is identity.
func (o *observer) heldBy(identity string) []string {
	leases, err := o.lister.Leases(o.namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var names []string
	for _, l := range leases {
		if o.ours(l) && ptr.Deref(l.Spec.HolderIdentity, "") == identity {
			names = append(names, l.Name)
		}
	}
	return names
}

// waitExpired waits until the Lease name may be taken by this process (see
// expiresAt): until the observed record has lasted its duration, or it changes. It
// returns false when ctx ends first.
func (o *observer) waitExpired(ctx context.Context, name string) bool {
	for {
		at, changed := o.expiresAt(name)
		wait := at.Sub(o.clock.Now())
		if wait <= 0 {
			return true
		}
		timer := o.clock.NewTimer(wait)
		select {
		case <-timer.C():
		case <-changed:
		case <-ctx.Done():
			timer.Stop()
			return false
		}
		timer.Stop()
	}
}

// lastHeldByOther is when the Lease name was last seen written by another holder or
// released: how long the slot has gone without a holder, at most, when this process
// takes it.
func (o *observer) lastHeldByOther(name string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.heldByOther[name]
	return at, ok
}
