//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// pauseLease is the Leases' duration in the pause cases, the sharded cases' own; the
// replica is frozen for twice as long.
const pauseLease = shardLease

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
	sent, landed := writesBetween(leader, thawed, time.Now().Add(time.Hour))
	if landed > 0 {
		t.Errorf("the thawed leader made %d successful writes after the thaw, want none", landed)
	}
	fmt.Printf("faults: leader frozen for %v (Leases of %v) while Foos changed, then thawed: it held back %d writes by its log and took the apiserver for unreachable %d times, %d reached the apiserver after the thaw, %d succeeded; it exited %.1fs after the thaw (%s); %d Foos converged %.1fs after the load stopped\n",
		2*pauseLease, pauseLease, heldBack(t, leader), outages(t, leader), sent, landed, exited.Seconds(), exitOf(leader.process()), len(names), settled.Seconds())
}

// TestPausedSlotHolder is TestPausedLeader for sharded mode: one of two replicas is
// frozen right after a burst of new Foos filled its queues, and thawed once the other
// holds every slot and has written.
func TestPausedSlotHolder(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	args := shardedArgs(ns)
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
	// It exits when it reads a slot's Lease held by the other while the slot's work
	// runs; when the work drained first, every write held back, it stays, rejoins as a
	// new member and takes slots again, each with a new tenure that begins with a
	// successful write of the slot's Lease. Its slots-held gauge is no sign of that: it
	// still counts the old tenures for a moment after the thaw.
	framework.Eventually(t, timeout, "the thawed replica to exit or take a slot again", func(context.Context) (bool, string) {
		select {
		case <-frozen.process().Exited():
			return true, ""
		default:
		}
		return firstSlotLeaseWrite(frozen, thawed).Before(time.Now()), "no slot Lease written since the thaw"
	})
	rejoined := firstSlotLeaseWrite(frozen, thawed)

	stopLoad()
	names := append(<-load, burst...)
	settled := checkInvariants(t, ns, names)
	sent, landed := writesBetween(frozen, thawed, rejoined)
	if landed > 0 {
		t.Errorf("the thawed replica made %d successful writes after the thaw, before it took a slot again, want none", landed)
	}
	writes, outside, handOffs := checkTenures(t, env.Sample, ns, replicas)
	after := fmt.Sprintf("it took a slot again %.1fs after the thaw", rejoined.Sub(thawed).Seconds())
	select {
	case <-frozen.process().Exited():
		after = exitOf(frozen.process())
	default:
	}
	fmt.Printf("faults: sharded replica frozen for %v (Leases of %v) after a burst of %d Foos, then thawed: it held back %d writes by its log and took the apiserver for unreachable %d times, %d reached the apiserver after the thaw before any new tenure, %d succeeded; then %s; %d slot hand-offs, %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		2*pauseLease, pauseLease, len(burst), heldBack(t, frozen), outages(t, frozen), sent, landed, after, handOffs, writes, outside, len(names), settled.Seconds())
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

// waitExit waits for c, a leader, to exit after it was thawed, as it does once it
// learns that it lost its Lease or its work has returned, and returns how long that
// took.
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

// heldBack counts the writes c's current process says it held back, the tenure being
// over: what it tried, where the proxy shows what reached the apiserver.
func heldBack(t *testing.T, c *proxiedController) int {
	return logCount(t, c, "A write was held back")
}

// outages counts the times c's current process took the API server for unreachable
// and held its requests: none in these cases, where the apiserver stays up, unless a
// connection died while the process was frozen.
func outages(t *testing.T, c *proxiedController) int {
	return logCount(t, c, "The API server cannot be reached")
}

// logCount counts the lines of c's current process's log that hold text.
func logCount(t *testing.T, c *proxiedController, text string) int {
	t.Helper()
	log, err := os.ReadFile(c.process().LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(log), text)
}

// writesBetween counts c's writes other than of Leases that its proxy received from
// from until until, and those of them that succeeded. A paused process sends nothing,
// so everything received after the thaw was sent after it.
func writesBetween(c *proxiedController, from, until time.Time) (sent, succeeded int) {
	for _, w := range c.proxy.Writes() {
		if w.Resource == "leases" || w.Received.Before(from) || !w.Received.Before(until) {
			continue
		}
		sent++
		if w.Code < 300 {
			succeeded++
		}
	}
	return sent, succeeded
}

// firstSlotLeaseWrite is when c's proxy received the first successful write of a slot
// Lease by c after at: the start of a new tenure. It is an hour from now if there was
// none.
func firstSlotLeaseWrite(c *proxiedController, at time.Time) time.Time {
	first := time.Now().Add(time.Hour)
	for _, w := range c.proxy.Writes() {
		if w.Resource == "leases" && strings.HasPrefix(w.Name, shardGroup+"-slot-") && w.Code < 300 && w.Received.After(at) && w.Received.Before(first) {
			first = w.Received
		}
	}
	return first
}

// createBurst creates n Foos at once and returns their names, with a client of its own
// that the shared client's rate limit does not slow, nor it the others'.
func createBurst(t *testing.T, ns string, n int) []string {
	t.Helper()
	cfg := env.Cluster.RESTConfig()
	cfg.QPS = -1
	sample, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = fmt.Sprintf("burst-%03d", i)
		wg.Go(func() {
			foo := &samplev1alpha1.Foo{
				ObjectMeta: metav1.ObjectMeta{Name: names[i]},
				Spec:       samplev1alpha1.FooSpec{DeploymentName: names[i], Replicas: ptr.To[int32](1)},
			}
			if _, err := sample.SamplecontrollerV1alpha1().Foos(ns).Create(t.Context(), foo, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating Foo %s: %v", names[i], err)
			}
		})
	}
	wg.Wait()
	return names
}

// TestShardedRestartInPlace kills a sharded replica that runs as a Pod would (its
// identity from POD_NAME and POD_UID) and starts it again at once, as the kubelet
// restarts a crashed container: it takes back its own member Lease and slots, and
// the other replica takes over none of them.
func TestShardedRestartInPlace(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	args := shardedArgs(ns)
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	pod := newProxied(t, ns, args...)
	pod.env = []string{"POD_NAME=sample-controller-7d4b9-q2x8z", "POD_UID=" + string(uuid.NewUUID())}
	pod.start(t)
	other := startProxied(t, ns, args...)
	replicas := []*proxiedController{pod, other}
	waitSlotsHeld(t, replicas)
	acquisitions := func(c *proxiedController) float64 {
		m, err := c.process().Metrics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("sample_controller_slot_acquisitions_total", nil)
	}
	before := acquisitions(other)

	killed := time.Now()
	_ = pod.process().Kill()
	pod.start(t)
	waitSlotsHeld(t, replicas)
	heldAgain := time.Since(killed)
	// Long enough for a ghost member's Lease to expire and its slots to move back.
	time.Sleep(2 * pauseLease)
	waitSlotsHeld(t, replicas)
	took, retook := acquisitions(other)-before, acquisitions(pod)

	stopLoad()
	names := <-load
	settled := checkInvariants(t, ns, names)
	if took != 0 {
		t.Errorf("the other replica took %v slots over while the restarted one came back, want none", took)
	}
	if share := float64(shardSlots) / 2; retook != share {
		t.Errorf("the restarted replica took %v slots, want its %v once each", retook, share)
	}
	_, outside, _ := checkTenures(t, env.Sample, ns, replicas)
	fmt.Printf("faults: sharded replica SIGKILLed and restarted in place (Leases of %v): its slots held again %.1fs after the kill; the other replica took %v slots, the restarted one %v; %d writes outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		pauseLease, heldAgain.Seconds(), took, retook, outside, len(names), settled.Seconds())
}
