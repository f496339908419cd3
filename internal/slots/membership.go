// Membership: which replicas are live, from their member Leases.

package slots

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// MemberOfLabel marks the Leases by which the replicas of one group announce
// themselves; its value is the group.
const MemberOfLabel = "samplecontroller.k8s.io/member-of"

// SlotsAnnotation on a member Lease is the number of slots the member divides the Foos
// into. Members that disagree would cut the same Foos into different slots, whose
// Leases fence nothing between them.
const SlotsAnnotation = "samplecontroller.k8s.io/slots"

// SetByAnnotation on the count Lease names the member that last set the count.
const SetByAnnotation = "samplecontroller.k8s.io/set-by"

// Membership announces this replica in a Lease of its own, renewed every third of its
// duration, and follows the Leases of the others. A member is live while this replica
// has seen its Lease change (a new resourceVersion) within its duration, and no longer
// than this replica's own duration, and while the Lease's renewTime says so too:
// neither a renewTime in the future (a clock run ahead, an edit) nor a forged Lease
// keeps a member live once its record stands still. Membership decides only who should
// hold which slot, so a stale view costs balance, never safety (each slot has a fencing
// Lease of its own). A member Lease that has stood still for collectAfter durations (a
// replica killed without withdrawing it) is deleted.
type Membership struct {
	client    kubernetes.Interface
	namespace string
	group     string
	identity  string
	slots     int
	duration  time.Duration
	clock     clock.WithDelayedExecution

	factory informers.SharedInformerFactory
	lister  coordinationlisters.LeaseLister
	synced  cache.DoneChecker

	// changed has a value when the live members may have changed: a Lease came, went
	// or was renewed, or one is due to expire.
	changed chan struct{}
	mu      sync.Mutex
	timer   clock.Timer
	// seen is, per member Lease, its resourceVersion and when this replica first saw it.
	seen map[string]memberObservation
	// disagreed says once that an older member divides the Foos otherwise.
	disagreed sync.Once
}

// NewMembership follows the member Leases of group in namespace, for identity, which
// divides the Foos into slots.
func NewMembership(client kubernetes.Interface, namespace, group, identity string, slots int, duration time.Duration, clk clock.WithDelayedExecution) *Membership {
	m := &Membership{
		client: client, namespace: namespace, group: group, identity: identity, slots: slots, duration: duration, clock: clk,
		changed: make(chan struct{}, 1), seen: map[string]memberObservation{},
	}
	m.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = m.selector().String()
		}))
	leases := m.factory.Coordination().V1().Leases()
	m.lister, m.synced = leases.Lister(), leases.Informer().HasSyncedChecker()
	changed := func() {
		m.scheduleExpiry()
		m.notify()
	}
	_, _ = leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			m.saw(obj)
			changed()
		},
		UpdateFunc: func(_, obj any) {
			m.saw(obj)
			changed()
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				m.mu.Lock()
				delete(m.seen, l.Name)
				m.mu.Unlock()
			}
			changed()
		},
	})
	return m
}

// collectAfter is how many durations a member Lease stands still before it is deleted.
const collectAfter = 5

// memberObservation is a member Lease's resourceVersion, and when this replica first saw it.
type memberObservation struct {
	version string
	at      time.Time
}

func (m *Membership) saw(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		m.mu.Lock()
		m.observationLocked(l)
		m.mu.Unlock()
	}
}

// observationLocked is when this replica first saw l's current record; now, when it had
// not seen it before. m.mu is held.
func (m *Membership) observationLocked(l *coordinationv1.Lease) time.Time {
	s, ok := m.seen[l.Name]
	if !ok || s.version != l.ResourceVersion {
		s = memberObservation{version: l.ResourceVersion, at: m.clock.Now()}
		m.seen[l.Name] = s
	}
	return s.at
}

