package slots

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
)

// workLog records which member works on which slot, and any overlap.
type workLog struct {
	mu     sync.Mutex
	active map[int]string
	// draining holds the slots whose work was asked to stop and has not returned yet.
	draining map[int]string
	overlaps []string
}

// work is identity's work on a slot. Once asked to stop it drains for drain, or, when
// drained is not nil, until drained is closed.
func (w *workLog) work(identity string, drain time.Duration, drained <-chan struct{}) func(ctx context.Context, slot int) error {
	return func(ctx context.Context, slot int) error {
		w.mu.Lock()
		if other, ok := w.active[slot]; ok {
			w.overlaps = append(w.overlaps, fmt.Sprintf("slot %d: %s started while %s worked", slot, identity, other))
		}
		w.active[slot] = identity
		w.mu.Unlock()
		<-ctx.Done()
		w.mu.Lock()
		w.draining[slot] = identity
		w.mu.Unlock()
		// In-flight writes finish after the stop is asked for: the Lease must outlast them.
		if drained != nil {
			<-drained
		} else {
			time.Sleep(max(drain, 50*time.Millisecond))
		}
		w.mu.Lock()
		delete(w.active, slot)
		delete(w.draining, slot)
		w.mu.Unlock()
		return nil
	}
}

func newWorkLog() *workLog {
	return &workLog{active: map[int]string{}, draining: map[int]string{}}
}

// owners is each slot's worker, or "" for none.
func (w *workLog) owners(n int) []string { return w.bySlot(w.active, n) }

// drainers is, for each slot, the member whose work on it drains, or "" for none.
func (w *workLog) drainers(n int) []string { return w.bySlot(w.draining, n) }

// bySlot lists the n slots' members in m, "" for a slot m lacks.
func (w *workLog) bySlot(m map[int]string, n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, n)
	for slot, who := range m {
		out[slot] = who
	}
	return out
}

// testMember is one member's Membership and Holder, running on a fake clientset.
type testMember struct {
	client         kubernetes.Interface
	identity       string
	space          Space
	memberDuration time.Duration
	timings        election.Lease
	log            *workLog
	onLost         func(slot int)
	// drain is how long the member's work takes to return once asked to stop; 50 ms
	// when zero.
	drain time.Duration
	// drained, when not nil, ends the drain in place of drain: the work returns once it
	// is closed.
	drained <-chan struct{}
	// clock is the membership's clock; the real one when nil.
	clock clock.WithDelayedExecution
	// work replaces log's work when set.
	work func(ctx context.Context, slot int) error
}

const testNamespace, testGroup = "system", "sample-controller"

// testTimings are the slot Leases' timings of the holder tests: short, so that a
// member's death is seen within seconds.
var testTimings = election.Lease{Duration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}

// start runs the member until the returned stop is called, or the test ends.
func (m testMember) start(ctx context.Context, t *testing.T) (*Holder, func()) {
	runCtx, cancel := context.WithCancel(ctx)
	clk := m.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	membership := NewMembership(m.client, testNamespace, testGroup, m.identity, m.space.Len(), m.memberDuration, clk)
	work := m.work
	if work == nil {
		work = m.log.work(m.identity, m.drain, m.drained)
	}
	onLost := m.onLost
	if onLost == nil {
		onLost = func(slot int) { t.Errorf("%s lost slot %d", m.identity, slot) }
	}
	h := &Holder{
		Space: m.space, Membership: membership, Client: m.client,
		Lease: election.Lease{
			Namespace: testNamespace, Name: testGroup, Identity: m.identity,
			Duration: m.timings.Duration, RenewDeadline: m.timings.RenewDeadline, RetryPeriod: m.timings.RetryPeriod,
		},
		Work: work, OnLost: onLost,
	}
	var wg sync.WaitGroup
	wg.Go(func() { h.Run(runCtx) })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return h, stop
}

