package slots

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	clk := testingclock.NewFakeClock(time.Now())
	const ns, group = "system", "sample-controller"

	a := NewMembership(client, ns, group, "a", 30*time.Second, clk)
	b := NewMembership(client, ns, group, "b", 30*time.Second, clk)
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
		now := metav1.NewMicroTime(clk.Now())
		_, err := client.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName(group, "dead"), Labels: map[string]string{MemberOfLabel: group}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dead"), LeaseDurationSeconds: ptr.To[int32](5), RenewTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
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

	t.Run("a member that leaves withdraws its Lease at once", func(t *testing.T) {
		stopB()
		<-bDone
		waitLive(t, a, "a")
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(group, "b"), metav1.GetOptions{}); err == nil {
			t.Error("b's Lease is still there after it left")
		}
	})

	t.Run("another group's Leases are not members", func(t *testing.T) {
		other := NewMembership(client, ns, "other", "x", 30*time.Second, clk)
		otherCtx, stop := context.WithCancel(ctx)
		defer stop()
		go other.Run(otherCtx)
		waitLive(t, other, "x")
		waitLive(t, a, "a")
	})
}
