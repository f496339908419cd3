//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/apiproxy"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// The replicas' leader election, shorter than artifacts/deploy's so that each
// takeover costs seconds; the renew deadline stays below the lease duration, as
// client-go requires.
var leaderArgs = []string{
	"--leader-elect",
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
}

// leaseName is the Lease the replicas compete for, in framework.DeployNamespace, the
// namespace of the ServiceAccount's kubeconfig. This is the suite's only case with
// leader election, so it has the Lease to itself.
const leaseName = "sample-controller"

// TestLeaderFailover runs two replicas with leader election, each behind its own API
// proxy, while Foos are being created and scaled, and takes the leader away three
// ways: SIGKILL, SIGTERM, and a stall of all its API traffic. After each, a fresh
// standby joins. From the proxies' logs of writes, two replicas must never have
// written Foos or Deployments in overlapping time.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	replicas := []*proxiedController{startProxied(t, ns, leaderArgs...), startProxied(t, ns, leaderArgs...)}
	started := slices.Clone(replicas)
	leader, holder := waitLeaderOf(t, framework.DeployNamespace, leaseName, replicas, "")

	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)

	type outcome struct {
		fault    string
		takeover time.Duration
		note     string
	}
	var outcomes []outcome
	var stalledName string // the proxy of the leader whose traffic was stalled
	for _, fault := range []string{"SIGKILL", "SIGTERM", "stall"} {
		waitWrites(t, leader, 3)
		var stalled <-chan struct{}
		at := time.Now()
		switch fault {
		case "SIGKILL":
			_ = leader.process().Kill()
		case "SIGTERM":
			if err := leader.process().Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		case "stall":
			// Right after one of its writes has been committed, so that it is in the
			// middle of its work.
			hit := make(chan struct{})
			var once sync.Once
			leader.proxy.AfterWrite(func(w apiproxy.Write) {
				if isObjectWrite(w) {
					once.Do(func() {
						leader.proxy.Stall()
						at = time.Now()
						close(hit)
					})
				}
			})
			<-hit
			stalled = hit
			stalledName = leader.proxy.Name()
		}
		others := slices.DeleteFunc(slices.Clone(replicas), func(c *proxiedController) bool { return c == leader })
		next, nextHolder := waitLeaderOf(t, framework.DeployNamespace, leaseName, others, holder)
		o := outcome{fault: fault, takeover: time.Since(at)}
		if stalled != nil {
			// Hold the old leader's traffic until the new one has written, and until it
			// has exited on losing the Lease; then deliver what it had sent.
			waitWrites(t, next, 1)
			select {
			case <-leader.process().Exited():
			case <-time.After(timeout):
				t.Fatalf("the stalled leader did not exit within %v of losing the Lease", timeout)
			}
			held := leader.proxy.Held()
			leader.proxy.Release()
			o.note = fmt.Sprintf("%d requests held until the new leader had written and the old one had exited (%v)", held, exitOf(leader.process()))
		}
		if fault == "SIGTERM" {
			select {
			case <-leader.process().Exited():
			case <-time.After(localcluster.ControllerStopGrace):
				t.Errorf("the leader did not exit within %v of SIGTERM", localcluster.ControllerStopGrace)
			}
		}
		outcomes = append(outcomes, o)
		standby := startProxied(t, ns, leaderArgs...)
		replicas = append(others, standby)
		started = append(started, standby)
		leader, holder = next, nextHolder
	}
	waitWrites(t, leader, 3)
	stopLoad()
	foos := <-load
	settled := checkInvariants(t, ns, foos)

	logs := writesOf(started)
	handovers, overlaps := leadership(logs)
	// The stalled leader's writes held by its proxy reach the apiserver when the proxy
	// lets them go, after the next leader has begun: lease-based election has no
	// fencing token, so only the writes' own preconditions (resourceVersion, UID, a
	// create's name) can refuse them. They are reported, not failed on: the outcome
	// depends on which writes the stall caught.
	var stallLate, stallCommitted int
	for _, o := range overlaps {
		if o.Client == stalledName {
			stallLate++
			if o.Code < 300 {
				stallCommitted++
			}
			t.Logf("a held write of the stalled leader landed late: %v", o)
			continue
		}
		t.Errorf("two replicas wrote at once: %v", o)
	}
	var parts []string
	for i, o := range outcomes {
		part := fmt.Sprintf("%s: takeover %.1fs", o.fault, o.takeover.Seconds())
		if i < len(handovers) {
			part += fmt.Sprintf(", hand-over gap %.2fs", handovers[i].Seconds())
		}
		if o.note != "" {
			part += ", " + o.note
		}
		if o.fault == "stall" {
			part += fmt.Sprintf(", of which %d Foo or Deployment writes reached the apiserver after the new leader's first write, %d of them committed", stallLate, stallCommitted)
		}
		parts = append(parts, part)
	}
	fmt.Printf("faults: leader failover: %s; %d other overlapping writes; %d Foos converged %.1fs after the load stopped\n",
		strings.Join(parts, "; "), len(overlaps)-stallLate, len(foos), settled.Seconds())
	if len(handovers) != len(outcomes) {
		t.Errorf("%d hand-overs in the writes, want %d (one per fault)", len(handovers), len(outcomes))
	}
}