func TestHolderHandsSlotsOver(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	space := mustSpace(t, 8)
	log := newWorkLog()
	timings := testTimings

	start := func(identity string) (stop func()) {
		_, stop = testMember{client: client, identity: identity, space: space, memberDuration: 10 * time.Second, timings: timings, log: log}.start(ctx, t)
		return stop
	}
	waitOwners := func(what string, want func([]string) bool) {
		t.Helper()
		began := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			return want(log.owners(space.Len())), nil
		})
		if err != nil {
			t.Fatalf("%s: owners %q", what, log.owners(space.Len()))
		}
		t.Logf("%s after %v", what, time.Since(began).Round(time.Millisecond))
	}
	all := func(who string) func([]string) bool {
		return func(owners []string) bool {
			return !slices.ContainsFunc(owners, func(o string) bool { return o != who })
		}
	}

	stopA := start("a")
	waitOwners("a works on every slot", all("a"))

	stopB := start("b")
	waitOwners("a and b share the slots as assigned", func(owners []string) bool {
		return slices.Equal(owners, space.Assign([]string{"a", "b"}))
	})

	stopB()
	waitOwners("a works on every slot again once b left", all("a"))
	stopA()
	waitOwners("nobody works once both stopped", all(""))

	if len(log.overlaps) > 0 {
		t.Errorf("two members worked on one slot at once:\n%s", log.overlaps)
	}
}

