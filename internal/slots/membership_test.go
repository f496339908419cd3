package slots

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// waitLive waits for m's view of the live members to be want, each change ending the
// wait being one that Changes announced.
func waitLive(t *testing.T, m *Membership, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if live, ok := m.Live(); ok && slices.Equal(live, want) {
			return
		}
		select {
		case <-m.Changes():
		case <-ctx.Done():
			live, _ := m.Live()
			t.Fatalf("live members %q, want %q", live, want)
		}
	}
}

func TestMembership(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	withResourceVersions(client)
	clk := testingclock.NewFakeClock(time.Now())
	const ns, group = "system", "sample-controller"

	a := NewMembership(client, ns, group, "a", 8, 30*time.Second, clk)
	b := NewMembership(client, ns, group, "b", 8, 30*time.Second, clk)
	aCtx, stopA := context.WithCancel(ctx)
	defer stopA()
	bCtx, stopB := context.WithCancel(ctx)
	bDone := make(chan struct{})
	go a.Run(aCtx)
	go func() {
		b.Run(bCtx)
		close(bDone)
	}()
	waitLive(t, a, "a", "b")
	waitLive(t, b, "a", "b")

	t.Run("a member that stops renewing lapses when its Lease expires", func(t *testing.T) {
		// A replica that died: its Lease stays, renewed no more.
		createMember(t, client, ns, group, "dead", 8, clk.Now(), clk.Now(), 5)
		waitLive(t, a, "a", "b", "dead")
		// The timer at its expiry is the only event that says it lapsed.
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return clk.HasWaiters(), nil
		}); err != nil {
			t.Fatal("no timer armed for the Lease's expiry")
		}
		clk.Step(6 * time.Second)
		waitLive(t, a, "a", "b")
	})

	// advance moves the fake clock on by d, a and b renewing every 5 s of it as they
	// would every third of their duration.
	advance := func(t *testing.T, d time.Duration) {
		t.Helper()
		for ; d > 0; d -= 5 * time.Second {
			clk.Step(min(d, 5*time.Second))
			for _, m := range []*Membership{a, b} {
				if err := m.renew(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	t.Run("a member Lease renewed in the future lapses a duration after it was seen", func(t *testing.T) {
		// Killed while its clock ran an hour ahead, or edited so: by its renewTime it
		// lives for another hour.
		createMember(t, client, ns, group, "ahead", 8, clk.Now(), clk.Now().Add(time.Hour), 30)
		waitLive(t, a, "a", "ahead", "b")
		advance(t, 31*time.Second)
		waitLive(t, a, "a", "b")
	})

	t.Run("a forged oldest member of another count stops the group for a duration at most", func(t *testing.T) {
		name := createMember(t, client, ns, group, "forged", 4, clk.Now().Add(-24*time.Hour), clk.Now().Add(time.Hour), 3600)
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			_, act := a.Live()
			return !act, nil
		}); err != nil {
			t.Fatal("a acts beside an older member that divides the Foos into 4")
		}
		advance(t, 31*time.Second)
		waitLive(t, a, "a", "b")
		if err := client.CoordinationV1().Leases(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLive(t, a, "a", "b")
	})

	t.Run("the Lease of a replica killed without withdrawing it is deleted", func(t *testing.T) {
		name := createMember(t, client, ns, group, "killed", 8, clk.Now(), clk.Now(), 30)
		waitLive(t, a, "a", "b", "killed")
		advance(t, collectAfter*30*time.Second)
		a.collect(ctx)
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Error("the killed replica's Lease, standing still, was never deleted")
		}
		for _, live := range []string{"a", "b"} {
			if _, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(group, live), metav1.GetOptions{}); err != nil {
				t.Errorf("%s's Lease: %v, want it kept", live, err)
			}
		}
	})

	t.Run("a member that leaves withdraws its Lease at once", func(t *testing.T) {
		stopB()
		<-bDone
		waitLive(t, a, "a")
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(group, "b"), metav1.GetOptions{}); err == nil {
			t.Error("b's Lease is still there after it left")
		}
	})

	t.Run("a member dividing the Foos otherwise", func(t *testing.T) {
		// Younger: not a peer. Older: nobody acts until it is gone.
		younger := createMember(t, client, ns, group, "younger", 32, clk.Now(), clk.Now(), 30)
		older := createMember(t, client, ns, group, "older", 32, clk.Now().Add(-time.Hour), clk.Now(), 30)
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			_, act := a.Live()
			return !act, nil
		}); err != nil {
			live, act := a.Live()
			t.Fatalf("with an older member of 32 slots, Live = %q, %v; want no action", live, act)
		}
		for _, l := range []string{older, younger} {
			if err := client.CoordinationV1().Leases(ns).Delete(ctx, l, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if l == older {
				waitLive(t, a, "a")
			}
		}
		waitLive(t, a, "a")
	})

	t.Run("another group's Leases are not members", func(t *testing.T) {
		other := NewMembership(client, ns, "other", "x", 8, 30*time.Second, clk)
		otherCtx, stop := context.WithCancel(ctx)
		defer stop()
		go other.Run(otherCtx)
		waitLive(t, other, "x")
		waitLive(t, a, "a")
	})
}

// createMember writes a member Lease as another replica would have, and returns its name.
func createMember(t *testing.T, client *fake.Clientset, ns, group, identity string, slots int, acquired, renewed time.Time, seconds int32) string {
	t.Helper()
	now, since := metav1.NewMicroTime(renewed), metav1.NewMicroTime(acquired)
	name := LeaseName(group, identity)
	_, err := client.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{MemberOfLabel: group},
			Annotations: map[string]string{SlotsAnnotation: strconv.Itoa(slots)},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseDurationSeconds: ptr.To(seconds), AcquireTime: &since, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestMembershipRenewsItsOwnLease checks what a replica restarted in place under the
// same identity makes of its own member Lease: it keeps its place as a member while the
// Lease is current, and comes back as a new member, not the oldest, once it lapsed. It
// also puts back the label another client removed, without which the members' watches,
// its own included, lose it.
func TestMembershipRenewsItsOwnLease(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const ns, group = "system", "sample-controller"
	now := time.Now()
	for _, tc := range []struct {
		name        string
		renewed     time.Time
		wantAcquire time.Time
	}{
		{"current: keeps when it joined", now.Add(-5 * time.Second), now.Add(-time.Hour)},
		{"lapsed: joins anew", now.Add(-time.Minute), now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			withResourceVersions(client)
			createMember(t, client, ns, group, "a", 8, now.Add(-time.Hour), tc.renewed, 30)
			unlabelled := []byte(`{"metadata":{"labels":null}}`)
			if _, err := client.CoordinationV1().Leases(ns).Patch(ctx, LeaseName(group, "a"), types.MergePatchType, unlabelled, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			m := NewMembership(client, ns, group, "a", 8, 30*time.Second, testingclock.NewFakeClock(now))
			if err := m.renew(ctx); err != nil {
				t.Fatal(err)
			}
			lease, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(group, "a"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := lease.Spec.AcquireTime.Time; !got.Equal(tc.wantAcquire.Truncate(time.Microsecond)) && !got.Equal(tc.wantAcquire) {
				t.Errorf("acquired %v, want %v", got, tc.wantAcquire)
			}
			if got := lease.Labels[MemberOfLabel]; got != group {
				t.Errorf("renewed with the label %s=%q, want %q", MemberOfLabel, got, group)
			}
		})
	}
}
