//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"

	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/test/apiproxy"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
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
	args := shardedArgs(ns)
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

	writes, outside, handOffs := checkTenures(t, env.Sample, ns, started)
	fmt.Printf("faults: sharded 1->3->1->3 and SIGKILL of 1 of 3 (%d slots, Leases of %v): slots held again %.1fs after the SIGKILL; %d slot hand-offs; %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		shardSlots, shardLease, heldAgain.Seconds(), handOffs, writes, outside, len(names), settled.Seconds())
}

// TestShardedAtScale runs sharded replicas on Foos in 50 namespaces, on a cluster of
// its own (the replicas watch every namespace), once with the apiserver's
// ShardedListAndWatch on (1000 Foos) and once with it off (250), as on a cluster
// without the gate or older than 1.36. One replica converges the Foos; then 1 -> 3 replicas, each caching
// about a third; 3 -> 1; 1 -> 3; and one of three is SIGKILLed while 100 Foos are
// scaled. Every Foo ends as its spec says, as after an unperturbed run, each Foo is
// cached by one replica only, and no write falls outside its writer's tenure of the
// Foo's slot. Without the gate every replica also says once that it was sent other
// slots' Foos.
//
// Without the gate, what differs is what each replica is sent and drops: 5 Foos a
// namespace show it as well as 20 would, at a quarter of the CPU, on two cores the
// other cases share.
func TestShardedAtScale(t *testing.T) {
	for _, gate := range []struct {
		name  string
		off   bool
		count int
	}{{"gate on", false, 1000}, {"gate off", true, 250}} {
		t.Run(gate.name, func(t *testing.T) { shardedAtScale(t, gate.off, gate.count) })
	}
}