// TestHolderTakesADeadMembersSlotsAtOnce partitions one of two members from the
// apiserver (every write of it fails, as for a replica that died or lost its network)
// and checks that the other takes its slots the moment the assignment gives them to
// it: their Leases, which it has watched all along, have expired by then. client-go's
// elector alone would wait a Lease duration more, counted from its first look.
func TestHolderTakesADeadMembersSlotsAtOnce(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	// a's client shares client's objects, and fails every request but watches once a
	// is cut off.
	aClient := fake.NewClientset()
	aClient.ReactionChain = slices.Clone(client.ReactionChain)
	aClient.WatchReactionChain = slices.Clone(client.WatchReactionChain)
	var cut atomic.Bool
	aClient.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if cut.Load() {
			return true, nil, errors.New("cut off from the apiserver")
		}
		return false, nil, nil
	})

	const ns, group = testNamespace, testGroup
	// a must see its slots lost by their renew deadline before its own member Lease
	// expires and it gives them up instead. It renews that Lease every third of its
	// duration (less a tenth of jitter at most), so the Lease expires no sooner than
	// about 7.6 s after the cut.
	const memberDuration = 12 * time.Second
	space := mustSpace(t, 8)
	log := newWorkLog()
	// The slot Leases expire 6 s after the cut, before the member Lease, so that they
	// have expired when the assignment moves their slots. Their duration is what tells
	// the observer's take from the elector's own count below: long enough that a loaded
	// machine's delays stay well under it.
	timings := election.Lease{Duration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 100 * time.Millisecond}
	holders := map[string]*Holder{}
	start := func(identity string, client kubernetes.Interface, onLost func(int)) {
		holders[identity], _ = testMember{client: client, identity: identity, space: space, memberDuration: memberDuration, timings: timings, log: log, onLost: onLost}.start(ctx, t)
	}
	waitOwners := func(what string, want func([]string) bool) time.Time {
		t.Helper()
		// The bound only ends a failure.
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return want(log.owners(space.Len())), nil
		})
		if err != nil {
			t.Fatalf("%s: owners %q", what, log.owners(space.Len()))
		}
		return time.Now()
	}

	var lost atomic.Int32
	start("a", aClient, func(int) { lost.Add(1) })
	waitOwners("a works on every slot", func(owners []string) bool {
		return !slices.ContainsFunc(owners, func(o string) bool { return o != "a" })
	})
	start("b", client, func(slot int) { t.Errorf("b lost slot %d", slot) })
	waitOwners("a and b share the slots as assigned", func(owners []string) bool {
		return slices.Equal(owners, space.Assign([]string{"a", "b"}))
	})
	var aSlots []int
	for slot, who := range space.Assign([]string{"a", "b"}) {
		if who == "a" {
			aSlots = append(aSlots, slot)
		}
	}

	cut.Store(true)
	cutAt := time.Now()
	// a's last renewal of each of its slots, as stored: b cannot have seen it, or a later
	// one, before it was made.
	renewed := map[int]time.Time{}
	for _, slot := range aSlots {
		lease, err := client.CoordinationV1().Leases(ns).Get(ctx, SlotLeaseName(group, slot, space.Len()), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		renewed[slot] = lease.Spec.RenewTime.Time
	}
	allB := waitOwners("b works on every slot", func(owners []string) bool {
		return !slices.ContainsFunc(owners, func(o string) bool { return o != "b" })
	})
	// The moment the assignment moved a's slots to b: a's member Lease expired.
	member, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(group, "a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	assigned := member.Spec.RenewTime.Add(memberDuration)
	t.Logf("a cut off; a's member Lease expired %v later, and b worked on every slot %v after that",
		assigned.Sub(cutAt).Round(time.Millisecond), allB.Sub(assigned).Round(time.Millisecond))
	// Without the observer b would wait at least a slot Lease duration from the moment
	// the slots were assigned to it; the bound leaves a loaded machine all but a second
	// of it.
	if late := allB.Sub(assigned); late > timings.Duration-time.Second {
		t.Errorf("b took a's slots %v after they were assigned to it; their Leases had expired by then", late)
	}
	if lost.Load() != int32(len(aSlots)) {
		t.Errorf("a reported %d slots lost, want its %d", lost.Load(), len(aSlots))
	}
	for _, slot := range aSlots {
		// Unheld counts up to the moment it is asked, from b's first sight of a's last
		// renewal, which came after a stored it.
		unheld, ok := holders["b"].Unheld(slot)
		most := time.Since(renewed[slot])
		if !ok || unheld < timings.Duration || unheld > most {
			t.Errorf("slot %d: b says it went unheld for %v (%v), want between the Lease duration and %v", slot, unheld, ok, most)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("two members worked on one slot at once:\n%s", log.overlaps)
	}
}

// TestHolderLeavesASlotLeaseItNeverWrote starts with a slot Lease that names member a,
// written by someone else: a previous process of the same identity, or an edit. a
// runs no election for it and does not release it (a release would hand it over at
// once, while whoever really holds it may act); b, to whom the slot is assigned, takes
// it once it has stood still for its duration, and not before.
func TestHolderLeavesASlotLeaseItNeverWrote(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	const ns, group = testNamespace, testGroup
	space := mustSpace(t, 8)
	assigned := space.Assign([]string{"a", "b"})
	orphan := slices.Index(assigned, "b")
	const d = 3 * time.Second
	// The other slots' Leases exist, released: taking them is an update, usable a retry
	// period and a flight after the release is seen, where a create would wait a whole
	// duration.
	var leases []runtime.Object
	for slot := range space.Len() {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: SlotLeaseName(group, slot, space.Len()), Namespace: ns, ResourceVersion: fakeapiserver.NextResourceVersion(), UID: "uid",
				Labels: map[string]string{SlotOfLabel: group}, Annotations: map[string]string{election.ReleasedByAnnotation: "c uid"},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
		}
		if slot == orphan {
			lease.Annotations = nil
			lease.Spec = coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To(int32(d / time.Second)),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
			}
		}
		leases = append(leases, lease)
	}
	client := fake.NewClientset(leases...)
	withResourceVersions(client)
	log := newWorkLog()
	timings := election.Lease{Duration: d, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
	start := func(identity string) {
		testMember{client: client, identity: identity, space: space, memberDuration: 10 * time.Second, timings: timings, log: log}.start(ctx, t)
	}
	began := time.Now()
	start("b")
	start("a")
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return log.owners(space.Len())[orphan] == "b", nil
	})
	if err != nil {
		t.Fatalf("owners %q: b never worked on slot %d", log.owners(space.Len()), orphan)
	}
	if took := time.Since(began); took < d {
		t.Errorf("b worked on slot %d %v after it started, before the Lease naming a stood still for its duration, %v", orphan, took, d)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(log.owners(space.Len()), assigned), nil
	})
	if err != nil {
		t.Fatalf("owners %q, want %q", log.owners(space.Len()), assigned)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("two members worked on one slot at once:\n%s", log.overlaps)
	}
}

