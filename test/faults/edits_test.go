//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// TestLeaseEditedByAnotherClient runs two replicas with leader election while Foos
// change, and has another client edit their Lease under the leader, as kubectl or a
// script would: (a) empty the holder, (b) name the standby, (c) lower the duration,
// (d) delete and recreate it (kubectl replace --force), (e) write a release in the
// holder's name, as its own release would read. From the proxies' logs, Events
// included, no two replicas may write in overlapping time, and a replica that takes the
// Lease over writes only once the record it saw last had stood still for the whole
// duration the leader was renewing with: by then the leader's tenure is over by its own
// clock.
func TestLeaseEditedByAnotherClient(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	const lease = "edited"
	const duration = 4 * time.Second
	args := []string{
		"--leader-elect", "--leader-elect-resource-namespace=" + ns, "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=" + duration.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	replicas := []*proxiedController{startProxied(t, ns, args...), startProxied(t, ns, args...)}
	started := slices.Clone(replicas)
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	leader, _ := waitLeaderOf(t, ns, lease, replicas, "")
	var parts []string
	for _, e := range leaseEdits(ns) {
		waitWrites(t, leader, 3)
		standby := "" // the other replica
		for _, c := range replicas {
			if c != leader {
				standby = identityOf(t, c)
			}
		}
		at := time.Now()
		if err := e.change(t.Context(), lease, standby); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		// Two durations: enough for any takeover the edit allows.
		time.Sleep(2 * duration)
		next, _ := waitLeaderOf(t, ns, lease, replicas, "")
		part := fmt.Sprintf("%s: %s kept the Lease", e.name, leader.proxy.Name())
		if next != leader {
			waitWrites(t, next, 1)
			first := firstObjectWriteAfter(next, at)
			part = fmt.Sprintf("%s: %s took the Lease from %s (%s), its first write %.1fs after the edit", e.name, next.proxy.Name(), leader.proxy.Name(), exitOf(leader.process()), first.Sub(at).Seconds())
			if first.Sub(at) < duration {
				t.Errorf("%s: %s wrote %v after the edit, within the duration %v the leader renewed with", e.name, next.proxy.Name(), first.Sub(at), duration)
			}
			// The old leader, out of the running: a fresh standby takes its place.
			others := slices.DeleteFunc(slices.Clone(replicas), func(c *proxiedController) bool { return c == leader })
			fresh := startProxied(t, ns, args...)
			replicas = append(others, fresh)
			started = append(started, fresh)
		}
		parts = append(parts, part)
		leader = next
	}
	waitWrites(t, leader, 3)
	stopLoad()
	foos := <-load
	settled := checkInvariants(t, ns, foos)

	logs := writesOf(started)
	_, overlaps := leadership(logs)
	for _, o := range overlaps {
		t.Errorf("two replicas wrote at once: %v", o)
	}
	fmt.Printf("faults: Lease edited under the leader (%v Lease): %s; %d overlapping writes (Events included); %d Foos converged %.1fs after the load stopped\n",
		duration, strings.Join(parts, "; "), len(overlaps), len(foos), settled.Seconds())
}

// identityOf is the identity c holds Leases under, from its log.
func identityOf(t *testing.T, c *proxiedController) string {
	t.Helper()
	var identity string
	framework.Eventually(t, timeout, "the identity of "+c.proxy.Name(), func(context.Context) (bool, string) {
		log, err := os.ReadFile(c.process().LogPath())
		if err != nil {
			return false, err.Error()
		}
		m := regexp.MustCompile(`"Waiting to become the leader".* identity="([^"]+)"`).FindSubmatch(log)
		if m == nil {
			return false, "no identity in its log"
		}
		identity = string(m[1])
		return true, ""
	})
	return identity
}

// firstObjectWriteAfter is when c first sent a write of a Foo, a Deployment or an
// Event after at; the zero time when it did not.
func firstObjectWriteAfter(c *proxiedController, at time.Time) time.Time {
	for _, w := range ownedWrites(c.proxy.Writes()) {
		if w.Sent.After(at) {
			return w.Sent
		}
	}
	return time.Time{}
}

// leaseEdit is another client's edit of a Lease, given its name and the identity of a
// replica that does not hold it.
type leaseEdit struct {
	name   string
	change func(ctx context.Context, lease, other string) error
}

// leaseEdits are the edits another client makes of a Lease in ns: (a) empty the holder,
// (b) name another replica, (c) lower the duration, (d) delete and recreate it (kubectl
// replace --force), (e) forge a release by its holder: the mark, the UID and the one
// second a release writes, in one merge patch.
func leaseEdits(ns string) []leaseEdit {
	leases := env.Kube.CoordinationV1().Leases(ns)
	// A merge patch, as kubectl patch sends: no resourceVersion, so it lands on whatever
	// renewal came last instead of losing a race with the next one.
	patch := func(spec func(other string) string) func(context.Context, string, string) error {
		return func(ctx context.Context, name, other string) error {
			_, err := leases.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":`+spec(other)+`}`), metav1.PatchOptions{})
			return err
		}
	}
	return []leaseEdit{
		{"empty the holder", patch(func(string) string { return `{"holderIdentity":""}` })},
		{"name another replica", patch(func(other string) string { return fmt.Sprintf(`{"holderIdentity":%q}`, other) })},
		{"lower the duration to 1s", patch(func(string) string { return `{"leaseDurationSeconds":1}` })},
		{"delete and recreate it", func(ctx context.Context, name, _ string) error {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			l.ResourceVersion, l.UID = "", ""
			// A replica that read the Lease missing in between may have created it.
			if _, err = leases.Create(ctx, l, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}},
		{"forge a release by the holder", func(ctx context.Context, name, _ string) error {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"holderIdentity":"","leaseDurationSeconds":1}}`,
				election.ReleasedByAnnotation, ptr.Deref(l.Spec.HolderIdentity, "")+" "+string(l.UID))
			_, err = leases.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}},
	}
}

// TestSlotLeaseEditedByAnotherClient is TestLeaseEditedByAnotherClient for sharded
// mode: two replicas share the slots while Foos change, and another client edits a
// slot Lease under its holder, the five ways. No Foo or Deployment write of a replica
// falls outside its tenure of the Foo's slot, by the proxies' logs.
func TestSlotLeaseEditedByAnotherClient(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	args := shardedArgs(ns)
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	started := []*proxiedController{startProxied(t, ns, args...), startProxied(t, ns, args...)}
	live := slices.Clone(started)
	waitSlotsHeld(t, live)

	var parts []string
	editedAt := map[string]time.Time{}
	// Edit i on slot i.
	for i, e := range leaseEdits(ns) {
		name := slots.SlotLeaseName(shardGroup, i, shardSlots)
		// The holder of the slot, and another replica: the holder of another slot.
		leases, err := env.Kube.CoordinationV1().Leases(ns).List(t.Context(), metav1.ListOptions{LabelSelector: slots.SlotOfLabel + "=" + shardGroup})
		if err != nil {
			t.Fatal(err)
		}
		holder, other := "", ""
		for _, l := range leases.Items {
			if l.Name == name {
				holder = ptr.Deref(l.Spec.HolderIdentity, "")
			}
		}
		for _, l := range leases.Items {
			if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" && h != holder && strings.Contains(l.Name, "-slot-") {
				other = h
			}
		}
		editedAt[name] = time.Now()
		if err := e.change(t.Context(), name, other); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		time.Sleep(2 * shardLease)
		// A replica that saw its slot taken exits, as it must: a fresh one replaces it.
		for j, c := range live {
			select {
			case <-c.process().Exited():
				parts = append(parts, fmt.Sprintf("%s: %s exited (%s)", e.name, c.proxy.Name(), exitOf(c.process())))
				fresh := startProxied(t, ns, args...)
				started = append(started, fresh)
				live[j] = fresh
			default:
			}
		}
		waitSlotsHeld(t, live)
		parts = append(parts, fmt.Sprintf("%s of %s: every slot held again", e.name, name))
	}
	stopLoad()
	names := <-load
	settled := checkInvariants(t, ns, names)
	writes, outside, handOffs := checkTenures(t, env.Sample, ns, started)
	// Another replica's tenure of an edited slot begins only once the holder's must be
	// over: a whole duration after the edit, at least.
	logs := writesOf(started)
	tenures := slotTenures(logs)
	for name, at := range editedAt {
		ts := tenures[name]
		i := slices.IndexFunc(ts, func(te tenure) bool { return !te.start.After(at) && te.end.After(at) })
		if i < 0 || i+1 >= len(ts) || ts[i+1].client == ts[i].client {
			continue
		}
		if next := ts[i+1]; next.start.Sub(at) < shardLease {
			t.Errorf("%s: %s's tenure began %v after the edit, within the duration %v its holder %s renewed with", name, next.client, next.start.Sub(at), shardLease, ts[i].client)
		} else {
			parts = append(parts, fmt.Sprintf("%s taken over %.1fs after the edit", name, next.start.Sub(at).Seconds()))
		}
	}
	fmt.Printf("faults: slot Leases edited under their holders (Leases of %v): %s; %d slot hand-offs; %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		shardLease, strings.Join(parts, "; "), handOffs, writes, outside, len(names), settled.Seconds())
}