func shardedAtScale(t *testing.T, gateOff bool, count int) {
	const (
		namespaces = 50
		scaled     = 100
		leaseNS    = "sharded-system"
	)
	ctx := t.Context()
	dir := "cluster-sharded-at-scale"
	if gateOff {
		dir += "-without-the-gate"
	}
	// Deployments get a status from the controller manager; their Foos ask for no Pods
	// until they are scaled, so the cluster does not spend the two cores on 1000 Pods.
	cluster := env.StartCluster(t, dir, localcluster.Options{DisableShardedListAndWatch: gateOff})
	cfg := cluster.RESTConfig()
	cfg.QPS, cfg.Burst = 200, 400
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	nsOf := map[string]string{}
	for i := range namespaces + 1 {
		ns := fmt.Sprintf("ns-%d", i)
		if i == namespaces {
			ns = leaseNS
		}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range count {
		name := fmt.Sprintf("scale-%04d", i)
		names = append(names, name)
		nsOf[name] = fmt.Sprintf("ns-%d", i%namespaces)
	}
	forEachFoo := func(what string, do func(ctx context.Context, name string) error) {
		t.Helper()
		errs := make(chan error, len(names))
		workqueue.ParallelizeUntil(ctx, 16, len(names), func(i int) {
			if err := do(ctx, names[i]); err != nil {
				errs <- fmt.Errorf("%s %s: %w", what, names[i], err)
			}
		})
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	forEachFoo("creating Foo", func(ctx context.Context, name string) error {
		_, err := sample.SamplecontrollerV1alpha1().Foos(nsOf[name]).Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To[int32](0)},
		}, metav1.CreateOptions{})
		return err
	})

	// A ServiceAccount bound to cluster-admin: the proxies pass tokens, not client
	// certificates, and this case is about sharding, TestShardedHandOffs about RBAC.
	if _, err := kube.CoreV1().ServiceAccounts(leaseNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sharded"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sharded"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "sharded", Namespace: leaseNS}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(env.OutDir, dir+".kubeconfig")
	if err := framework.WriteServiceAccountKubeconfig(ctx, kube, cluster.KubeconfigPath(), leaseNS, "sharded", kubeconfig); err != nil {
		t.Fatal(err)
	}
	args := shardedArgs(leaseNS)
	var started, live []*proxiedController
	grow := func(n int) {
		for range n {
			c := newProxiedOn(t, cluster, kubeconfig, "", args...)
			c.start(t)
			started, live = append(started, c), append(live, c)
		}
	}
	converged := func(what string) time.Duration {
		t.Helper()
		began := time.Now()
		framework.Eventually(t, 3*timeout, what, func(ctx context.Context) (bool, string) {
			broken, err := violationsIn(ctx, kube, sample, metav1.NamespaceAll, names)
			if err != nil {
				return false, err.Error()
			}
			return len(broken) == 0, fmt.Sprintf("%d broken, first %q", len(broken), broken[:min(3, len(broken))])
		})
		return time.Since(began)
	}

	grow(1)
	alone := converged(fmt.Sprintf("one replica to converge %d Foos", count))
	grow(2) // 1 -> 3
	waitSlotsHeld(t, live)
	var cached []float64
	framework.Eventually(t, timeout, "three replicas to cache every Foo once between them", func(ctx context.Context) (bool, string) {
		cached = nil
		var total float64
		for _, c := range live {
			m, err := c.process().Metrics(ctx)
			if err != nil {
				return false, err.Error()
			}
			n := m.Sum("sample_controller_cached_objects", map[string]string{"resource": "foos"})
			cached, total = append(cached, n), total+n
		}
		return total == float64(count), fmt.Sprintf("Foos cached %v", cached)
	})
	for _, c := range live[1:] { // 3 -> 1
		if err := c.process().Stop(localcluster.ControllerStopGrace); err != nil {
			t.Errorf("a sharded replica exited with %v after SIGTERM", err)
		}
	}
	live = live[:1]
	waitSlotsHeld(t, live)
	grow(2) // 1 -> 3
	waitSlotsHeld(t, live)

	// Scale some Foos while one replica is killed.
	patched := make(chan struct{})
	go func() {
		defer close(patched)
		for i, name := range names[:scaled] {
			_, err := sample.SamplecontrollerV1alpha1().Foos(nsOf[name]).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
			if err != nil {
				t.Errorf("scaling Foo %s: %v", name, err)
			}
			if i%10 == 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	killed := live[1]
	killedAt := time.Now()
	_ = killed.process().Kill()
	live = slices.DeleteFunc(live, func(c *proxiedController) bool { return c == killed })
	waitSlotsHeld(t, live)
	heldAgain := time.Since(killedAt)
	<-patched
	settled := converged(fmt.Sprintf("the %d Foos to converge after the SIGKILL, %d of them scaled", count, scaled))

	if gateOff {
		for _, c := range started {
			log, err := os.ReadFile(c.process().LogPath())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(log), "The API server sent Foos outside this slot") {
				t.Errorf("%s never said that the apiserver ignored its shard selector; its log is %s", c.proxy.Name(), c.process().LogPath())
			}
		}
	}
	writes, outside, handOffs := checkTenures(t, sample, metav1.NamespaceAll, started)
	gate := "on"
	if gateOff {
		gate = "off"
	}
	fmt.Printf("faults: sharded at scale, ShardedListAndWatch %s: %d Foos in %d namespaces converged by one replica in %.1fs; 3 replicas cached %v Foos; 1->3->1->3 and SIGKILL of 1 of 3 while %d Foos were scaled: slots held again %.1fs after it, converged %.1fs after; %d slot hand-offs; %d Foo and Deployment writes, %d outside the writer's tenure\n",
		gate, count, namespaces, alone.Seconds(), cached, scaled, heldAgain.Seconds(), settled.Seconds(), handOffs, writes, outside)
}

// shardedArgs are the flags of a sharded replica in these cases, its Leases in
// leaseNS.
func shardedArgs(leaseNS string) []string {
	return shardedArgsOf(leaseNS, shardSlots)
}