// b that are assigned to it while the others still drain, not after its drain.
func TestHolderTakesSlotsWhileItDrains(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	space := mustSpace(t, 12)
	log := newWorkLog()
	timings := testTimings
	start := func(identity string, drained <-chan struct{}) func() {
		_, stop := testMember{client: client, identity: identity, space: space, memberDuration: 10 * time.Second, timings: timings, log: log, drained: drained}.start(ctx, t)
		return stop
	}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		// Every wait ends on what it waits for; the minute only bounds a failure.
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return done(), nil
		}); err != nil {
			t.Fatalf("%s: owners %q, draining %q", what, log.owners(space.Len()), log.drainers(space.Len()))
		}
	}
	owners := func(want []string) func() bool {
		return func() bool { return slices.Equal(log.owners(space.Len()), want) }
	}
	// moved is the slots that before gives to from and after to to.
	moved := func(before, after []string, from, to string) []int {
		var slots []int
		for slot := range after {
			if before[slot] == from && after[slot] == to {
				slots = append(slots, slot)
			}
		}
		return slots
	}
	// allOf tells whether who is the entry of each of slots in what read returns.
	allOf := func(slots []int, who string, read func(n int) []string) func() bool {
		return func() bool {
			entries := read(space.Len())
			return !slices.ContainsFunc(slots, func(slot int) bool { return entries[slot] != who })
		}
	}
	drained := make(chan struct{})
	endDrain := sync.OnceFunc(func() { close(drained) })
	start("a", drained)
	// Before a is stopped at the end, whatever ended the test.
	t.Cleanup(endDrain)
	stopB := start("b", nil)
	ab, abc := space.Assign([]string{"a", "b"}), space.Assign([]string{"a", "b", "c"})
	waitFor("a and b share the slots", owners(ab))

	// c joins: a and b hand it slots, and a's drain until the test ends it.
	start("c", nil)
	aHands := moved(ab, abc, "a", "c")
	if len(aHands) == 0 {
		t.Fatal("the assignment has a hand c none of its slots; choose other identities")
	}
	waitFor(fmt.Sprintf("a drains the slots %v it hands to c", aHands), allOf(aHands, "a", log.drainers))
	handing := time.Now()
	// b leaves meanwhile; its slots go to a and c.
	stopB()
	ac := space.Assign([]string{"a", "c"})
	aGains := moved(abc, ac, "b", "a")
	if len(aGains) == 0 {
		t.Fatal("the assignment gives a none of b's slots; choose other identities")
	}
	// The drain lasts until endDrain: a must take b's slots with it still going.
	waitFor(fmt.Sprintf("a to take b's slots %v while it drains others", aGains), allOf(aGains, "a", log.owners))
	t.Logf("a took b's slots %v %v after b left, while it drained %v", aGains, time.Since(handing).Round(time.Millisecond), aHands)
	endDrain()
	waitFor("a and c share the slots once a's drain is over", owners(ac))
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("two members worked on one slot at once:\n%s", log.overlaps)
	}
}

