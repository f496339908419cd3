package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// The sharded case group runs replicas of our controller in sharded mode, and one
// unsharded replica to compare with, on --sharded-foos Foos spread over namespaces
// named as people name them, and again with half of them in one namespace.

// layout spreads a session's Foos over namespaces.
type layout struct {
	Key        string   `json:"key"`
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces"`
	// namespaceOf is the namespace of the i-th Foo.
	namespaceOf func(i int) string
}

// peopleNamespaces are 40 namespace names of the kinds people choose: environments,
// products, teams, people, numbered ones. Short, similar names hash close together
// under FNV-1a (ns1 to ns3, team-a to team-c), which is why the controller shards Foos
// by UID and not by namespace; both layouts must balance.
var peopleNamespaces = []string{
	"default", "prod", "production", "staging", "stage", "dev", "test", "qa",
	"team-a", "team-b", "team-c", "payments", "checkout", "cart", "orders", "billing",
	"search", "frontend", "backend", "api", "web", "auth", "users", "inventory",
	"shipping", "analytics", "monitoring", "logging", "data", "ml", "platform", "infra",
	"ops", "sre", "alice", "bob", "ns1", "ns2", "ns3", "demo",
}

// The layouts of the sharded sessions.
var (
	spreadLayout = &layout{
		Key: "spread", Name: "40 namespaces", Namespaces: peopleNamespaces,
		namespaceOf: func(i int) string { return peopleNamespaces[i%len(peopleNamespaces)] },
	}
	halfLayout = func() *layout {
		big := "prod"
		rest := slices.DeleteFunc(slices.Clone(peopleNamespaces), func(ns string) bool { return ns == big })
		return &layout{
			Key: "half", Name: "half in one namespace", Namespaces: peopleNamespaces,
			namespaceOf: func(i int) string {
				if i%2 == 0 {
					return big
				}
				return rest[(i/2)%len(rest)]
			},
		}
	}()
	shardedLayouts = []*layout{spreadLayout, halfLayout}
)

// shardLeaseNamespace holds the replicas' Leases, as artifacts/deploy's namespace does.
const shardLeaseNamespace = "sample-controller-system"

// shardLeaseArgs are the sharded component's Lease timings: the time until a dead
// replica's slots are held again, and the Lease writes, depend on them.
var shardLeaseArgs = []string{
	"--leader-elect-resource-namespace=" + shardLeaseNamespace,
	"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s",
}

// replicaSet is a driver: Replicas processes of our controller, sharded into Slots
// slots, or with Slots 0 one replica as it runs by default (single-leader mode
// without a second replica needs no Lease).
type replicaSet struct {
	Ours     controller `json:"controller"`
	Replicas int        `json:"replicas"`
	Slots    int        `json:"slots"`
}

func (r replicaSet) column() string {
	if r.Slots == 0 {
		return "ours-unsharded"
	}
	return fmt.Sprintf("ours-sharded-%d", r.Replicas)
}

func (r replicaSet) rule() statusRule { return ruleReady }

// start starts every replica at once. A replica's exit ends the session's cases with
// an error, unless a case killed it.
func (r replicaSet) start(ctx context.Context, s *session) error {
	args := r.Ours.Args
	if r.Slots > 0 {
		_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardLeaseNamespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		args = append(slices.Clone(args), shardLeaseArgs...)
		args = append(args, fmt.Sprintf("--shard-slots=%d", r.Slots))
	}
	kubeconfig := s.cluster.KubeconfigPath()
	for i := range r.Replicas {
		ctrl, err := localcluster.StartController(ctx, localcluster.ControllerOptions{
			Bin: r.Ours.Binary, Kubeconfig: kubeconfig, LogDir: s.cfg.outDir,
			Name: fmt.Sprintf("%s-controller-%d", s.name, i), Args: args,
		})
		if err != nil {
			return err
		}
		s.processes = append(s.processes, ctrl)
		go func() {
			<-ctrl.Exited()
			if _, killed := s.killed.Load(ctrl); !killed {
				s.fail(ctrl.ExitError())
			}
		}()
	}
	return nil
}

// shardedCase runs after the cold start of a replicaSet: the Lease writes of a quiet
// --settle, then each replica's figures, then (with more than one sharded replica) it
// kills one and times until its slots are held again.
type shardedCase struct{}

