//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// pauseLease is the Leases' duration in the pause cases; the replica is frozen for
// twice as long.
const pauseLease = 4 * time.Second

// TestPausedLeader freezes the leader of two replicas (SIGSTOP, as a GC pause, a
// stopped VM or a swapping node would) for twice its Lease while Foos are created and
// scaled, until the standby leads and has written; then thaws it while more Foos
// change. The thawed replica believes for a moment that it still leads, and its
// workers take items from its queue: not one of its writes may reach the apiserver
// and succeed after the thaw, whatever the elector believes. Its proxy, not its log,
// says what it wrote.
func TestPausedLeader(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	const lease = "paused-leader"
	args := []string{
		"--leader-elect", "--leader-elect-resource-namespace=" + ns, "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=" + pauseLease.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	replicas := []*proxiedController{startProxied(t, ns, args...), startProxied(t, ns, args...)}
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	leader, holder := waitLeaderOf(t, ns, lease, replicas, "")
	waitWrites(t, leader, 3)

	thawed := freezeWhileOthersWrite(t, leader, func() *proxiedController {
		others := slices.DeleteFunc(slices.Clone(replicas), func(c *proxiedController) bool { return c == leader })
		next, _ := waitLeaderOf(t, ns, lease, others, holder)
		return next
	})
	exited := waitExit(t, leader, thawed)

	stopLoad()
	names := <-load
	settled := checkInvariants(t, ns, names)
	sent, landed := writesAfter(leader, thawed)
	if landed > 0 {
		t.Errorf("the thawed leader made %d successful writes after the thaw, want none", landed)
	}
	fmt.Printf("faults: leader frozen for %v (Leases of %v) while Foos changed, then thawed: %d writes reached the apiserver after the thaw, %d succeeded; it exited %.1fs after the thaw (%s); %d Foos converged %.1fs after the load stopped\n",
		2*pauseLease, pauseLease, sent, landed, exited.Seconds(), exitOf(leader.process()), len(names), settled.Seconds())
}

// TestPausedSlotHolder is TestPausedLeader for sharded mode: one of two replicas is
// frozen right after a burst of new Foos filled its queues, and thawed once the other
// holds every slot and has written.
func TestPausedSlotHolder(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	args := []string{
		"--shard-slots=" + strconv.Itoa(shardSlots), "--leader-elect-resource-namespace=" + ns,
		"--leader-elect-lease-duration=" + pauseLease.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	replicas := []*proxiedController{startProxied(t, ns, args...), startProxied(t, ns, args...)}
	waitSlotsHeld(t, replicas)
	frozen, other := replicas[0], replicas[1]
	waitWrites(t, frozen, 1)

	// A burst, so that the frozen replica's queues hold work when it stops.
	burst := createBurst(t, ns, 60)
	thawed := freezeWhileOthersWrite(t, frozen, func() *proxiedController {
		waitSlotsHeld(t, []*proxiedController{other})
		return other
	})
	exited := waitExit(t, frozen, thawed)

	stopLoad()
	names := append(<-load, burst...)
	settled := checkInvariants(t, ns, names)
	sent, landed := writesAfter(frozen, thawed)
	if landed > 0 {
		t.Errorf("the thawed replica made %d successful writes after the thaw, want none", landed)
	}
	writes, outside, handOffs := checkTenures(t, env.Sample, ns, replicas)
	fmt.Printf("faults: sharded replica frozen for %v (Leases of %v) after a burst of %d Foos, then thawed: %d writes reached the apiserver after the thaw, %d succeeded; it exited %.1fs after the thaw (%s); %d slot hand-offs, %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		2*pauseLease, pauseLease, len(burst), sent, landed, exited.Seconds(), exitOf(frozen.process()), handOffs, writes, outside, len(names), settled.Seconds())
}

// freezeWhileOthersWrite stops c's process, waits for takeOver to return the replica
// that took its work and for that replica to write, keeps c frozen for twice the
// Lease in all, and thaws it. It returns when c was thawed.
func freezeWhileOthersWrite(t *testing.T, c *proxiedController, takeOver func() *proxiedController) time.Time {
	t.Helper()
	frozenAt := time.Now()
	if err := c.process().Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.process().Resume() })
	next := takeOver()
	waitWrites(t, next, 3)
	time.Sleep(time.Until(frozenAt.Add(2 * pauseLease)))
	if err := c.process().Resume(); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// waitExit waits for c to exit after it was thawed, as it must once it learns that it
// lost its Lease, and returns how long that took.
func waitExit(t *testing.T, c *proxiedController, thawed time.Time) time.Duration {
	t.Helper()
	select {
	case <-c.process().Exited():
		return time.Since(thawed)
	case <-time.After(timeout):
		t.Fatalf("the thawed replica did not exit within %v", timeout)
		return 0
	}
}

// writesAfter counts c's writes other than of Leases that its proxy received after
// at, and those of them that succeeded. A paused process sends nothing, so everything
// received after the thaw was sent after it.
func writesAfter(c *proxiedController, at time.Time) (sent, succeeded int) {
	for _, w := range c.proxy.Writes() {
		if w.Resource == "leases" || w.Received.Before(at) {
			continue
		}
		sent++
		if w.Code < 300 {
			succeeded++
		}
	}
	return sent, succeeded
}

// createBurst creates n Foos at once and returns their names.
func createBurst(t *testing.T, ns string, n int) []string {
	t.Helper()
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = fmt.Sprintf("burst-%03d", i)
		wg.Go(func() {
			foo := &samplev1alpha1.Foo{
				ObjectMeta: metav1.ObjectMeta{Name: names[i]},
				Spec:       samplev1alpha1.FooSpec{DeploymentName: names[i], Replicas: ptr.To[int32](1)},
			}
			if _, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).Create(t.Context(), foo, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating Foo %s: %v", names[i], err)
			}
		})
	}
	wg.Wait()
	return names
}