// TestHolderWithdrawsAfterDraining stops a member whose work takes seconds to drain:
// its member Lease stays until every slot has drained, so that no other member, nor
// one with another count of slots, sees it gone while its slots still work.
func TestHolderWithdrawsAfterDraining(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	space := mustSpace(t, 4)
	log := newWorkLog()
	timings := testTimings
	const drain = 2 * time.Second
	_, stop := testMember{client: client, identity: "a", space: space, memberDuration: 10 * time.Second, timings: timings, log: log, drain: drain}.start(ctx, t)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !slices.Contains(log.owners(space.Len()), ""), nil
	}); err != nil {
		t.Fatalf("a never worked on every slot: owners %q", log.owners(space.Len()))
	}
	member := func() bool {
		_, err := client.CoordinationV1().Leases(testNamespace).Get(ctx, LeaseName(testGroup, "a"), metav1.GetOptions{})
		return err == nil
	}
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	for {
		select {
		case <-stopped:
			if member() {
				t.Error("a's member Lease is still there after it stopped")
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if !member() && slices.ContainsFunc(log.owners(space.Len()), func(o string) bool { return o != "" }) {
			t.Fatalf("a's member Lease is gone while its slots still drain: owners %q", log.owners(space.Len()))
		}
	}
}

// TestHolderStopsWhenToldNotToAct has a member acting on every slot when an older
// member that divides the Foos into another number of slots appears: the member stops
// its slots, since the other's would cover the same Foos, and takes them up again once
// that member is gone.
func TestHolderStopsWhenToldNotToAct(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	space := mustSpace(t, 4)
	log := newWorkLog()
	timings := testTimings
	testMember{client: client, identity: "a", space: space, memberDuration: 10 * time.Second, timings: timings, log: log}.start(ctx, t)
	waitFor := func(what string, done func([]string) bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return done(log.owners(space.Len())), nil
		}); err != nil {
			t.Fatalf("%s: owners %q", what, log.owners(space.Len()))
		}
	}
	waitFor("a works on every slot", func(owners []string) bool { return !slices.Contains(owners, "") })

	// An older member with 8 slots, as during a rollout back to another count.
	now := metav1.NewMicroTime(time.Now())
	older := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName(testGroup, "old"), Namespace: testNamespace,
			Labels: map[string]string{MemberOfLabel: testGroup}, Annotations: map[string]string{SlotsAnnotation: "8"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("old"), LeaseDurationSeconds: ptr.To[int32](30),
			AcquireTime: ptr.To(metav1.NewMicroTime(now.Add(-time.Hour))), RenewTime: &now,
		},
	}
	if _, err := client.CoordinationV1().Leases(testNamespace).Create(ctx, older, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a stops every slot", func(owners []string) bool {
		return !slices.ContainsFunc(owners, func(o string) bool { return o != "" })
	})
	if err := client.CoordinationV1().Leases(testNamespace).Delete(ctx, older.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a works on every slot once the older member is gone", func(owners []string) bool { return !slices.Contains(owners, "") })
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("two members worked on one slot at once:\n%s", log.overlaps)
	}
}

// rangeLog records the hash ranges members work on, slots of any count, and any two
// members' ranges that overlap.
type rangeLog struct {
	mu       sync.Mutex
	active   map[string][2]int // by member and slot: the slot and its count
	started  map[string]int    // works started, by member
	overlaps []string
}

func (r *rangeLog) work(identity string, n int) func(ctx context.Context, slot int) error {
	return func(ctx context.Context, slot int) error {
		key := fmt.Sprintf("%s/%d", identity, slot)
		r.mu.Lock()
		for other, s := range r.active {
			// Slot i of n is the hashes [i/n, (i+1)/n).
			if !strings.HasPrefix(other, identity+"/") && slot*s[1] < (s[0]+1)*n && s[0]*n < (slot+1)*s[1] {
				r.overlaps = append(r.overlaps, fmt.Sprintf("%s (slot %d of %d) started while %s (slot %d of %d) worked", key, slot, n, other, s[0], s[1]))
			}
		}
		r.active[key] = [2]int{slot, n}
		r.started[identity]++
		r.mu.Unlock()
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		r.mu.Lock()
		delete(r.active, key)
		r.mu.Unlock()
		return nil
	}
}

