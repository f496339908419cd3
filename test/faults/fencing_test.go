//go:build faults

package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	gate "github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/test/apiproxy"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// TestFencedByAdmission puts artifacts/deploy/components/fencing's policy in front of
// two namespaces, each with a binding to a Lease of its own (the component's binding
// names the Lease of artifacts/deploy, which other cases' controllers do not hold), and
// two Pods' bound ServiceAccount tokens as the writers; a third binding names a Lease
// that does not exist.
//
// By hand, on a Lease the case sets: the holder's writes are admitted, the other Pod's
// and a token bound to no Pod refused; after a change of holder, how long the old
// holder's writes are still admitted and the new one's still refused (the policy's
// view of the Lease lags it); a write held in flight across the change is refused when
// it lands, where its resourceVersion would have let it commit; and what the policy
// costs a write, against the same write in a namespace without it, alternating.
//
// Then with controllers: two replicas run on the Pods' tokens and identities while
// Foos change, and another client empties the Lease's holder (the leader must take it
// back), then the leader's traffic is stalled on one of its writes until the other has
// taken over and written (that write must then be refused), then the Lease is edited
// to name the standby: every Foo or Deployment write
// of an old leader that reaches the API server after the new leader's first write must
// be refused, and the Foos converge through the policy.
func TestFencedByAdmission(t *testing.T) {
	t.Parallel()
	ns, probeNS, openNS, leaselessNS := env.NewNamespace(t), env.NewNamespace(t), env.NewNamespace(t), env.NewNamespace(t)
	env.GrantShardedLeases(t, ns)
	const lease, probeLease = "fenced", "probe"
	installFencing(t, map[string]string{ns: lease, probeNS: probeLease, leaselessNS: "missing"})
	a, b := newBoundPod(t), newBoundPod(t)

	// By hand: a Lease held by a, a Deployment in each namespace to write.
	leases := env.Kube.CoordinationV1().Leases(probeNS)
	if _, err := leases.Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: probeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.identity), LeaseDurationSeconds: ptr.To[int32](15)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{probeNS, openNS, leaselessNS} {
		if _, err := env.Kube.AppsV1().Deployments(ns).Create(t.Context(), probeDeployment(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// An empty patch of the Deployment, as a dry run: an update, as the controller
	// writes its Deployments, through authorization and admission, stored nowhere.
	probe := func(c kubernetes.Interface, ns string) error {
		_, err := c.AppsV1().Deployments(ns).Patch(t.Context(), "probe", types.StrategicMergePatchType, []byte("{}"), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	waitAdmitted := func(c kubernetes.Interface) {
		framework.Eventually(t, timeout, "the policy to admit the holder", func(ctx context.Context) (bool, string) {
			err := probe(c, probeNS)
			return err == nil, fmt.Sprint(err)
		})
	}
	// The policy and its binding take effect once the API server has seen them.
	framework.Eventually(t, timeout, "the policy to refuse the Pod that does not hold the Lease", func(ctx context.Context) (bool, string) {
		err := probe(b.client, probeNS)
		return gate.Fenced(err), fmt.Sprint(err)
	})
	waitAdmitted(a.client)
	if err := probe(framework.KubeconfigClient(t, env.ControllerKubeconfig), probeNS); !gate.Fenced(err) || !strings.Contains(err.Error(), "bound to no Pod") {
		t.Errorf("a write with a token bound to no Pod: %v, want the fencing policy's refusal", err)
	}
	if err := probe(b.client, openNS); err != nil {
		t.Errorf("a write where no binding applies: %v, want it admitted", err)
	}
	// The API server looks the Lease up before the policy's matchConditions: a missing
	// Lease must not refuse anyone's writes (a fresh install, a Lease deleted by hand).
	for who, c := range map[string]kubernetes.Interface{"the admin": env.Kube, "a Pod": b.client} {
		if err := probe(c, leaselessNS); err != nil {
			t.Errorf("a write of %s where the binding's Lease is missing: %v, want it admitted", who, err)
		}
	}

	// The policy's lag: the Lease changes hands three times; the old holder writes
	// until refused, then the new one until admitted.
	var oldAdmitted, newRefused []time.Duration
	holder, other := a, b
	for range 3 {
		setHolder(t, probeNS, probeLease, other.identity)
		changed := time.Now()
		oldAdmitted = append(oldAdmitted, untilFenced(t, func() error { return probe(holder.client, probeNS) }, true).Sub(changed))
		newRefused = append(newRefused, untilFenced(t, func() error { return probe(other.client, probeNS) }, false).Sub(changed))
		holder, other = other, holder
	}

	// In flight: the holder's write of a label, held by a proxy, lands after the Lease
	// has changed hands, with the resourceVersion it read; the write itself is valid.
	proxy, err := apiproxy.StartForCluster(t.Context(), env.Cluster, "proxy-fencing-"+holder.pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	throughProxy := filepath.Join(env.OutDir, proxy.Name()+".kubeconfig")
	if err := proxy.WriteKubeconfig(holder.kubeconfig, throughProxy); err != nil {
		t.Fatal(err)
	}
	deployments := framework.KubeconfigClient(t, throughProxy).AppsV1().Deployments(probeNS)
	d, err := deployments.Get(t.Context(), "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	landed := make(chan error, 1)
	go func() {
		// As the controller writes its Deployments: a patch, on the version it read.
		patch := fmt.Sprintf(`{"metadata":{"labels":{"sent-by":"the-old-holder"},"resourceVersion":%q}}`, d.ResourceVersion)
		_, err := deployments.Patch(t.Context(), d.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		landed <- err
	}()
	framework.Eventually(t, timeout, "the proxy to hold the write", func(context.Context) (bool, string) {
		return proxy.Held() > 0, "nothing held"
	})
	setHolder(t, probeNS, probeLease, other.identity)
	waitAdmitted(other.client)
	proxy.Release()
	inFlight := <-landed
	if !gate.Fenced(inFlight) {
		t.Errorf("the old holder's write in flight across the change of holder: %v, want the fencing policy's refusal", inFlight)
	}

	// The cost: the same dry-run write, with the policy and without, alternating.
	var fenced, open []time.Duration
	for range 200 {
		for _, w := range []struct {
			ns    string
			times *[]time.Duration
		}{{probeNS, &fenced}, {openNS, &open}} {
			began := time.Now()
			if err := probe(other.client, w.ns); err != nil {
				t.Fatalf("a write of the holder in %s: %v", w.ns, err)
			}
			*w.times = append(*w.times, time.Since(began))
		}
	}

	// With controllers: the leader stalled, then the Lease edited to name the standby.
	args := []string{
		"--leader-elect", "--leader-elect-resource-namespace=" + ns, "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	standby := newBoundPod(t) // the third Pod, for the replica that replaces the first leader
	const trigger = "trigger" // a Foo the case changes, besides the load's
	createFoo(t, ns, trigger, trigger, 1)
	replicas := []*proxiedController{a.startProxied(t, ns, args...), b.startProxied(t, ns, args...)}
	loadCtx, stopLoad := context.WithCancel(t.Context())
	load := startLoad(loadCtx, t, ns)
	leader, leaderID := waitLeaderOf(t, ns, lease, replicas, "")
	var parts []string
	var heldWrite apiproxy.Write // the stalled leader's write held across the takeover
	heldCode := 0                // and the API server's answer to it
	refusedOfNew := 0            // the new leaders' writes the policy refused before their first admitted one
	for _, fault := range []string{"empty", "stall", "edit"} {
		next := replicas[0]
		if next == leader {
			next = replicas[1]
		}
		waitWrites(t, leader, 3)
		var at time.Time
		switch fault {
		case "empty":
			// Another client empties the holder and a Foo changes at once: the policy
			// refuses the leader's write ("no holder"), which must end nothing, and the
			// leader takes its Lease back at its next renewal. The leader's Lease writes
			// are held meanwhile (at most renewalHold, inside its 3 s renew deadline), so
			// that its write lands while the Lease is empty: unheld, a renewal every
			// 500 ms refilled it first under a loaded suite. Tried again if no write
			// came in between.
			refused, tries := 0, 0
			var lastRefused time.Time
			refusedSince := func(at time.Time) (n int) {
				for _, w := range objectWrites(leader.proxy.Writes()) {
					if w.Sent.After(at) && w.Code == 403 {
						n++
						lastRefused = w.Sent
					}
				}
				return n
			}
			for ; tries < 3 && refused == 0; tries++ {
				release := holdLeaseWrites(leader.proxy, renewalHold)
				at = time.Now()
				setHolder(t, ns, lease, "")
				patchFooSpec(t, ns, trigger, fmt.Sprintf(`{"replicas":%d}`, tries+2))
				for deadline := at.Add(renewalHold); time.Now().Before(deadline) && refusedSince(at) == 0; {
					time.Sleep(50 * time.Millisecond)
				}
				release()
				time.Sleep(2 * 4 * time.Second)
				if kept, _ := waitLeaderOf(t, ns, lease, replicas, ""); kept != leader {
					t.Fatalf("empty: %s holds the Lease emptied under %s, want the leader to take it back", kept.proxy.Name(), leader.proxy.Name())
				}
				refused = refusedSince(at)
			}
			if refused == 0 {
				t.Fatalf("empty: in %d tries, no write of the leader reached the policy while its Lease was empty", tries)
			}
			framework.Eventually(t, timeout, "a write of the leader admitted after it took its Lease back", func(context.Context) (bool, string) {
				return slices.ContainsFunc(objectWrites(leader.proxy.Writes()), func(w apiproxy.Write) bool {
					return w.Sent.After(lastRefused) && w.Code < 300
				}), "none yet"
			})
			parts = append(parts, fmt.Sprintf("empty: the leader took its Lease back and wrote again (%d of its writes refused meanwhile, %d tries)", refused, tries))
			continue
		case "stall":
			// On one of its writes, which the proxy holds whole: a write on the wire
			// when the Lease changes hands. Held, with everything else of the leader's,
			// until the other replica has taken over and written and the leader has
			// exited.
			hit := make(chan apiproxy.Write, 1)
			var once sync.Once
			leader.proxy.BeforeWrite(func(w apiproxy.Write) {
				if isObjectWrite(w) {
					once.Do(func() {
						leader.proxy.Stall()
						hit <- w
					})
				}
			})
			heldWrite = <-hit
			at = time.Now()
		case "edit":
			// Another client names the standby: the leader's tenure is still valid by
			// its own clock until it next renews.
			standbyID := identityOf(t, next)
			at = time.Now()
			setHolder(t, ns, lease, standbyID)
		}
		nextID := ""
		next, nextID = waitLeaderOf(t, ns, lease, []*proxiedController{next}, leaderID)
		waitWrites(t, next, 1)
		select {
		case <-leader.process().Exited():
		case <-time.After(timeout):
			t.Fatalf("%s: the old leader did not exit within %v of losing the Lease", fault, timeout)
		}
		if fault == "stall" {
			leader.proxy.BeforeWrite(nil)
			leader.proxy.Release()
			// The held write lands after the takeover: the policy refuses it (403), or
			// its resourceVersion does (409) if the new leader wrote that object first.
			var landed apiproxy.Write
			framework.Eventually(t, timeout, "the held write to be answered", func(context.Context) (bool, string) {
				i := slices.IndexFunc(leader.proxy.Writes(), func(w apiproxy.Write) bool {
					return w.Received.Equal(heldWrite.Received) && w.Name == heldWrite.Name
				})
				if i < 0 {
					return false, "not yet"
				}
				landed = leader.proxy.Writes()[i]
				return true, ""
			})
			if landed.Code < 300 {
				t.Errorf("stall: the old leader's write held across the takeover was admitted: %v", landed)
			}
			heldCode = landed.Code
		}
		for _, w := range objectWrites(next.proxy.Writes()) {
			if w.Code == 403 {
				refusedOfNew++
			}
		}
		sent, refused, last := judgeOldLeader(t, fault, leader, next, at)
		part := fmt.Sprintf("%s: %d Foo or Deployment writes of the old leader reached the API server after the fault, %d of them refused by the policy", fault, sent, refused)
		if fault == "stall" {
			part += fmt.Sprintf(" (the write held across the takeover, %s %s %s, answered %d)", heldWrite.Method, heldWrite.Resource, heldWrite.Name, heldCode)
		}
		if sent > 0 {
			part += fmt.Sprintf(", the last %.2fs after it", last.Sub(at).Seconds())
		}
		parts = append(parts, part)
		if fault == "stall" {
			replicas = []*proxiedController{next, standby.startProxied(t, ns, args...)}
		}
		leader, leaderID = next, nextID
	}
	waitWrites(t, leader, 3)
	stopLoad()
	foos := append(<-load, trigger)
	settled := checkInvariants(t, ns, foos)

	fmt.Printf("faults: fenced by admission (ValidatingAdmissionPolicy on the Lease, Pod-bound tokens): after a change of holder the old holder's writes were admitted for %s more, the new holder's refused for %s (3 changes); "+
		"a write held in flight across the change was refused; a dry-run Deployment update took %s with the policy and %s without (median of 200, alternating; quartiles %s and %s); "+
		"with controllers, %s; the new leaders had %d writes refused; %d Foos converged %.1fs after the load stopped\n",
		durations(oldAdmitted), durations(newRefused), quantile(fenced, 0.5), quantile(open, 0.5), quartiles(fenced), quartiles(open),
		strings.Join(parts, "; "), refusedOfNew, len(foos), settled.Seconds())
}

// judgeOldLeader fails t for any Foo or Deployment write of old that reached the API
// server after next's first write and was admitted, and counts those of old's writes
// that reached it after at, and of them those the fencing policy refused; last is
// when the last of them was sent.
func judgeOldLeader(t *testing.T, fault string, old, next *proxiedController, at time.Time) (sent, refused int, last time.Time) {
	t.Helper()
	takeover := firstObjectWriteAfter(next, at)
	for _, w := range objectWrites(old.proxy.Writes()) {
		if !w.Sent.After(at) {
			continue
		}
		sent++
		last = w.Sent
		switch {
		case w.Code == 403:
			refused++
		case w.Code < 300 && w.Sent.After(takeover):
			t.Errorf("%s: a write of the old leader reached the API server after the new leader's first write and was admitted: %v", fault, w)
		}
	}
	return sent, refused, last
}

// installFencing creates the fencing component's policy, as kustomize renders it, and
// its bindings, for each namespace one of each bound to the Lease named there and
// matching that namespace alone: the component's name the Lease of artifacts/deploy,
// which no controller of this suite holds.
func installFencing(t *testing.T, leases map[string]string) {
	t.Helper()
	policy, shipped := env.Fencing(t)
	policies := env.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	if _, err := policies.Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })
	bindings := env.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for ns, lease := range leases {
		for _, b := range shipped {
			binding := b.DeepCopy()
			binding.Name += "-" + ns
			binding.Spec.ParamRef.Name, binding.Spec.ParamRef.Namespace = lease, ns
			binding.Spec.MatchResources.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
			if _, err := bindings.Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{}) })
		}
	}
}

// boundPod is a Pod of the controller's ServiceAccount, never scheduled, and a
// kubeconfig with a token bound to it: the policy knows its writes by the Pod's name
// and UID, and a controller given identity's environment takes it in Leases.
type boundPod struct {
	pod        *corev1.Pod
	identity   string
	kubeconfig string
	client     kubernetes.Interface
}

func newBoundPod(t *testing.T) *boundPod {
	t.Helper()
	pods := env.Kube.CoreV1().Pods(framework.DeployNamespace)
	pod, err := pods.Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fencing-"},
		Spec: corev1.PodSpec{
			ServiceAccountName:           framework.ServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			// Nowhere to run: the token needs the Pod, not a container.
			NodeSelector: map[string]string{"sample-controller.test/fencing": "nowhere"},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "controller", Image: "sample-controller",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a Pod to bind a token to: %v", err)
	}
	t.Cleanup(func() { _ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	p := &boundPod{pod: pod, identity: pod.Name + "_" + string(pod.UID), kubeconfig: filepath.Join(env.OutDir, pod.Name+".kubeconfig")}
	p.client = env.PodTokenKubeconfig(t, pod, p.kubeconfig)
	return p
}

// startProxied starts a controller as the Pod: with its token and its identity.
func (p *boundPod) startProxied(t *testing.T, ns string, args ...string) *proxiedController {
	t.Helper()
	c := newProxiedOn(t, env.Cluster, p.kubeconfig, ns, args...)
	c.env = []string{"POD_NAME=" + p.pod.Name, "POD_UID=" + string(p.pod.UID)}
	c.start(t)
	return c
}

// probeDeployment is a Deployment no controller acts on, labelled as the controller's
// own so that the fencing policy's binding matches it, to write to.
func probeDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "probe"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{reconcile.FooUIDLabel: "probe"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
}

// renewalHold is how long holdLeaseWrites holds a leader's Lease write: well inside
// the 3 s renew deadline of the fencing case's controllers, so that the leader keeps
// its Lease.
const renewalHold = 1500 * time.Millisecond

// holdLeaseWrites holds each Lease write through p for at most most, until release:
// a renewal that comes late.
func holdLeaseWrites(p *apiproxy.Proxy, most time.Duration) (release func()) {
	released := make(chan struct{})
	p.BeforeWrite(func(w apiproxy.Write) {
		if w.Resource == "leases" {
			select {
			case <-released:
			case <-time.After(most):
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			p.BeforeWrite(nil)
			close(released)
		})
	}
}

// setHolder has another client name identity the holder of the Lease ns/name.
func setHolder(t *testing.T, ns, name, identity string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"holderIdentity":%q,"renewTime":%q}}`, identity, metav1.NowMicro().Format(metav1.RFC3339Micro))
	if _, err := env.Kube.CoordinationV1().Leases(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// untilFenced writes until the write is refused by the fencing policy (fenced) or
// admitted (!fenced), and returns when that answer was sent for.
func untilFenced(t *testing.T, write func() error, fenced bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		sent := time.Now()
		err := write()
		if gate.Fenced(err) == fenced && (fenced || err == nil) {
			return sent
		}
		if err != nil && !gate.Fenced(err) && !apierrors.IsConflict(err) {
			t.Fatalf("a write while the policy catches up: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the policy did not %s the write within %v", map[bool]string{true: "refuse", false: "admit"}[fenced], timeout)
	return time.Time{}
}

// quantile is the q-th of ds (unsorted), to 10 µs.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return percentile(s, q).Round(10 * time.Microsecond)
}

func quartiles(ds []time.Duration) string {
	return fmt.Sprintf("%s-%s", quantile(ds, 0.25), quantile(ds, 0.75))
}

func durations(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	var parts []string
	for _, d := range s {
		parts = append(parts, d.Round(time.Millisecond).String())
	}
	return strings.Join(parts, ", ")
}
