// Holder: this member's share of the slots, each slot's work run only while its Lease
// is held.

package slots

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// Holder runs work for the slots assigned to this member, each slot only while this
// member holds the slot's Lease: it asks for a slot's Lease when the assignment gives it
// the slot, and when the assignment takes the slot away it stops the slot's work, waits
// for it to return, and only then releases the Lease, so that the next holder never
// works alongside it. A Lease it cannot renew ends with OnLost, which must stop every
// write of this process at once (the controller exits).
type Holder struct {
	Space      Space
	Membership *Membership
	Client     kubernetes.Interface
	// Lease is the group's: its Leases' namespace, the group's name (their prefix),
	// this member's identity and the timings of every slot's Lease.
	Lease election.Lease
	// Work runs while the slot is held, until its context ends; it returns once every
	// write it started has ended.
	Work func(ctx context.Context, slot int) error
	// OnLost is called when the Lease of a slot whose work runs was lost.
	OnLost func(slot int)

	mu      sync.Mutex
	running map[int]*slotRun
	// stopping holds the runs asked to stop whose work still drains; a slot is not
	// started again until its run has stopped.
	stopping map[int]*slotRun
	// stopped has a value when a run in stopping has stopped.
	stopped  chan struct{}
	observer *observer
	// locks is the lock of each slot Lease this member has asked for: one for the
	// member's life, so that what it wrote is known to its next election and to
	// releaseUnassigned (a Lease names this member by its own write, or by an edit).
	locks map[string]*election.LeaseLock
}

// slotRun is one slot's election and work, and how to end them.
type slotRun struct {
	stop context.CancelFunc
	done chan struct{}
}

// Unheld is how long, at most, the slot went without a holder before this member took
// it: since another holder last renewed or released its Lease, as this member saw it.
// It is false when no other holder was seen.
func (h *Holder) Unheld(slot int) (time.Duration, bool) {
	h.mu.Lock()
	o := h.observer
	h.mu.Unlock()
	at, ok := o.lastHeldByOther(SlotLeaseName(h.Lease.Name, slot, h.Space.Len()))
	if !ok {
		return 0, false
	}
	return o.clock.Since(at), true
}

// elect runs the slot's work while this member holds the slot's Lease, once: until
// ctx ends, the work returns, or the Lease is lost.
func (h *Holder) elect(ctx context.Context, slot int, lock *election.LeaseLock, logger klog.Logger) {
	result := election.Run(ctx, election.Config{
		Lock: lock,
		OnLost: func() {
			if h.OnLost != nil {
				h.OnLost(slot)
			}
		},
	}, func(ctx context.Context) error {
		if !h.mayAct(ctx) {
			return nil
		}
		// Until the count Lease names another count: the replicas of that count wait
		// for this Lease's release before they act.
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			h.waitCountChanged(ctx)
			stop()
		}()
		logger.V(2).Info("Holding the slot")
		return h.Work(ctx, slot)
	})
	switch {
	case result.Err != nil:
		logger.Error(result.Err, "The slot's work ended")
	case result.ReleaseErr != nil:
		logger.Error(result.ReleaseErr, "Releasing the slot; the next holder takes it once it expires")
	case result.Worked:
		logger.V(2).Info("Released the slot")
	}
}

// SlotLeaseName is the fencing Lease of a slot of a space of n slots. It names n:
// slot 3 of 8 and slot 3 of 16 are other hash ranges, and a Lease that did not say which
// would fence nothing between replicas that count otherwise.
func SlotLeaseName(group string, slot, n int) string {
	return fmt.Sprintf("%s-slot-%d-of-%d", group, slot, n)
}

// CountLeaseName is the group's count Lease: the register, written only with the
// resourceVersion it was read at, of the number of slots the group acts with now.
func CountLeaseName(group string) string {
	return group + "-slots"
}