// skewedClock is the real clock read off by an offset, which a test may change.
type skewedClock struct {
	clock.RealClock
	offset atomic.Int64
}

func (c *skewedClock) Now() time.Time                  { return c.RealClock.Now().Add(time.Duration(c.offset.Load())) }
func (c *skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestHolderCountsNeverOverlap runs two members that divide the Foos into 4 and 8 slots,
// and whose views of the membership disagree: a's clock runs a minute ahead, so b's
// member Lease looks expired to it and a goes on acting, while b, to itself the oldest
// live member, believes it should act too. Slot 2 of 4 and slots 4 and 5 of 8 are one
// hash range: whatever each member believes, no two ever work on one range at once.
// Once the clocks agree, a stops, and b sets the group's number of slots to its own and
// works on every slot.
func TestHolderCountsNeverOverlap(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	log := &rangeLog{active: map[string][2]int{}, started: map[string]int{}}
	timings := election.Lease{Duration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	ahead := &skewedClock{}
	ahead.offset.Store(int64(time.Minute))
	member := func(identity string, n int, clk clock.WithDelayedExecution) testMember {
		return testMember{client: client, identity: identity, space: mustSpace(t, n), memberDuration: 2 * time.Second,
			timings: timings, clock: clk, work: log.work(identity, n)}
	}
	waitActive := func(what string, want func(active map[string][2]int) bool) {
		t.Helper()
		// The bound only ends a failure.
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			log.mu.Lock()
			defer log.mu.Unlock()
			return want(log.active), nil
		})
		if err != nil {
			log.mu.Lock()
			defer log.mu.Unlock()
			t.Fatalf("%s: working %v", what, log.active)
		}
	}
	only := func(identity string, n int) func(map[string][2]int) bool {
		return func(active map[string][2]int) bool {
			for slot := range n {
				if _, ok := active[fmt.Sprintf("%s/%d", identity, slot)]; !ok {
					return false
				}
			}
			return len(active) == n
		}
	}

	member("a", 4, ahead).start(ctx, t)
	waitActive("a works on its 4 slots", only("a", 4))
	// b's own member Lease must not lapse while a loaded machine holds up a renewal:
	// with it lapsed, b sees only a, the oldest then, and stops. To a, a minute ahead,
	// it looks expired all the same.
	mb := member("b", 8, nil)
	mb.memberDuration = 10 * time.Second
	b, _ := mb.start(ctx, t)
	// b believes it should act, and waits for a's Leases. Longer than the Lease
	// duration b waits before it acts on a Lease it had to create: without the count
	// Lease it would take slots 4 to 7 of 8, a's slots 2 and 3 of 4, by then.
	time.Sleep(2*timings.Duration + time.Second)
	if members, act := b.Membership.Live(); !act {
		t.Errorf("b does not believe it should act (its view: %v): the test shows nothing", members)
	}
	log.mu.Lock()
	t.Logf("works started while the views disagreed: %v", log.started)
	log.mu.Unlock()

	ahead.offset.Store(0)
	waitActive("b works alone on its 8 slots once the clocks agree", only("b", 8))
	if count, err := client.CoordinationV1().Leases(testNamespace).Get(ctx, CountLeaseName(testGroup), metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if got := count.Annotations[SlotsAnnotation]; got != "8" {
		t.Errorf("the count Lease names %q slots, want 8", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("members of two counts worked on one hash range at once:\n%s", strings.Join(log.overlaps, "\n"))
	}
}

// withResourceVersions has client's Lease creates and updates number the Leases'
// resourceVersions and refuse an update from a stale one, as the apiserver does; a fake
// clientset keeps whatever it is given.
func withResourceVersions(client *fake.Clientset) {
	fakeapiserver.Versioned(client, coordinationv1.SchemeGroupVersion.WithResource("leases"))
}

// tenureLog records, every few milliseconds, which members' works could write: those
// whose tenure (carried by the work's context) is valid. Two members whose works could
// write over one hash range at once are an overlap.
type tenureLog struct {
	mu       sync.Mutex
	valid    map[string][2]int // by member and slot: the slot and its count
	overlaps []string
}

func (l *tenureLog) work(identity string, n int) func(ctx context.Context, slot int) error {
	return func(ctx context.Context, slot int) error {
		key := fmt.Sprintf("%s/%d", identity, slot)
		t := tenure.FromContext(ctx)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			l.mu.Lock()
			if t.Valid() {
				for other, s := range l.valid {
					if !strings.HasPrefix(other, identity+"/") && slot*s[1] < (s[0]+1)*n && s[0]*n < (slot+1)*s[1] {
						l.overlaps = append(l.overlaps, fmt.Sprintf("%s (slot %d of %d) could write while %s (slot %d of %d) could", key, slot, n, other, s[0], s[1]))
					}
				}
				l.valid[key] = [2]int{slot, n}
			} else {
				delete(l.valid, key)
			}
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				l.mu.Lock()
				delete(l.valid, key)
				l.mu.Unlock()
				return nil
			case <-tick.C:
			}
		}
	}
}

