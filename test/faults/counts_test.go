//go:build faults

package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestShardedCountRollout rolls sharded replicas from 4 slots to 8 and back to 4 while
// Foos are created and scaled, as a Deployment's rolling update with a surge does: the
// new replicas start beside the old ones, then the old ones stop. Another client meddles
// with the member Leases, which decide only who should act: it backdates the 8-slot
// replicas' Leases, so that they look older than the 4-slot ones, which the
// membership then tells to stop; and later it deletes them, so that they come back
// younger than the new 4-slot replicas. The group's count Lease keeps the counts apart
// whatever the members believe: every Foo and Deployment write of one phase is answered
// before the first of the next is sent, and every write falls inside its replica's
// tenure of the Foo's slot of its own count. Every Foo converges.
func TestShardedCountRollout(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	phase := func(n int) []*proxiedController {
		return []*proxiedController{startProxied(t, ns, shardedArgsOf(ns, n)...), startProxied(t, ns, shardedArgsOf(ns, n)...)}
	}
	stop := func(replicas []*proxiedController) {
		for _, c := range replicas {
			if err := c.process().Stop(localcluster.ControllerStopGrace); err != nil {
				t.Errorf("a sharded replica exited with %v after SIGTERM", err)
			}
		}
	}

	four := phase(4)
	waitSlotsHeldOf(t, four, 4)
	waitWrites(t, four[0], 3)

	// 4 -> 8. The new replicas wait while the old ones are the oldest members.
	eight := phase(8)
	time.Sleep(2 * shardLease)
	waitSlotsHeldOf(t, four, 4)
	at := time.Now()
	meddleWithMembers(t, ns, "8", func(leases coordinationclient.LeaseInterface, lease *coordinationv1.Lease) error {
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
		_, err := leases.Update(t.Context(), lease, metav1.UpdateOptions{})
		return err
	})
	waitSlotsHeldOf(t, eight, 8)
	toEight := time.Since(at)
	stop(four)

	// 8 -> 4. The 8-slot replicas' Leases are deleted and come back younger.
	fourAgain := phase(4)
	time.Sleep(2 * shardLease)
	at = time.Now()
	meddleWithMembers(t, ns, "8", func(leases coordinationclient.LeaseInterface, lease *coordinationv1.Lease) error {
		return leases.Delete(t.Context(), lease.Name, metav1.DeleteOptions{})
	})
	waitSlotsHeldOf(t, fourAgain, 4)
	toFour := time.Since(at)
	stop(eight)

	stopLoad()
	names := <-load
	settled := checkInvariants(t, ns, names)

	phases := [][]*proxiedController{four, eight, fourAgain}
	var started []*proxiedController
	for _, p := range phases {
		started = append(started, p...)
	}
	writes, outside, handOffs := checkTenures(t, env.Sample, ns, started)
	var gaps []string
	for i := 1; i < len(phases); i++ {
		lastAnswer, firstSent := phaseBounds(phases[i-1], phases[i])
		gaps = append(gaps, fmt.Sprintf("%.1fs", firstSent.Sub(lastAnswer).Seconds()))
		if !lastAnswer.Before(firstSent) {
			t.Errorf("phase %d (%d slots) was answered until %s, after phase %d (%d slots) first wrote at %s",
				i, phases[i-1][0].slots(), lastAnswer.Format("15:04:05.000"), i+1, phases[i][0].slots(), firstSent.Format("15:04:05.000"))
		}
	}
	fmt.Printf("faults: sharded rollout 4->8->4 slots with member Leases backdated, then deleted: 8 slots held %.1fs after the backdating, 4 again %.1fs after the deletion; from one number's last write to the next's first: %s; %d slot hand-offs; %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		toEight.Seconds(), toFour.Seconds(), strings.Join(gaps, ", "), handOffs, writes, outside, len(names), settled.Seconds())
}

// meddleWithMembers does change, as a client other than the controller, to each member
// Lease in ns of the replicas that divide the Foos into count slots, retrying on a
// conflict with the replica's own renewal.
func meddleWithMembers(t *testing.T, ns, count string, change func(coordinationclient.LeaseInterface, *coordinationv1.Lease) error) {
	t.Helper()
	leases := env.Kube.CoordinationV1().Leases(ns)
	selector := labels.SelectorFromSet(labels.Set{slots.MemberOfLabel: shardGroup}).String()
	list, err := leases.List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, l := range list.Items {
		if l.Annotations[slots.SlotsAnnotation] != count {
			continue
		}
		err := retry.RetryOnConflict(conflictBackoff, func() error {
			lease, err := leases.Get(t.Context(), l.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return change(leases, lease)
		})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		changed++
	}
	if changed == 0 {
		t.Fatalf("no member Lease of %s slots in %s", count, ns)
	}
}

// phaseBounds is the last answer to a Foo or Deployment write of the replicas of one
// phase, and the first such write sent by those of the next.
func phaseBounds(before, after []*proxiedController) (lastAnswer, firstSent time.Time) {
	for _, c := range before {
		for _, w := range objectWrites(c.proxy.Writes()) {
			lastAnswer = later(lastAnswer, w.Answered)
		}
	}
	firstSent = time.Now().Add(time.Hour)
	for _, c := range after {
		for _, w := range objectWrites(c.proxy.Writes()) {
			if w.Sent.Before(firstSent) {
				firstSent = w.Sent
			}
		}
	}
	return lastAnswer, firstSent
}

// TestPausedHolderOfAnotherCount freezes the one replica of 4 slots right after a
// burst of new Foos filled its queues, and while it is frozen starts a replica of 8,
// which sees the frozen one's member Lease and slot Leases expire, sets the group's
// number to 8 and acts. Nobody of the old number takes the frozen replica's Leases
// over; thawed, it would renew them and act beside the new replica, but the new one
// fenced them before it acted: the thawed replica sends no write at all.
func TestPausedHolderOfAnotherCount(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	four := startProxied(t, ns, shardedArgsOf(ns, 4)...)
	waitSlotsHeldOf(t, []*proxiedController{four}, 4)
	waitWrites(t, four, 1)

	burst := createBurst(t, ns, 60)
	var eight *proxiedController
	thawed := freezeWhileOthersWrite(t, four, func() *proxiedController {
		eight = startProxied(t, ns, shardedArgsOf(ns, 8)...)
		waitSlotsHeldOf(t, []*proxiedController{eight}, 8)
		return eight
	})
	// Long enough for its renewals, its watches' news and its queued syncs.
	time.Sleep(2 * pauseLease)
	stopLoad()
	names := append(<-load, burst...)
	settled := checkInvariants(t, ns, names)
	sent, landed := writesBetween(four, thawed, time.Now().Add(time.Hour))
	if sent > 0 {
		t.Errorf("the thawed replica of 4 slots sent %d writes after the thaw (%d succeeded), want none", sent, landed)
	}
	writes, outside, _ := checkTenures(t, env.Sample, ns, []*proxiedController{four, eight})
	after := "it stayed, acting on nothing"
	select {
	case <-four.process().Exited():
		after = exitOf(four.process())
	default:
	}
	fmt.Printf("faults: the replica of 4 slots frozen for %v (Leases of %v) after a burst of %d Foos while one of 8 took over, then thawed: it held back %d writes by its log and took the apiserver for unreachable %d times, %d reached the apiserver after the thaw, %d succeeded; %s; %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		2*pauseLease, pauseLease, len(burst), heldBack(t, four), outages(t, four), sent, landed, after, writes, outside, len(names), settled.Seconds())
}
