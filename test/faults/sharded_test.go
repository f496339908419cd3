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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"

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

	writes, outside, handOffs := checkTenures(t, env.Sample, ns, started)
	fmt.Printf("faults: sharded 1->3->1->3 and SIGKILL of 1 of 3 (%d slots, Leases of %v): slots held again %.1fs after the SIGKILL; %d slot hand-offs; %d Foo and Deployment writes, %d outside the writer's tenure; %d Foos converged %.1fs after the load stopped\n",
		shardSlots, shardLease, heldAgain.Seconds(), handOffs, writes, outside, len(names), settled.Seconds())
}

// TestShardedWithoutTheGate runs three sharded replicas on a cluster of its own whose
// apiserver ignores shard selectors, as one without ShardedListAndWatch or older than
// 1.36 does: every replica caches every Foo, says once that the apiserver sent it
// others' Foos, and acts only on its own slots' (no write outside its tenure).
func TestShardedWithoutTheGate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		Dir: filepath.Join(env.OutDir, "cluster-without-sharded-list-and-watch"), BinDir: env.Cluster.BinDir(),
		DisableShardedListAndWatch: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping the second cluster: %v", err)
		}
	})
	cfg := cluster.RESTConfig()
	if err := localcluster.InstallCRD(ctx, cfg, filepath.Join(env.RepoRoot, "artifacts", "examples", "crd.yaml")); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "gateless"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A ServiceAccount bound to cluster-admin: the proxies pass tokens, not client
	// certificates, and this case is about the gate, the other about RBAC.
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sharded"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sharded"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "sharded", Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(env.OutDir, "gateless.kubeconfig")
	if err := framework.WriteServiceAccountKubeconfig(ctx, kube, cluster.KubeconfigPath(), ns, "sharded", kubeconfig); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--shard-slots=" + strconv.Itoa(shardSlots), "--leader-elect-resource-namespace=" + ns,
		"--leader-elect-lease-duration=" + shardLease.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	var replicas []*proxiedController
	for range 3 {
		c := newProxiedOn(t, cluster, kubeconfig, ns, args...)
		c.start(t)
		replicas = append(replicas, c)
	}
	waitSlotsHeld(t, replicas)

	const count = 24
	var names []string
	for i := range count {
		name := fmt.Sprintf("gateless-%d", i)
		names = append(names, name)
		_, err := sample.SamplecontrollerV1alpha1().Foos(ns).Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To[int32](1)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, timeout, fmt.Sprintf("%d Foos to be Ready", count), func(ctx context.Context) (bool, string) {
		foos, err := sample.SamplecontrollerV1alpha1().Foos(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, foo := range foos.Items {
			if c := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && foo.Status.AvailableReplicas == 1 {
				ready++
			}
		}
		return ready == count, fmt.Sprintf("%d Ready", ready)
	})

	var cached []float64
	for _, c := range replicas {
		m, err := c.process().Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := m.Sum("sample_controller_cached_objects", map[string]string{"resource": "foos"})
		cached = append(cached, n)
		// Each slot's informer holds every Foo: the replica's caches hold them once per slot.
		if held := m.Sum("sample_controller_slots_held", nil); n != held*count {
			t.Errorf("%s caches %v Foos over %v slots, want every Foo in each slot's cache (%v)", c.proxy.Name(), n, held, held*count)
		}
		log, err := os.ReadFile(c.process().LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "The API server sent Foos outside this slot") {
			t.Errorf("%s never said that the apiserver ignored its shard selector; its log is %s", c.proxy.Name(), c.process().LogPath())
		}
	}

	writes, outside, _ := checkTenures(t, sample, ns, replicas)
	fmt.Printf("faults: sharded without ShardedListAndWatch: 3 replicas, %d Foos converged; Foos cached per replica %v (every Foo once per slot held); %d writes, %d outside the writer's tenure\n",
		count, cached, writes, outside)
}

// checkTenures fails the test for every Foo or Deployment write of the replicas that
// falls outside its replica's tenure of the Foo's slot, and returns the writes checked,
// those outside, and the hand-offs. Each Foo in ns names its Deployment after itself.
func checkTenures(t *testing.T, sample clientset.Interface, ns string, replicas []*proxiedController) (writes, outside, handOffs int) {
	t.Helper()
	space, err := slots.NewSpace(shardSlots)
	if err != nil {
		t.Fatal(err)
	}
	foos, err := sample.SamplecontrollerV1alpha1().Foos(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slotOf := map[string]int{}
	for _, foo := range foos.Items {
		slotOf[foo.Name] = space.Of(foo.UID)
	}
	var logs [][]localcluster.APIWrite
	for _, c := range replicas {
		logs = append(logs, c.proxy.Writes())
	}
	tenures := slotTenures(logs)
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
	for _, ts := range tenures {
		handOffs += len(ts) - 1
	}
	return writes, outside, handOffs
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