// TestHolderFencesAFrozenHolderOfAnotherCount freezes member a, of 4 slots, while it
// works: its requests hang, as a process stopped by SIGSTOP sends none, and its
// membership's clock stops. Member b, of 8, sees a's member Lease and then its slot
// Leases expire, sets the count to 8, fences a's Leases and acts. When a thaws, its
// hung renewals go through and fail on the fences, and no two members could write on
// one hash range at once (each work checks its tenure every 5 ms). The renewal that
// hangs here was sent inside client-go's renew deadline, which then gives up on it
// whatever the fences; a process frozen between two renewals would renew at once when
// thawed, which only the fences stop. The fault case TestPausedHolderOfAnotherCount
// freezes a real process.
func TestHolderFencesAFrozenHolderOfAnotherCount(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	aClient := fake.NewClientset()
	aClient.ReactionChain = slices.Clone(client.ReactionChain)
	aClient.WatchReactionChain = slices.Clone(client.WatchReactionChain)
	var frozen atomic.Bool
	thawed := make(chan struct{})
	thaw := sync.OnceFunc(func() { close(thawed) })
	// Before a is stopped, whatever ended the test: a frozen request would hold its
	// stop for good.
	t.Cleanup(thaw)
	aClient.PrependReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		if frozen.Load() {
			<-thawed
		}
		return false, nil, nil
	})

	log := &tenureLog{valid: map[string][2]int{}}
	timings := election.Lease{Duration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	var lost atomic.Int32
	member := func(identity string, client kubernetes.Interface, n int, clk clock.WithDelayedExecution, onLost func(int)) testMember {
		return testMember{client: client, identity: identity, space: mustSpace(t, n), memberDuration: 2 * time.Second,
			timings: timings, work: log.work(identity, n), onLost: onLost, clock: clk}
	}
	// a's goroutines that make no request go on running; its membership's clock stops
	// with it, so that they do not see its own member Lease lapse and stop its slots.
	aClock := &skewedClock{}
	freeze := func() {
		aClock.offset.Store(0)
		frozenAt := time.Now()
		frozen.Store(true)
		go func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for frozen.Load() {
				aClock.offset.Store(int64(-time.Since(frozenAt)))
				<-tick.C
			}
			aClock.offset.Store(0)
		}()
	}
	valid := func(identity string, n int) func() bool {
		return func() bool {
			log.mu.Lock()
			defer log.mu.Unlock()
			for slot := range n {
				if _, ok := log.valid[fmt.Sprintf("%s/%d", identity, slot)]; !ok {
					return false
				}
			}
			return len(log.valid) == n
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		// The bound only ends a failure: a machine busy compiling starves these
		// goroutines for many seconds.
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			log.mu.Lock()
			defer log.mu.Unlock()
			t.Fatalf("%s: valid %v", what, log.valid)
		}
	}

	member("a", aClient, 4, aClock, func(int) { lost.Add(1) }).start(ctx, t)
	waitFor("a works on its 4 slots", valid("a", 4))
	freeze()
	// b's own member Lease must not lapse while a loaded machine holds up a renewal:
	// renewed after a lapse it would make b younger than a, once a is back, and hand
	// the group to a's count. a's short one lets b act soon after the freeze.
	b := member("b", client, 8, nil, nil)
	b.memberDuration = 10 * time.Second
	b.start(ctx, t)
	waitFor("b works on its 8 slots", valid("b", 8))
	thaw()
	frozen.Store(false)
	// For two seconds after the thaw, a must not act on any slot, checked as often as
	// the works check their tenures. b's own slots may blink meanwhile, when a loaded
	// machine delays a renewal past its tenure, so b is waited for after.
	var aActed string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && aActed == ""; time.Sleep(5 * time.Millisecond) {
		log.mu.Lock()
		for key := range log.valid {
			if strings.HasPrefix(key, "a/") {
				aActed = key
			}
		}
		log.mu.Unlock()
	}
	if aActed != "" {
		t.Errorf("a, thawed, could act on %s", aActed)
	}
	waitFor("b works on its 8 slots alone after a thawed", valid("b", 8))
	t.Logf("a, thawed, reported %d slots lost", lost.Load())
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("members of two counts could write on one hash range at once:\n%s", strings.Join(log.overlaps[:min(len(log.overlaps), 5)], "\n"))
	}
}