// slotLeaseCount is the number of slots a slot Lease of group belongs to: 0 for a Lease
// of a version before slot Leases named it, which may overlap any slot of any count,
// and 1 for the single leader's Lease, named as the group (Leader). It is false for a
// Lease that is no slot's.
func slotLeaseCount(group, name string) (int, bool) {
	if name == group {
		return 1, true
	}
	rest, ok := strings.CutPrefix(name, group+"-slot-")
	if !ok {
		return 0, false
	}
	slot, count, named := strings.Cut(rest, "-of-")
	if _, err := strconv.Atoi(slot); err != nil {
		return 0, false
	}
	if !named {
		return 0, true
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// countOf is the number of slots a count Lease names; 0 when it names none.
func countOf(lease *coordinationv1.Lease) int {
	n, err := strconv.Atoi(lease.Annotations[SlotsAnnotation])
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// Run announces this member (Membership.Run) and follows the assignment until ctx
// ends, then stops every slot's work, releases its Lease, and only then withdraws the
// announcement before it returns: a member that looked gone while its slots still
// worked would let the others, or replicas with another count of slots, act beside it.
func (h *Holder) Run(ctx context.Context) {
	announcing, withdraw := context.WithCancel(context.WithoutCancel(ctx))
	var announced sync.WaitGroup
	announced.Go(func() { h.Membership.Run(announcing) })
	defer announced.Wait()
	defer withdraw()
	h.follow(ctx)
}

// follow follows the assignment until ctx ends, then stops every slot's work and
// releases its Lease before it returns.
func (h *Holder) follow(ctx context.Context) {
	logger := klog.FromContext(ctx)
	h.mu.Lock()
	h.running, h.stopping, h.stopped = map[int]*slotRun{}, map[int]*slotRun{}, make(chan struct{}, 1)
	h.locks = map[string]*election.LeaseLock{}
	h.observer = newObserver(h.Client, h.Lease, clock.RealClock{})
	h.mu.Unlock()
	// The slot Leases are followed for as long as this member runs, whether it holds
	// them or not, so that it can tell a dead holder's Lease expired the moment it has.
	observing, stopObserving := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { h.observer.run(observing) })
	defer wg.Wait()
	defer stopObserving()
	// Replicas started together announce themselves moments apart. One that took slots
	// before it saw the others would start those slots' informers, listing their Foos,
	// only to hand most of them over: let the announcements arrive first.
	if !sleep(ctx, h.Lease.RetryPeriod, nil) {
		return
	}
	for {
		// Read before acting, so that no change in between goes unnoticed.
		leasesChanged := h.observer.changes()
		members, act := h.Membership.Live()
		switch {
		case act:
			h.apply(ctx, SlotsOf(h.Space.Assign(members), h.Lease.Identity))
		case h.Membership.HasSynced():
			// Told not to act (an older member divides the Foos otherwise): whatever
			// this member acts on, it stops.
			h.apply(ctx, nil)
		}
		h.releaseUnassigned(ctx)
		select {
		case <-h.Membership.Changes():
		case <-leasesChanged:
		case <-h.stopped:
		case <-ctx.Done():
			logger.V(2).Info("Giving up every slot")
			h.apply(ctx, nil)
			h.waitStopped()
			return
		}
	}
}

// apply starts the elections of the slots in want that do not run yet, and asks
// those that run and are not in want to stop. It does not wait for them: a drain may
// take up to the graceful timeout, and the assignment may change meanwhile (a peer
// dies, and its slots must be taken now). A slot asked to stop is started again only
// once its work has returned and its Lease was released.
func (h *Holder) apply(ctx context.Context, want []int) {
	keep := map[int]bool{}
	for _, slot := range want {
		keep[slot] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for slot, run := range h.stopping {
		select {
		case <-run.done:
			delete(h.stopping, slot)
		default:
		}
	}
	for slot, run := range h.running {
		if !keep[slot] {
			run.stop()
			h.stopping[slot] = run
			delete(h.running, slot)
		}
	}
	for _, slot := range want {
		if h.running[slot] == nil && h.stopping[slot] == nil && ctx.Err() == nil {
			h.running[slot] = h.start(ctx, slot)
		}
	}
}

// waitStopped waits until every run asked to stop has.
func (h *Holder) waitStopped() {
	h.mu.Lock()
	runs := make([]*slotRun, 0, len(h.stopping))
	for _, run := range h.stopping {
		runs = append(runs, run)
	}
	h.mu.Unlock()
	for _, run := range runs {
		<-run.done
	}
}

// releaseUnassigned releases the slot Leases that name this member as their holder while
// it runs no election for them. An acquisition cancelled because the slot moved away
// may have been committed after its answer was given up on; such a Lease is renewed by
// nobody, and the slot's next holder would wait for it to expire. A slot still
// stopping is left to its own run, which releases it once its work has returned.
func (h *Holder) releaseUnassigned(ctx context.Context) {
	for _, name := range h.observer.heldBy(h.Lease.Identity) {
		slot, ok := h.slotOf(name)
		if !ok {
			continue
		}
		h.mu.Lock()
		running := h.running[slot] != nil || h.stopping[slot] != nil
		h.mu.Unlock()
		if running {
			continue
		}
		h.mu.Lock()
		lock := h.locks[name]
		h.mu.Unlock()
		if lock == nil {
			// Never asked for by this member: named by someone else's edit, which
			// the slot's next holder waits out.
			continue
		}
		releaseCtx, cancel := context.WithTimeout(ctx, h.Lease.RenewDeadline)
		released, err := lock.Release(releaseCtx)
		cancel()
		logger := klog.FromContext(ctx).WithValues("slot", slot)
		switch {
		case err != nil:
			logger.Error(err, "Releasing a slot's Lease that names this replica though it asked for it no more")
		case released:
			logger.Info("Released a slot's Lease that named this replica though it asked for it no more: an acquisition given up on was committed")
		}
	}
}

// slotOf is the slot of this member's count whose Lease is name.
func (h *Holder) slotOf(name string) (int, bool) {
	rest, _ := strings.CutPrefix(name, h.Lease.Name+"-slot-")
	slot, _, _ := strings.Cut(rest, "-of-")
	n, err := strconv.Atoi(slot)
	if err != nil || SlotLeaseName(h.Lease.Name, n, h.Space.Len()) != name || n < 0 || n >= h.Space.Len() {
		return 0, false
	}
	return n, true
}

// mayAct tells, once this member holds one of its slots' Leases, whether it may act on
// that slot. It may when the group's count Lease names this member's number of slots
// and then no slot Lease of another number is held, as a list read after the count
// shows; it waits, holding its Lease, while those of another number are released or
// expire. When the count Lease names another number, or none, the member sets it to its
// own only if the membership tells it to act and no slot Lease of another number is
// held: the members of the old number, once they stop by themselves (told not to act,
// or gone), let it. Otherwise it returns false, and the slot's Lease is released. It
// returns false too when ctx ends.
//
// Two members of different numbers cannot both act: each read the count after taking
// its slot's Lease, and the count was changed between the two reads, so the later
// reader's list, made after that change, shows the earlier one's Lease held until its
// holder released it or its tenure has ended by the observer's count. A holder whose
// tenure ended that way (a process frozen past its Lease) is still named in its Lease,
// and nobody of its own number takes the Lease over: woken, it would renew it and act
// again. So before it acts, the member fences each such Lease, with an update
// conditioned on the version it listed that names FenceHolder as the holder for the
// Lease's duration: the old holder's renewal then fails, its next read shows another
// holder, and its slot's work ends (election.LeaseLock ends its tenure on the read). A
// renewal that came first makes the fence fail, and the member looks again. Free Leases
// of another number are fenced too: a member that starts later cannot tell how long
// they have been free and would wait a duration for them, at every restart.
func (h *Holder) mayAct(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	n := h.Space.Len()
	said := false
	for {
		changed := h.observer.changes()
		lease, err := h.Client.CoordinationV1().Leases(h.Lease.Namespace).Get(ctx, CountLeaseName(h.Lease.Name), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease, err = nil, nil
		}
		var others otherLeases
		if err == nil {
			others, err = h.othersHeld(ctx)
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				logger.Error(err, "Reading the number of slots the group acts with")
			}
		case lease != nil && countOf(lease) == n:
			if len(others.held) == 0 {
				fenced, err := h.fence(ctx, others.fence)
				if fenced {
					return true
				}
				if err != nil && ctx.Err() == nil {
					logger.Error(err, "Fencing the expired Leases of another number of slots")
				}
				break
			}
			if !said {
				said = true
				logger.Info("Waiting for the Leases of another number of slots to be released or to expire", "leases", others.held, "slots", n)
			}
		default:
			if !h.told() || len(others.held) > 0 {
				return false
			}
			if err := h.setCount(ctx, lease); err != nil {
				logger.Error(err, "Setting the number of slots the group acts with")
				return false
			}
			// Read it again: another member may have set it meanwhile.
			continue
		}
		wait := h.Lease.RetryPeriod
		if !others.next.IsZero() {
			wait = min(wait, max(others.next.Sub(h.observer.clock.Now()), 0))
		}
		if !sleep(ctx, wait, changed) {
			return false
		}
	}
}

// told tells whether the membership tells this member to act; a single leader (no
// membership) always is.
func (h *Holder) told() bool {
	if h.Membership == nil {
		return true
	}
	_, act := h.Membership.Live()
	return act
}

// FenceHolder is the holder a member of n slots writes into the expired Leases of
// another number before it acts (mayAct): no replica has that identity, so no holder
// renews it, and for the Lease's duration nobody takes it.
func FenceHolder(n int) string {
	return fmt.Sprintf("fence-of-%d-slots", n)
}

// fence writes FenceHolder into each Lease, each update conditioned on the version
// listed. It tells whether all were fenced; a Lease changed or gone since the list
// makes it false without an error, and the caller looks again.
func (h *Holder) fence(ctx context.Context, leases []coordinationv1.Lease) (bool, error) {
	now := metav1.NewMicroTime(h.observer.clock.Now())
	for _, lease := range leases {
		lease = *lease.DeepCopy()
		previous := ptr.Deref(lease.Spec.HolderIdentity, "")
		lease.Spec.HolderIdentity = ptr.To(FenceHolder(h.Space.Len()))
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
		if ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) < 1 {
			lease.Spec.LeaseDurationSeconds = ptr.To(int32(h.Lease.Duration / time.Second))
		}
		_, err := h.Client.CoordinationV1().Leases(h.Lease.Namespace).Update(ctx, &lease, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, err
		}
		if previous == "" {
			klog.FromContext(ctx).Info("Fenced a free Lease of another number of slots, so that members that start later need not wait for it", "lease", lease.Name)
			continue
		}
		klog.FromContext(ctx).Info("Fenced an expired Lease of another number of slots, so that its holder cannot renew it", "lease", lease.Name, "holder", previous)
	}
	return true, nil
}

// waitMayAct waits until mayAct may let this member act, by what the observer has
// seen: the count Lease names this member's number of slots, or the membership tells it
// to act and no slot Lease of another number is held. It returns false when ctx ends.
func (h *Holder) waitMayAct(ctx context.Context) bool {
	for {
		count, changed := h.observer.currentCount()
		if count == h.Space.Len() {
			return true
		}
		if h.told() && h.observer.cachedOthersHeld(h.Space.Len()) == 0 {
			return true
		}
		// The membership's changes are the holder loop's; it is read again every retry
		// period.
		if !sleep(ctx, h.Lease.RetryPeriod, changed) {
			return false
		}
	}
}

// othersHeld reads the group's slot Leases from the apiserver and tells which of
// another number of slots than this member's may still be acted on, and which must be
// fenced (observer.othersHeld).
func (h *Holder) othersHeld(ctx context.Context) (otherLeases, error) {
	// All of the namespace's, sorted by name (observer.ours), as the observer does.
	leases, err := h.Client.CoordinationV1().Leases(h.Lease.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return otherLeases{}, err
	}
	return h.observer.othersHeld(leases.Items, h.Space.Len()), nil
}

// waitCountChanged returns once the count Lease names another number of slots than
// this member's, or ctx ends. mayAct has just read it from the apiserver; until the
// watch catches up with that read, the apiserver is asked again every retry period. A
// count Lease deleted, or left naming no number, stops nothing: a member of another
// number that sets it afterwards lists this member's Leases held, and waits.
func (h *Holder) waitCountChanged(ctx context.Context) {
	n := h.Space.Len()
	caughtUp := false
	// One ticker for the whole wait: the observer's other changes must not put the
	// poll off.
	poll := time.NewTicker(h.Lease.RetryPeriod)
	defer poll.Stop()
	for {
		count, changed := h.observer.currentCount()
		switch {
		case count == n:
			caughtUp = true
		case caughtUp && count != 0:
			return
		}
		select {
		case <-changed:
		case <-poll.C:
			if caughtUp {
				continue
			}
			lease, err := h.Client.CoordinationV1().Leases(h.Lease.Namespace).Get(ctx, CountLeaseName(h.Lease.Name), metav1.GetOptions{})
			if err == nil && countOf(lease) != n && countOf(lease) != 0 {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// setCount sets the count Lease, read as lease (nil: there was none), to this
// member's number of slots. Another member that set it first is no error: the caller
// reads it again.
func (h *Holder) setCount(ctx context.Context, lease *coordinationv1.Lease) error {
	leases := h.Client.CoordinationV1().Leases(h.Lease.Namespace)
	n := strconv.Itoa(h.Space.Len())
	var err error
	previous := ""
	if lease == nil {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:        CountLeaseName(h.Lease.Name),
				Labels:      map[string]string{SlotOfLabel: h.Lease.Name},
				Annotations: map[string]string{SlotsAnnotation: n, SetByAnnotation: h.Lease.Identity},
			},
		}, metav1.CreateOptions{})
	} else {
		previous = lease.Annotations[SlotsAnnotation]
		lease = lease.DeepCopy()
		// The label too, for people and tools: the members find the Lease by name.
		metav1.SetMetaDataLabel(&lease.ObjectMeta, SlotOfLabel, h.Lease.Name)
		metav1.SetMetaDataAnnotation(&lease.ObjectMeta, SlotsAnnotation, n)
		metav1.SetMetaDataAnnotation(&lease.ObjectMeta, SetByAnnotation, h.Lease.Identity)
		// Conditional on the resourceVersion read.
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
		return nil
	case err != nil:
		return err
	}
	klog.FromContext(ctx).Info("Set the number of slots the group acts with", "from", previous, "to", n)
	return nil
}

// start runs the slot's election; the work starts when the Lease is held. h.mu is held.
func (h *Holder) start(parent context.Context, slot int) *slotRun {
	ctx, stop := context.WithCancel(context.WithoutCancel(parent))
	run := &slotRun{stop: stop, done: make(chan struct{})}
	logger := klog.FromContext(parent).WithValues("slot", slot)
	name := SlotLeaseName(h.Lease.Name, slot, h.Space.Len())
	lock := h.lockFor(name)
	go func() {
		defer func() {
			close(run.done)
			// Wakes the loop, which may start the slot again.
			select {
			case h.stopped <- struct{}{}:
			default:
			}
		}()
		// While the slot stays assigned here, its election runs again whenever it
		// ends by itself: the work failed, or the Lease was lost (the controller exits
		// then; a test's member may not).
		for {
			// A Lease taken only to be released by mayAct, again and again while
			// another number of slots acts, would be two writes a retry period.
			if !h.waitMayAct(ctx) {
				return
			}
			// Asking before the holder's Lease has expired only starts the elector's
			// own count; ask the moment it expires, or is released.
			if !h.observer.waitExpired(ctx, name) {
				return
			}
			h.elect(ctx, slot, lock, logger)
			if ctx.Err() != nil {
				return
			}
			// Not at once: a failing start would loop.
			if !sleep(ctx, h.Lease.RetryPeriod, nil) {
				return
			}
		}
	}()
	return run
}

// lockFor is the lock of the slot Lease name: one, and one tenure, for every election
// of the slot on this member, so that what it saw and wrote of the Lease carries over.
// h.mu is held.
func (h *Holder) lockFor(name string) *election.LeaseLock {
	if lock, ok := h.locks[name]; ok {
		return lock
	}
	lease := h.Lease
	lease.Name = name
	lock := lease.NewLock(h.Client, tenure.New(clock.RealClock{}), election.LockOptions{
		Labels: map[string]string{SlotOfLabel: h.Lease.Name},
		Seen:   func(version string) (election.Observation, bool) { return h.observer.observation(name, version) },
	})
	h.locks[name] = lock
	return lock
}

// sleep waits for d, or until changed is closed (nil: never). It returns false when ctx
// ends first.
func sleep(ctx context.Context, d time.Duration, changed <-chan struct{}) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-changed:
	case <-ctx.Done():
		return false
	}
	return true
}