// shardedResult is what the sharded case measured.
type shardedResult struct {
	Layout   string `json:"layout"`
	Foos     int    `json:"foos"`
	Replicas int    `json:"replicas"`
	Slots    int    `json:"slots"`
	// PerReplica are the replicas' figures, after the cold start and --settle.
	PerReplica []replicaFigures `json:"perReplica"`
	// LeaseWritesPerSecond are the writes on Leases over a quiet --settle.
	LeaseWritesPerSecond float64 `json:"leaseWritesPerSecond"`
	// KilledSlots are the slots of the replica killed with SIGKILL, and
	// HeldAgainSeconds the time until the others held every slot; nil when they did
	// not within the wait.
	KilledSlots      int      `json:"killedSlots,omitempty"`
	HeldAgainSeconds *float64 `json:"heldAgainSeconds,omitempty"`
	HeldAgainWait    float64  `json:"heldAgainWaitSeconds,omitempty"`
}

// replicaFigures are one replica's. The cache figures come from the replica's
// sample_controller_cached_objects, which an unsharded replica does not serve (nil).
type replicaFigures struct {
	RSSBytes          int64    `json:"rssBytes"`
	ReadBytes         int64    `json:"readBytes"`
	SlotsHeld         float64  `json:"slotsHeld"`
	CachedFoos        *float64 `json:"cachedFoos,omitempty"`
	CachedDeployments *float64 `json:"cachedDeployments,omitempty"`
}

const (
	metricSlotsHeld     = "sample_controller_slots_held"
	metricCachedObjects = "sample_controller_cached_objects"
)

func (shardedCase) run(ctx context.Context, s *session) error {
	rs, ok := s.driver.(replicaSet)
	if !ok {
		return fmt.Errorf("the sharded case runs on a replica set, not on %s", s.driver.column())
	}
	r := shardedResult{Layout: s.layout.Name, Foos: len(s.foos), Replicas: rs.Replicas, Slots: rs.Slots}
	defer func() { s.result.Sharded = &r }()

	leases, err := countRequestsOn(ctx, s.cluster, []string{"leases"})
	if err != nil {
		return err
	}
	began := time.Now()
	if err := sleep(ctx, s.cfg.settle); err != nil {
		return err
	}
	counts, err := leases(ctx)
	if err != nil {
		return err
	}
	r.LeaseWritesPerSecond = counts.mutating().total() / time.Since(began).Seconds()

	for _, c := range s.processes {
		var f replicaFigures
		if f.RSSBytes, err = c.RSSBytes(); err != nil {
			return err
		}
		if f.ReadBytes, err = c.ReadBytes(); err != nil {
			return err
		}
		m, err := c.Metrics(ctx)
		if err != nil {
			return err
		}
		f.SlotsHeld = m.Sum(metricSlotsHeld, nil)
		for resource, into := range map[string]**float64{"foos": &f.CachedFoos, "deployments": &f.CachedDeployments} {
			if labels := map[string]string{"resource": resource}; m.Has(metricCachedObjects, labels) {
				*into = ptr.To(m.Sum(metricCachedObjects, labels))
			}
		}
		r.PerReplica = append(r.PerReplica, f)
	}
	progressf("%s: per replica %s", s.name, r.perReplicaText())

	if rs.Slots == 0 || rs.Replicas < 2 {
		return nil
	}
	victim, live := s.processes[0], s.processes[1:]
	r.KilledSlots = int(r.PerReplica[0].SlotsHeld)
	s.killed.Store(victim, true)
	killedAt := time.Now()
	_ = victim.Kill() // its error is the kill's

	// Two Lease durations and a retry period bound the wait for a correct controller.
	wait := 35 * time.Second
	held := func() bool {
		var sum float64
		for _, c := range live {
			m, err := c.Metrics(ctx)
			if err != nil {
				return false
			}
			sum += m.Sum(metricSlotsHeld, nil)
		}
		return int(sum) == rs.Slots
	}
	if err := s.waitUntil(ctx, wait, held, nil); err != nil {
		return err
	}
	if held() {
		r.HeldAgainSeconds = ptr.To(time.Since(killedAt).Seconds())
		progressf("%s: the %d slots of the killed replica were held again %.1f s after its SIGKILL", s.name, r.KilledSlots, *r.HeldAgainSeconds)
	} else {
		r.HeldAgainWait = wait.Seconds()
		progressf("%s: the killed replica's slots were not all held again within %v", s.name, wait)
	}
	return nil
}

func (r shardedResult) perReplicaText() string {
	var parts []string
	for _, f := range r.PerReplica {
		parts = append(parts, fmt.Sprintf("%.0f slots, %s Foos cached, RSS %.1f MiB, read %.1f MiB",
			f.SlotsHeld, optional(f.CachedFoos), mib(f.RSSBytes), mib(f.ReadBytes)))
	}
	return strings.Join(parts, "; ")
}

