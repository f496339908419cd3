package slots

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
)

// TestObserverOthersHeld checks which slot Leases of another number of slots keep a
// member of 8 slots from acting, by its observer's count.
func TestObserverOthersHeld(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	o := newObserver(fake.NewClientset(), election.Lease{Namespace: testNamespace, Name: testGroup, Identity: "me"}, clk)
	lease := func(name, holder string, renewed time.Time) coordinationv1.Lease {
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: testNamespace, ResourceVersion: fakeapiserver.NextResourceVersion(),
				Labels: map[string]string{SlotOfLabel: testGroup},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](10),
				RenewTime: ptr.To(metav1.NewMicroTime(renewed)),
			},
		}
	}
	start := clk.Now()
	// A Lease of a version that did not name the count overlaps every slot.
	legacy := lease(testGroup+"-slot-3", "old", start)
	ours := lease(testGroup+"-slot-1-of-8", "peer", start)
	renewedUnseen := lease(testGroup+"-slot-0-of-4", "x", start)
	deleted := lease(testGroup+"-slot-2-of-4", "y", start)
	// Seen held, then released by its holder, as Release writes it; and one seen held,
	// then emptied by another client.
	held := lease(testGroup+"-slot-1-of-4", "z", start)
	held.UID = "uid-1"
	released := *held.DeepCopy()
	released.ResourceVersion, released.Spec.HolderIdentity, released.Spec.LeaseDurationSeconds = fakeapiserver.NextResourceVersion(), ptr.To(""), ptr.To[int32](1)
	released.Annotations = map[string]string{election.ReleasedByAnnotation: "z uid-1"}
	holding := lease(testGroup+"-slot-3-of-4", "w", start)
	emptied := *holding.DeepCopy()
	emptied.ResourceVersion, emptied.Spec.HolderIdentity = fakeapiserver.NextResourceVersion(), ptr.To("")
	for _, l := range []coordinationv1.Lease{legacy, held, released, holding, emptied, ours, renewedUnseen, deleted} {
		o.saw(&l)
	}
	// Renewed since the watch delivered it; deleted while held, 4 s in.
	renewedUnseen.Spec.RenewTime = ptr.To(metav1.NewMicroTime(start.Add(time.Second)))
	renewedUnseen.ResourceVersion = fakeapiserver.NextResourceVersion()
	clk.Step(4 * time.Second)
	o.forget(&deleted)
	listed := []coordinationv1.Lease{legacy, released, emptied, ours, renewedUnseen}

	check := func(when string, want, wantFence []string, wantNext time.Time) {
		t.Helper()
		got := o.othersHeld(listed, 8)
		slices.Sort(got.held)
		var fence []string
		for _, l := range got.fence {
			fence = append(fence, l.Name)
		}
		slices.Sort(fence)
		if !slices.Equal(got.held, want) || !slices.Equal(fence, wantFence) || !got.next.Equal(wantNext) {
			t.Errorf("%s: held %q until %v, to fence %q; want %q until %v, to fence %q",
				when, got.held, got.next.Sub(start), fence, want, wantNext.Sub(start), wantFence)
		}
	}
	// The release stood for its second, and the released Lease is to be fenced, so that
	// a member starting later need not wait for it; the emptied Lease is held for its
	// duration.
	check("at 4 s", []string{testGroup + "-slot-0-of-4", testGroup + "-slot-2-of-4", testGroup + "-slot-3", testGroup + "-slot-3-of-4"},
		[]string{testGroup + "-slot-1-of-4"}, start.Add(10*time.Second))
	// The legacy Lease expires 10 s after it was first seen, and still names its holder:
	// it is to be fenced; so is the emptied one. The deleted one is held 10 s after its deletion was seen,
	// since its holder may have renewed it unseen just before, even once a Lease of
	// the same name is back, released.
	clk.Step(6 * time.Second)
	recreated := lease(testGroup+"-slot-2-of-4", "", clk.Now())
	recreated.UID, recreated.Spec.LeaseDurationSeconds = "uid-2", ptr.To[int32](1)
	recreated.Annotations = map[string]string{election.ReleasedByAnnotation: "y uid-2"}
	o.saw(&recreated)
	listed = append(listed, recreated)
	// The new one's release has stood for its second at 11 s, when the observer looks
	// again, to find the deletion holding it until 14 s.
	free := []string{testGroup + "-slot-1-of-4", testGroup + "-slot-3", testGroup + "-slot-3-of-4"}
	check("at 10 s", []string{testGroup + "-slot-0-of-4", testGroup + "-slot-2-of-4"}, free, start.Add(11*time.Second))
	clk.Step(time.Second)
	check("at 11 s", []string{testGroup + "-slot-0-of-4", testGroup + "-slot-2-of-4"}, free, start.Add(14*time.Second))
	clk.Step(3 * time.Second)
	free = []string{testGroup + "-slot-1-of-4", testGroup + "-slot-2-of-4", testGroup + "-slot-3", testGroup + "-slot-3-of-4"}
	check("at 14 s", []string{testGroup + "-slot-0-of-4"}, free, time.Time{})
	// Once the watch delivers the renewal, it expires a duration after that observation.
	o.saw(&renewedUnseen)
	check("once the renewal was seen", []string{testGroup + "-slot-0-of-4"}, free, start.Add(24*time.Second))
	clk.Step(10 * time.Second)
	// A Lease fenced for 8 slots holds nothing for a member of 8, and needs no fence.
	fenced := lease(testGroup+"-slot-3", FenceHolder(8), clk.Now())
	o.saw(&fenced)
	listed[0] = fenced
	check("at 24 s", nil, []string{testGroup + "-slot-0-of-4", testGroup + "-slot-1-of-4", testGroup + "-slot-2-of-4", testGroup + "-slot-3-of-4"}, time.Time{})
}

// TestObserverFindsTheGroupsLeasesByName has another client remove the slot-of label
// from the single leader's Lease and from a slot Lease of 4 slots, both held: a member
// of 8 must still see them held, in its watch and in its read from the apiserver, or it
// would act beside their holders. A Lease of the namespace that is not the group's is
// none of its business.
func TestObserverFindsTheGroupsLeasesByName(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	now := metav1.NewMicroTime(time.Now())
	for _, name := range []string{testGroup, testGroup + "-slot-1-of-4", "another-controller"} {
		_, err := client.CoordinationV1().Leases(testNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To("holder"), LeaseDurationSeconds: ptr.To[int32](10), RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	o := newObserver(client, election.Lease{Namespace: testNamespace, Name: testGroup, Identity: "me"}, testingclock.NewFakeClock(now.Time))
	go o.run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), o.synced) {
		t.Fatal("the observer never synced")
	}
	want := []string{testGroup, testGroup + "-slot-1-of-4"}
	if got := o.cachedOthersHeld(8); got != len(want) {
		t.Errorf("the watch has %d Leases of another count held, want %d (%q)", got, len(want), want)
	}
	h := &Holder{Space: mustSpace(t, 8), Client: client, Lease: election.Lease{Namespace: testNamespace, Name: testGroup}, observer: o}
	others, err := h.othersHeld(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(others.held)
	if !slices.Equal(others.held, want) {
		t.Errorf("read from the apiserver, the Leases of another count held are %q, want %q", others.held, want)
	}
	if got := o.heldBy("holder"); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("the group's Leases held by their holder are %q, want %q", got, want)
	}
}