// liveUntil is when the member of Lease l lapses unless it renews: its duration (at most
// this replica's) after this replica first saw its current record, or after its
// renewTime, whichever comes first. It is false for a Lease that names no member.
func (m *Membership) liveUntil(l *coordinationv1.Lease) (time.Time, bool) {
	expiry, ok := leaseExpiry(l)
	if !ok {
		return time.Time{}, false
	}
	d := min(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second, m.duration)
	m.mu.Lock()
	seen := m.observationLocked(l)
	m.mu.Unlock()
	if observed := seen.Add(d); observed.Before(expiry) {
		expiry = observed
	}
	return expiry, true
}

// collect deletes the member Leases, other than this replica's, that have stood still
// for collectAfter durations, each only as it was seen: one renewed meanwhile stays.
func (m *Membership) collect(ctx context.Context) {
	leases, err := m.lister.List(m.selector())
	if err != nil {
		return
	}
	now := m.clock.Now()
	for _, l := range leases {
		if l.Name == LeaseName(m.group, m.identity) {
			continue
		}
		m.mu.Lock()
		seen := m.observationLocked(l)
		m.mu.Unlock()
		// Standing still by this replica's watch and by its renewTime both: a watch
		// that saw the last renewal late (its process was frozen) does not count it
		// standing still from then.
		renewed := time.Time{}
		if l.Spec.RenewTime != nil {
			renewed = l.Spec.RenewTime.Time
		}
		if now.Sub(seen) < collectAfter*m.duration || now.Sub(renewed) < collectAfter*m.duration {
			continue
		}
		err := m.client.CoordinationV1().Leases(m.namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion},
		})
		if err == nil {
			klog.FromContext(ctx).Info("Deleted the member Lease of a replica gone without withdrawing it", "lease", l.Name, "holder", ptr.Deref(l.Spec.HolderIdentity, ""))
		}
	}
}

// selector selects the group's member Leases. The informer asks the apiserver for those
// only; the cache is filtered again, since a fake or proxy may not filter a watch.
func (m *Membership) selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{MemberOfLabel: m.group})
}

// LeaseName is the member Lease of identity in group: identities are host names and
// UUIDs, longer than a name may be, so it is hashed.
func LeaseName(group, identity string) string {
	h := fnv.New64a()
	h.Write([]byte(identity))
	return fmt.Sprintf("%s-member-%016x", group, h.Sum64())
}

// HasSynced tells whether the member Leases have been listed.
func (m *Membership) HasSynced() bool { return cache.IsDone(m.synced) }

// Changes has a value whenever Live may answer differently.
func (m *Membership) Changes() <-chan struct{} { return m.changed }

func (m *Membership) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Run announces this replica until ctx ends, then deletes its Lease, so that the
// others take over its slots at once instead of after the Lease's duration. It returns
// once the announcement is withdrawn.
func (m *Membership) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	m.factory.Start(ctx.Done())
	defer m.factory.Shutdown()
	go func() {
		// Live answers once the Leases are listed: that is a change too.
		if cache.WaitFor(ctx, "", m.synced) {
			m.scheduleExpiry()
			m.notify()
		}
	}()
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if err := m.renew(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Announcing this replica", "group", m.group)
		}
		if cache.IsDone(m.synced) {
			m.collect(ctx)
		}
	}, m.duration/3, 0.1, true)
	m.mu.Lock()
	if m.timer != nil {
		m.timer.Stop()
	}
	m.mu.Unlock()

	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.duration/3)
	defer cancel()
	err := m.client.CoordinationV1().Leases(m.namespace).Delete(leaveCtx, LeaseName(m.group, m.identity), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Withdrawing this replica; the others take over once its Lease expires", "group", m.group)
	}
}

