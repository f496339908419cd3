//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-e6610ed6/sample-controller/pkg/localcluster"
	"github.com/seed-e6610ed6/sample-controller/pkg/slots"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

const (
	shardSlots = 8
	// shardGroup is the Leases' name prefix: the default --leader-elect-resource-name.
	shardGroup = "sample-controller"
	// shardLease is the Leases' duration in this case: short, so that a killed
	// replica's slots come back quickly.
	shardLease = 4 * time.Second
)

// TestShardedHandOffs scales sharded replicas 1 -> 3 -> 1 -> 3 and SIGKILLs one of
// three, while Foos are created and scaled. Every Foo ends as it should, and no Foo
// or Deployment write of a replica falls outside its tenure of the Foo's slot: from
// the answer to its first write of the slot's Lease to the next holder's first write
// of it. The tenures come from the same proxies' logs as the writes, not from the
// controllers' own.
func TestShardedHandOffs(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	args := []string{
		"--shard-slots=" + strconv.Itoa(shardSlots), "--leader-elect-resource-namespace=" + ns,
		"--leader-elect-lease-duration=" + shardLease.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)

	first := startProxied(t, ns, args...)
	started := []*proxiedController{first}
	live := []*proxiedController{first}
	grow := func() {
		for range 2 {
			c := startProxied(t, ns, args...)
			started = append(started, c)
			live = append(live, c)
		}
	}
	waitWrites(t, first, 3)

	grow() // 1 -> 3
	waitSlotsHeld(t, live)
	for _, c := range live[1:] { // 3 -> 1
		if err := c.process().Stop(localcluster.ControllerStopGrace); err != nil {
			t.Errorf("a sharded replica exited with %v after SIGTERM", err)
		}
	}
	live = live[:1]
	waitSlotsHeld(t, live)
	grow() // 1 -> 3
	waitSlotsHeld(t, live)
	waitWrites(t, live[1], 1)
	killed := live[1]
	at := time.Now()
	_ = killed.process().Kill()
	live = slices.DeleteFunc(live, func(c *proxiedController) bool { return c == killed })
	waitSlotsHeld(t, live)
	heldAgain := time.Since(at)

	stopLoad()
	names := <-load
	settled := checkInvariants(t, ns, names)

	space, err := slots.NewSpace(shardSlots)
	if err != nil {
		t.Fatal(err)
	}
	foos, err := env.Sample.SamplecontrollerV1alpha1().Foos(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slotOf := map[string]int{}
	for _, foo := range foos.Items {
		// Each Foo's Deployment has the Foo's name.
		slotOf[foo.Name] = space.Of(foo.UID)
	}
	var logs [][]localcluster.APIWrite
	for _, c := range started {
		logs = append(logs, c.proxy.Writes())
	}
	tenures := slotTenures(logs)
	writes, outside := 0, 0
	for _, log := range logs {
		for _, w := range objectWrites(log) {
			slot, ok := slotOf[w.Name]
			if !ok {
				continue
			}
			writes++
			if !slices.ContainsFunc(tenures[slot], func(te tenure) bool { return te.covers(w) }) {
				outside++
				t.Errorf("a write outside its replica's tenure of slot %d: %v (tenures %v)", slot, w, tenures[slot])
			}
		}
	}
	handOffs := 0
	for _, ts := range tenures {
		handOffs += len(ts) - 1
	}
	fmt.Printf("faults: sharded 1->3->1->3 and SIGKILL of 1 of 3 (%d slots, Leases of %v): slots held again %.1fs after the SIGKILL; %d slot hand-offs; %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		shardSlots, shardLease, heldAgain.Seconds(), handOffs, writes, outside, len(names), settled.Seconds())
}

// waitSlotsHeld waits until the live replicas hold every slot between them, each its
// share give or take one.
func waitSlotsHeld(t *testing.T, live []*proxiedController) {
	t.Helper()
	framework.Eventually(t, timeout, fmt.Sprintf("%d replicas to hold the %d slots", len(live), shardSlots), func(ctx context.Context) (bool, string) {
		var held []float64
		total := 0.0
		for _, c := range live {
			m, err := c.process().Metrics(ctx)
			if err != nil {
				return false, err.Error()
			}
			n := m.Sum("sample_controller_slots_held", nil)
			held = append(held, n)
			total += n
		}
		share := float64(shardSlots) / float64(len(live))
		balanced := !slices.ContainsFunc(held, func(n float64) bool { return n < share-1 || n > share+1 })
		return total == shardSlots && balanced, fmt.Sprintf("slots held %v", held)
	})
}

// tenure is one replica's hold on a slot, as its proxy saw it: from the answer to its
// first write of the slot's Lease until the next holder's first write of it was sent.
type tenure struct {
	client     string
	start, end time.Time
}

func (te tenure) covers(w localcluster.APIWrite) bool {
	return w.Client == te.client && !w.Sent.Before(te.start) && !w.Answered.After(te.end)
}

func (te tenure) String() string {
	return fmt.Sprintf("%s %s-%s", te.client, te.start.Format("15:04:05.000"), te.end.Format("15:04:05.000"))
}

// slotTenures reads the replicas' successful writes of the slot Leases, in the order
// they were sent: only the holder renews or releases a Lease, and only a successful
// write takes it, so each run of one replica's writes is one tenure.
func slotTenures(logs [][]localcluster.APIWrite) map[int][]tenure {
	bySlot := map[int][]localcluster.APIWrite{}
	for _, log := range logs {
		for _, w := range log {
			rest, ok := strings.CutPrefix(w.Name, shardGroup+"-slot-")
			slot, err := strconv.Atoi(rest)
			if w.Resource != "leases" || !ok || err != nil || w.Code >= 300 {
				continue
			}
			bySlot[slot] = append(bySlot[slot], w)
		}
	}
	tenures := map[int][]tenure{}
	for slot, writes := range bySlot {
		slices.SortFunc(writes, func(a, b localcluster.APIWrite) int { return a.Sent.Compare(b.Sent) })
		var ts []tenure
		for _, w := range writes {
			if len(ts) > 0 && ts[len(ts)-1].client == w.Client {
				continue
			}
			if len(ts) > 0 {
				ts[len(ts)-1].end = w.Sent
			}
			ts = append(ts, tenure{client: w.Client, start: w.Answered, end: time.Now().Add(time.Hour)})
		}
		tenures[slot] = ts
	}
	return tenures
}