// TestHolderFencesLeftoverLeases: Leases a group left behind when it changed its number
// of slots (the single leader's, released when the group went sharded; an old count's
// slot Lease, emptied) cannot tell a member that starts how long they have been free,
// so it waits a Lease duration from its first look. The first member of the new count
// to act fences them for its count, so that members started after it, and every
// restart, act without that wait.
func TestHolderFencesLeftoverLeases(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	leftovers := []string{testGroup, SlotLeaseName(testGroup, 1, 4)}
	for _, name := range leftovers {
		_, err := client.CoordinationV1().Leases(testNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace,
				Annotations: map[string]string{election.ReleasedByAnnotation: "gone uid"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	log := &workLog{active: map[int]string{}, draining: map[int]string{}}
	member := func(identity string) testMember {
		return testMember{client: client, identity: identity, space: mustSpace(t, 8), memberDuration: 10 * time.Second, timings: testTimings, log: log}
	}
	acting := func(what string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			log.mu.Lock()
			defer log.mu.Unlock()
			return len(log.active) == 8, nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	began := time.Now()
	_, stop := member("a").start(ctx, t)
	acting("a acts on the 8 slots")
	t.Logf("a acted %v after it started, having waited for the leftovers", time.Since(began).Round(time.Millisecond))
	for _, name := range leftovers {
		l, err := client.CoordinationV1().Leases(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != FenceHolder(8) {
			t.Errorf("the leftover Lease %s holds %q once a member of 8 acts, want it fenced for 8 (%s)", name, h, FenceHolder(8))
		}
	}
	stop()

	// A restart: a new process, whose observer has seen nothing, finds the leftovers
	// fenced for its count and holding nothing.
	o := newObserver(client, election.Lease{Namespace: testNamespace, Name: testGroup, Identity: "b"}, clock.RealClock{})
	list, err := client.CoordinationV1().Leases(testNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		o.saw(&list.Items[i])
	}
	if others := o.othersHeld(list.Items, 8); len(others.held) > 0 || len(others.fence) > 0 {
		t.Errorf("a member of 8 that starts after a's fences finds %q held and %d to fence, want nothing", others.held, len(others.fence))
	}
	began = time.Now()
	member("b").start(ctx, t)
	acting("b, started after a, acts on the 8 slots")
	t.Logf("b acted %v after it started", time.Since(began).Round(time.Millisecond))
}