// renew writes this replica's Lease with the time now.
func (m *Membership) renew(ctx context.Context) error {
	leases := m.client.CoordinationV1().Leases(m.namespace)
	name := LeaseName(m.group, m.identity)
	now := metav1.NewMicroTime(m.clock.Now())
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      map[string]string{MemberOfLabel: m.group},
				Annotations: map[string]string{SlotsAnnotation: strconv.Itoa(m.slots)},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(m.identity),
				LeaseDurationSeconds: ptr.To(int32(m.duration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if expiry, ok := leaseExpiry(lease); !ok || !now.Time.Before(expiry) {
		// This member's own Lease, lapsed: a replica that was gone for longer than its
		// Lease (a container crash-looping, restarted in place under the same name)
		// comes back as a new member, not as the oldest. The oldest decides the number
		// of slots, and the members that took over meanwhile may use another.
		lease.Spec.AcquireTime = &now
	}
	lease.Spec.HolderIdentity = ptr.To(m.identity)
	// The label, which another client may have removed: without it the members'
	// watches lose this one, which sees itself gone too, and the slots go elsewhere.
	metav1.SetMetaDataLabel(&lease.ObjectMeta, MemberOfLabel, m.group)
	metav1.SetMetaDataAnnotation(&lease.ObjectMeta, SlotsAnnotation, strconv.Itoa(m.slots))
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(m.duration / time.Second))
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// Live is the identities of the members to share the slots with, sorted, and whether
// to act at all. Those are the members whose Lease is current and who divide the Foos
// into as many slots as this one. While the oldest live member divides them otherwise,
// as during a rollout that changes the number, this replica acts on nothing: the old
// replicas keep their slots until they are gone, and no Foo is in two replicas' slots.
// Nothing is to be done either before the Leases have been listed.
func (m *Membership) Live() ([]string, bool) {
	if !cache.IsDone(m.synced) {
		return nil, false
	}
	leases, err := m.lister.List(m.selector())
	if err != nil {
		return nil, false
	}
	now := m.clock.Now()
	var live []*coordinationv1.Lease
	for _, l := range leases {
		// A Lease that does not say how it divides the Foos is no member's.
		if until, ok := m.liveUntil(l); ok && now.Before(until) && slotsOf(l) > 0 {
			live = append(live, l)
		}
	}
	if len(live) > 0 {
		oldest := slices.MinFunc(live, func(a, b *coordinationv1.Lease) int {
			if c := acquired(a).Compare(acquired(b)); c != 0 {
				return c
			}
			return strings.Compare(*a.Spec.HolderIdentity, *b.Spec.HolderIdentity)
		})
		if slotsOf(oldest) != m.slots {
			m.disagreed.Do(func() {
				klog.Background().Info("Acting on no slot while an older replica divides the Foos into another number of slots",
					"replica", *oldest.Spec.HolderIdentity, "itsSlots", oldest.Annotations[SlotsAnnotation], "slots", m.slots)
			})
			return nil, false
		}
	}
	var peers []string
	for _, l := range live {
		if slotsOf(l) == m.slots {
			peers = append(peers, *l.Spec.HolderIdentity)
		}
	}
	slices.Sort(peers)
	return slices.Compact(peers), true
}

// acquired is when a member first announced itself.
func acquired(l *coordinationv1.Lease) time.Time {
	if l.Spec.AcquireTime == nil {
		return time.Time{}
	}
	return l.Spec.AcquireTime.Time
}

// slotsOf is the number of slots a member divides the Foos into; 0 when it does not say.
func slotsOf(l *coordinationv1.Lease) int {
	n, _ := strconv.Atoi(l.Annotations[SlotsAnnotation])
	return n
}

// scheduleExpiry arms a timer for the next expiry among the current Leases: no event
// comes when a Lease merely stops being renewed, so the timer is that event.
func (m *Membership) scheduleExpiry() {
	leases, err := m.lister.List(m.selector())
	if err != nil {
		return
	}
	now := m.clock.Now()
	var next time.Time
	for _, l := range leases {
		if until, ok := m.liveUntil(l); ok && now.Before(until) && (next.IsZero() || until.Before(next)) {
			next = until
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if next.IsZero() {
		return
	}
	m.timer = m.clock.AfterFunc(next.Sub(now), func() {
		// On a goroutine of its own: a fake clock calls this with its lock held.
		go func() {
			m.scheduleExpiry()
			m.notify()
		}()
	})
}

// leaseExpiry is when a member Lease lapses unless renewed.
func leaseExpiry(l *coordinationv1.Lease) (time.Time, bool) {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	return s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second), true
}