// waitLeaderOf waits until the Lease ns/name is held by one of replicas, other than
// previous, and returns that replica and its identity.
func waitLeaderOf(t *testing.T, ns, name string, replicas []*proxiedController, previous string) (*proxiedController, string) {
	t.Helper()
	var leader *proxiedController
	var holder string
	framework.Eventually(t, timeout, "a new leader", func(ctx context.Context) (bool, string) {
		lease, err := env.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		if holder == "" || holder == previous {
			return false, fmt.Sprintf("holder %q", holder)
		}
		// The replica that says it leads, by its metrics rather than its log's wording.
		for _, c := range replicas {
			m, err := c.process().Metrics(ctx)
			if err == nil && m.Sum("leader_election_master_status", map[string]string{"name": name}) == 1 {
				leader = c
				return true, ""
			}
		}
		return false, fmt.Sprintf("holder %s is none of the replicas", holder)
	})
	return leader, holder
}

// waitWrites waits until c has written n more Foos or Deployments.
func waitWrites(t *testing.T, c *proxiedController, n int) {
	t.Helper()
	before := len(objectWrites(c.proxy.Writes()))
	framework.Eventually(t, timeout, fmt.Sprintf("%d writes of %s", n, c.proxy.Name()), func(context.Context) (bool, string) {
		got := len(objectWrites(c.proxy.Writes())) - before
		return got >= n, fmt.Sprintf("%d writes", got)
	})
}

// startLoad creates a Foo every 250 ms and scales the one created three before, until
// ctx ends; then it sends the names of the Foos it created.
func startLoad(ctx context.Context, t *testing.T, ns string) <-chan []string {
	names := make(chan []string, 1)
	go func() {
		var created []string
		defer func() { names <- created }()
		foos := env.Sample.SamplecontrollerV1alpha1().Foos(ns)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("load-%03d", i)
			foo := &samplev1alpha1.Foo{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To[int32](1)},
			}
			if _, err := foos.Create(ctx, foo, metav1.CreateOptions{}); err != nil {
				if ctx.Err() == nil {
					t.Errorf("creating Foo %s: %v", name, err)
					return
				}
				// Stopped while the create was in flight: it may have been committed.
				getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if _, err := foos.Get(getCtx, name, metav1.GetOptions{}); err == nil {
					created = append(created, name)
				} else if !apierrors.IsNotFound(err) {
					t.Errorf("looking for Foo %s, whose create was cut short: %v", name, err)
				}
				return
			}
			created = append(created, name)
			if i >= 3 {
				scaled := fmt.Sprintf("load-%03d", i-3)
				if _, err := foos.Patch(ctx, scaled, types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
					t.Errorf("scaling Foo %s: %v", scaled, err)
				}
			}
		}
	}()
	return names
}

// overlap is a Foo or Deployment write that reached the apiserver while another
// replica was writing too.
type overlap struct {
	apiproxy.Write
	what string
}

func (o overlap) String() string { return fmt.Sprintf("%v, %s", o.Write, o.what) }

// leadership reads the replicas' logs of writes as a sequence of tenures: runs of Foo,
// Deployment and Event writes by one replica, in the order they were sent to the
// apiserver.
// It returns the gap of each hand-over, from the old leader's last answer to the new
// leader's first request, and the writes that overlap another replica's: sent after
// a later tenure had begun, or before the previous tenure's last answer.
func leadership(logs [][]apiproxy.Write) (gaps []time.Duration, overlaps []overlap) {
	var all []apiproxy.Write
	for _, log := range logs {
		all = append(all, ownedWrites(log)...)
	}
	slices.SortFunc(all, func(a, b apiproxy.Write) int { return a.Sent.Compare(b.Sent) })
	succeeded := map[string]time.Time{} // by replica whose tenure is over: when the next began
	var current string                  // the replica whose tenure this is
	var answered time.Time              // its last answer so far
	for _, w := range all {
		switch {
		case w.Client == current:
			answered = later(answered, w.Answered)
			continue
		case !succeeded[w.Client].IsZero():
			overlaps = append(overlaps, overlap{w, fmt.Sprintf("sent %.2fs after the next leader's first write", w.Sent.Sub(succeeded[w.Client]).Seconds())})
			continue
		case current != "":
			gap := w.Sent.Sub(answered)
			if gap < 0 {
				overlaps = append(overlaps, overlap{w, fmt.Sprintf("sent %.2fs before %s's last answer", -gap.Seconds(), current)})
			}
			gaps = append(gaps, gap)
			succeeded[current] = w.Sent
		}
		current, answered = w.Client, w.Answered
	}
	return gaps, overlaps
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// exitOf says how a process exited, once it has.
func exitOf(p *localcluster.Controller) string {
	if err := p.Err(); err != nil {
		return "it exited with " + err.Error()
	}
	return "it exited cleanly"
}