func optional(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return formatNumber(*v)
}

// shardedMarkdown is the table of the sharded sessions: one row per layout and
// replica set. The ratios compare the largest replica with an even share: of all the
// Foos for the cache, of the one sharded replica's reads for the bytes read.
func shardedMarkdown(res *results) string {
	type entry struct {
		run     runResult
		sharded *shardedResult
	}
	var entries []entry
	for _, r := range res.Runs {
		if r.Sharded != nil {
			entries = append(entries, entry{r, r.Sharded})
		}
	}
	if len(entries) == 0 {
		return ""
	}
	// The reads of one sharded replica, per layout: what N replicas share.
	oneReplica := map[string]float64{}
	for _, e := range entries {
		if e.sharded.Slots > 0 && e.sharded.Replicas == 1 && len(e.sharded.PerReplica) == 1 {
			oneReplica[e.sharded.Layout] = float64(e.sharded.PerReplica[0].ReadBytes)
		}
	}
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	writeLine("Foos", "replicas", "cold start (s)", "requests per Foo", "writes per Foo", "slots held", "Foos cached", "Deployments cached",
		"largest cache ÷ even share", "RSS (MiB)", "read (MiB)", "largest read ÷ even share", "Lease writes/s", "slots held again after SIGKILL (s)")
	writeLine(slices.Repeat([]string{"--:"}, 14)...)
	for _, e := range entries {
		sr := e.sharded
		replicas := "1, unsharded"
		if sr.Slots > 0 {
			replicas = fmt.Sprintf("%d, %d slots", sr.Replicas, sr.Slots)
		}
		coldStart, perFoo, writes := "n/a", "n/a", "n/a"
		if cs := e.run.ColdStart; cs != nil {
			coldStart = figureOr(cs.Converged, cs.Seconds, cs.timedOutText()).String()
			if cs.Converged {
				perFoo = formatNumber(cs.PerFooTotal)
				writes = formatNumber(cs.Requests.mutating().total() / float64(cs.Foos))
			}
		}
		each := func(f func(replicaFigures) string) string {
			var out []string
			for _, p := range sr.PerReplica {
				out = append(out, f(p))
			}
			return strings.Join(out, " / ")
		}
		largest := func(f func(replicaFigures) float64) float64 {
			return f(slices.MaxFunc(sr.PerReplica, func(a, b replicaFigures) int { return cmp.Compare(f(a), f(b)) }))
		}
		cacheRatio, readRatio := "", ""
		if sr.Slots > 0 && len(sr.PerReplica) > 0 {
			cacheRatio = formatNumber(largest(func(p replicaFigures) float64 { return ptr.Deref(p.CachedFoos, 0) }) / (float64(sr.Foos) / float64(sr.Replicas)))
			if one, ok := oneReplica[sr.Layout]; ok && one > 0 {
				readRatio = formatNumber(largest(func(p replicaFigures) float64 { return float64(p.ReadBytes) }) / (one / float64(sr.Replicas)))
			}
		}
		heldAgain := ""
		switch {
		case sr.HeldAgainSeconds != nil:
			heldAgain = fmt.Sprintf("%s (%d slots)", formatNumber(*sr.HeldAgainSeconds), sr.KilledSlots)
		case sr.HeldAgainWait > 0:
			heldAgain = fmt.Sprintf("not within %.0f s", sr.HeldAgainWait)
		}
		if len(sr.PerReplica) == 0 {
			writeLine(fmt.Sprintf("%d, %s", sr.Foos, sr.Layout), replicas, coldStart, perFoo, writes, "", "", "", "", "", "", "", "", "")
			continue
		}
		writeLine(fmt.Sprintf("%d, %s", sr.Foos, sr.Layout), replicas, coldStart, perFoo, writes,
			each(func(p replicaFigures) string { return formatNumber(p.SlotsHeld) }),
			each(func(p replicaFigures) string { return optional(p.CachedFoos) }),
			each(func(p replicaFigures) string { return optional(p.CachedDeployments) }),
			cacheRatio,
			each(func(p replicaFigures) string { return formatNumber(mib(p.RSSBytes)) }),
			each(func(p replicaFigures) string { return formatNumber(mib(p.ReadBytes)) }),
			readRatio, formatNumber(sr.LeaseWritesPerSecond), heldAgain)
	}
	return b.String()
}