// shardedArgsOf is shardedArgs for a replica that divides the Foos into n slots.
func shardedArgsOf(leaseNS string, n int) []string {
	return []string{
		"--shard-slots=" + strconv.Itoa(n), "--leader-elect-resource-namespace=" + leaseNS,
		"--leader-elect-lease-duration=" + shardLease.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
}

// checkTenures fails the test for every Foo or Deployment write of the replicas that
// falls outside its replica's tenure of the Foo's slot, of the number of slots the
// replica divides the Foos into, and returns the writes checked, those outside, and the
// hand-offs. Each Foo in ns (every namespace for "") names its Deployment after itself.
func checkTenures(t *testing.T, sample clientset.Interface, ns string, replicas []*proxiedController) (writes, outside, handOffs int) {
	t.Helper()
	foos, err := sample.SamplecontrollerV1alpha1().Foos(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uidOf := map[string]types.UID{} // by namespace/name
	for _, foo := range foos.Items {
		uidOf[foo.Namespace+"/"+foo.Name] = foo.UID
	}
	logs := writesOf(replicas)
	tenures := slotTenures(logs)
	for i, log := range logs {
		space, err := slots.NewSpace(replicas[i].slots())
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range objectWrites(log) {
			uid, ok := uidOf[w.Namespace+"/"+w.Name]
			if !ok {
				continue
			}
			writes++
			lease := slots.SlotLeaseName(shardGroup, space.Of(uid), space.Len())
			if !slices.ContainsFunc(tenures[lease], func(te tenure) bool { return te.covers(w) }) {
				outside++
				t.Errorf("a write outside its replica's tenure of %s: %v (tenures %v)", lease, w, tenures[lease])
			}
		}
	}
	for _, ts := range tenures {
		handOffs += len(ts) - 1
	}
	return writes, outside, handOffs
}

// slots is the number of slots the replica divides the Foos into: its --shard-slots.
func (c *proxiedController) slots() int {
	for _, arg := range c.args {
		if v, ok := strings.CutPrefix(arg, "--shard-slots="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// waitSlotsHeld waits until the live replicas hold every slot between them, each its
// share give or take one.
func waitSlotsHeld(t *testing.T, live []*proxiedController) {
	t.Helper()
	waitSlotsHeldOf(t, live, shardSlots)
}

// waitSlotsHeldOf is waitSlotsHeld for replicas that divide the Foos into n slots.
func waitSlotsHeldOf(t *testing.T, live []*proxiedController, shardSlots int) {
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
		return total == float64(shardSlots) && balanced, fmt.Sprintf("slots held %v", held)
	})
}

// tenure is one replica's hold on a slot, as its proxy saw it: from the answer to its
// first write of the slot's Lease until the next holder's first write of it was sent.
type tenure struct {
	client     string
	start, end time.Time
}

func (te tenure) covers(w apiproxy.Write) bool {
	return w.Client == te.client && !w.Sent.Before(te.start) && !w.Answered.After(te.end)
}

func (te tenure) String() string {
	return fmt.Sprintf("%s %s-%s", te.client, te.start.Format("15:04:05.000"), te.end.Format("15:04:05.000"))
}

// slotTenures reads the replicas' successful writes of the slot Leases, by Lease, in
// the order they were sent: only the holder renews or releases a Lease, and only a
// successful write takes it, so each run of one replica's writes is one tenure.
func slotTenures(logs [][]apiproxy.Write) map[string][]tenure {
	byLease := map[string][]apiproxy.Write{}
	for _, log := range logs {
		for _, w := range log {
			if w.Resource != "leases" || !strings.HasPrefix(w.Name, shardGroup+"-slot-") || w.Code >= 300 {
				continue
			}
			byLease[w.Name] = append(byLease[w.Name], w)
		}
	}
	tenures := map[string][]tenure{}
	for lease, writes := range byLease {
		slices.SortFunc(writes, func(a, b apiproxy.Write) int { return a.Sent.Compare(b.Sent) })
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
		tenures[lease] = ts
	}
	return tenures
}
