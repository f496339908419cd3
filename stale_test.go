package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
)

// TestRunOnStaleState runs the controller on informers that see the API server late,
// or not at all in between, while users scale, rename and recreate Foos and delete an
// owned Deployment by hand. Whatever the controller saw on the way, the API server
// must end in the state the Foos ask for, the controller must not have written more
// than the changes call for, and it must never have sent an update from a copy older
// than its own last write of that object: that is what staleness mitigation prevents.
func TestRunOnStaleState(t *testing.T) {
	// Long enough that the users' edits and the controller's next syncs fall inside
	// it, short enough to keep the test quick.
	const lag = 300 * time.Millisecond
	for _, tc := range []struct {
		name                   string
		deployments, foos      fakeapiserver.WatchFault
		wantDroppedDeployments bool
	}{
		{
			name:        "Deployment watch lags",
			deployments: fakeapiserver.WatchFault{Lag: lag},
		},
		{
			name: "Foo watch lags",
			foos: fakeapiserver.WatchFault{Lag: lag},
		},
		{
			// A later event of the same object follows at once, so that every
			// event the informer applies still leaves it as the API server was at
			// that resourceVersion.
			name:                   "Deployment watch loses intermediate states",
			deployments:            fakeapiserver.WatchFault{Lag: lag, Coalesce: true},
			wantDroppedDeployments: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStaleScenario(t, tc.deployments, tc.foos)
			s.run()
			s.report()
			if tc.wantDroppedDeployments && s.deployments.Dropped() == 0 {
				t.Error("no Deployment event was dropped: the case tested nothing")
			}
		})
	}
}

// TestStaleCacheSparesADeploymentTakenOver: a user takes a Foo's Deployment over (drops
// its controller reference, to keep it running on its own) and renames the Foo at once,
// while the controller's Deployment watch still shows the Foo controlling it. The
// controller creates the new Deployment and must leave the old one alone.
func TestStaleCacheSparesADeploymentTakenOver(t *testing.T) {
	// The controller's Deployment watch sees every change a second late: the rename's
	// sync falls well inside that on a loaded machine.
	s := startStaleScenario(t, fakeapiserver.WatchFault{Lag: time.Second}, fakeapiserver.WatchFault{})
	s.waitConverged("the first Deployments")

	if err := s.deployments.Edit(metav1.NamespaceDefault, "api", func(obj runtime.Object) {
		obj.(metav1.Object).SetOwnerReferences(nil)
	}); err != nil {
		t.Fatal(err)
	}
	s.userEditFoo("api", func(foo *samplev1alpha1.Foo) { foo.Spec.DeploymentName = "api-v2" })
	s.waitServer("api's new Deployment", func() bool { return s.deploymentReplicas("api-v2") == 1 })
	s.waitQuiet()
	if s.deploymentReplicas("api") == 0 {
		t.Error("the controller deleted Deployment api, which its Foo no longer controlled")
	}
	if n := s.deployments.Counts().Conflicts; n == 0 {
		t.Error("no delete of api was refused: the controller decided on a fresh cache, and the case tested nothing")
	}
}

// staleScenario is one run of the controller against fake API servers whose watches
// are faulty, with the actors of a cluster around it: users, the garbage collector and
// the Deployment controller.
type staleScenario struct {
	t                 *testing.T
	ctx               context.Context
	kubeclient        *k8sfake.Clientset
	client            *fake.Clientset
	controller        *Controller
	deployments, foos *fakeapiserver.Server
	skipsBefore       map[string]float64
	originalWebUID    types.UID
	// orphans counts the Deployments the controller created for a Foo that the API
	// server no longer had.
	orphans atomic.Int64
}

func startStaleScenario(t *testing.T, deploymentsFault, foosFault fakeapiserver.WatchFault) *staleScenario {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	s := &staleScenario{
		t:           t,
		ctx:         ctx,
		kubeclient:  k8sfake.NewClientset(),
		client:      fake.NewClientset(),
		skipsBefore: map[string]float64{},
	}
	s.deployments = fakeapiserver.New(s.kubeclient, deploymentsResource, "Deployment", deploymentsFault)
	s.foos = fakeapiserver.New(s.client, foosResource, "Foo", foosFault)
	s.deployments.OnCreate(func(obj runtime.Object) {
		ref := metav1.GetControllerOf(obj.(metav1.Object))
		foo, err := s.foos.Get(metav1.NamespaceDefault, ref.Name)
		if err != nil || foo.(metav1.Object).GetUID() != ref.UID {
			s.orphans.Add(1)
		}
	})
	for _, name := range []string{"web", "api", "db"} {
		foo := newFoo(name, ptr.To[int32](1))
		foo.UID = uuid.NewUUID()
		s.userCreate(foo)
		if name == "web" {
			s.originalWebUID = foo.UID
		}
	}
	for _, resource := range []string{writes.Foos, writes.Deployments} {
		s.skipsBefore[resource] = testutil.ToFloat64(staleSkipsTotal.WithLabelValues(resource))
	}
	go s.collectGarbage(ctx)
	go s.rollOut(ctx)
	s.controller, _ = runController(t, ctx, s.kubeclient, s.client, 2)
	// After runController's: cleanups run last first, and the informer factories
	// shut down only once ctx is cancelled.
	t.Cleanup(cancel)
	return s
}

// run converges the Foos, edits them as users do, each edit made while the
// controller's view of the last one may still be stale, and waits until the API
// server holds what the Foos ask for and the controller has stopped writing.
func (s *staleScenario) run() {
	s.waitConverged("the first Deployments")

	// Scale twice, the second time right after the controller has acted on the first:
	// its cache may still hold the Deployment it just updated as it was before.
	s.userEditFoo("web", func(foo *samplev1alpha1.Foo) { foo.Spec.Replicas = ptr.To[int32](2) })
	s.waitServer("web scaled to 2", func() bool { return s.deploymentReplicas("web") == 2 })
	s.userEditFoo("web", func(foo *samplev1alpha1.Foo) { foo.Spec.Replicas = ptr.To[int32](3) })

	// Rename, and rename back once the controller has moved to the new name and
	// deleted the old one: its cache may still show the old one.
	s.userEditFoo("api", func(foo *samplev1alpha1.Foo) { foo.Spec.DeploymentName = "api-v2" })
	s.waitServer("api's Deployment renamed", func() bool {
		return s.deploymentReplicas("api-v2") == 1 && s.deploymentReplicas("api") == 0
	})
	s.userEditFoo("api", func(foo *samplev1alpha1.Foo) { foo.Spec.DeploymentName = "api" })

	// Delete an owned Deployment by hand, and scale its Foo at once.
	s.userDeleteDeployment("db")
	s.userEditFoo("db", func(foo *samplev1alpha1.Foo) { foo.Spec.Replicas = ptr.To[int32](2) })

	// Replace a Foo (kubectl replace --force): a new UID under the same name, while
	// the garbage collector removes its predecessor's Deployment. Then scale it.
	s.userDeleteFoo("web")
	recreated := newFoo("web", ptr.To[int32](4))
	recreated.UID = uuid.NewUUID()
	s.userCreate(recreated)
	s.userEditFoo("web", func(foo *samplev1alpha1.Foo) { foo.Spec.Replicas = ptr.To[int32](5) })

	s.waitConverged("the edited Foos")
	s.waitQuiet()
	s.checkInvariants()
}

// waitConverged waits until the invariants hold on the API server. Well within the
// controller's one-minute rechecks: every change that ends a wait must wake the Foo.
func (s *staleScenario) waitConverged(what string) {
	s.t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(s.ctx, 20*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		last = s.violation()
		return last == "", nil
	}); err != nil {
		s.t.Fatalf("waiting for %s: %v; last violation: %s", what, err, last)
	}
}

// waitServer waits until the API server shows that the controller acted.
func (s *staleScenario) waitServer(what string, done func() bool) {
	s.t.Helper()
	if err := wait.PollUntilContextTimeout(s.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return done(), nil
	}); err != nil {
		s.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitQuiet waits until the controller has nothing queued and has written nothing
// for longer than a lagging watch takes to bring in its last write.
func (s *staleScenario) waitQuiet() {
	s.t.Helper()
	quiet := 3 * max(s.deployments.Fault().Lag, s.foos.Fault().Lag, 100*time.Millisecond)
	writes, since := s.writes(), time.Now()
	if err := wait.PollUntilContextTimeout(s.ctx, 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		if now := s.writes(); now != writes || s.controller.workqueue.Len() > 0 {
			writes, since = now, time.Now()
		}
		return time.Since(since) > quiet, nil
	}); err != nil {
		s.t.Fatalf("the controller kept writing: %d writes, last at %v: %v", writes, since, err)
	}
}

// writes is the number of the controller's writes, refused ones included.
func (s *staleScenario) writes() int {
	d, f := s.deployments.Counts(), s.foos.Counts()
	return d.Creates + d.Updates + d.Deletes + d.Conflicts + d.NotFound + f.Updates + f.Conflicts + f.NotFound
}

// violation returns the first invariant the API server's state breaks, or "".
func (s *staleScenario) violation() string {
	foos, err := s.client.SamplecontrollerV1alpha1().Foos(metav1.NamespaceDefault).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	deployments, err := s.kubeclient.AppsV1().Deployments(metav1.NamespaceDefault).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	if len(foos.Items) != 3 {
		return fmt.Sprintf("%d Foos, want 3", len(foos.Items))
	}
	controlled := map[types.UID][]appsv1.Deployment{}
	for _, d := range deployments.Items {
		ref := metav1.GetControllerOf(&d)
		if ref == nil {
			return fmt.Sprintf("Deployment %s has no controller", d.Name)
		}
		controlled[ref.UID] = append(controlled[ref.UID], d)
	}
	for _, foo := range foos.Items {
		ds := controlled[foo.UID]
		delete(controlled, foo.UID)
		if len(ds) != 1 {
			return fmt.Sprintf("Foo %s controls %d Deployments, want 1", foo.Name, len(ds))
		}
		d, want := ds[0], ptr.Deref(foo.Spec.Replicas, 1)
		switch {
		case d.Name != foo.Spec.DeploymentName:
			return fmt.Sprintf("Foo %s controls Deployment %s, want %s", foo.Name, d.Name, foo.Spec.DeploymentName)
		case ptr.Deref(d.Spec.Replicas, 1) != want:
			return fmt.Sprintf("Deployment %s has %d replicas, want %d", d.Name, ptr.Deref(d.Spec.Replicas, 1), want)
		case foo.Status.ObservedGeneration != foo.Generation:
			return fmt.Sprintf("Foo %s observed generation %d of %d", foo.Name, foo.Status.ObservedGeneration, foo.Generation)
		case foo.Status.AvailableReplicas != d.Status.AvailableReplicas || d.Status.AvailableReplicas != want:
			return fmt.Sprintf("Foo %s reports %d available replicas, its Deployment %d, want %d",
				foo.Name, foo.Status.AvailableReplicas, d.Status.AvailableReplicas, want)
		}
		ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != foo.Generation {
			return fmt.Sprintf("Foo %s is not Ready for generation %d: %+v", foo.Name, foo.Generation, ready)
		}
	}
	for uid, ds := range controlled {
		return fmt.Sprintf("Deployment %s is controlled by %s, which is no Foo", ds[0].Name, uid)
	}
	return ""
}

// checkInvariants fails the test if the converged state does not hold once the
// controller has stopped writing.
func (s *staleScenario) checkInvariants() {
	s.t.Helper()
	if v := s.violation(); v != "" {
		s.t.Errorf("after the controller stopped writing: %s", v)
	}
	web, err := s.client.SamplecontrollerV1alpha1().Foos(metav1.NamespaceDefault).Get(s.ctx, "web", metav1.GetOptions{})
	if err != nil || web.UID == s.originalWebUID {
		s.t.Errorf("Foo web was not replaced: %v", err)
	}
}

// report prints what the case measured and checks the writes.
func (s *staleScenario) report() {
	s.t.Helper()
	d, f := s.deployments.Counts(), s.foos.Counts()
	skips := map[string]float64{}
	for resource, before := range s.skipsBefore {
		skips[resource] = testutil.ToFloat64(staleSkipsTotal.WithLabelValues(resource)) - before
	}
	s.t.Logf("deployments: %d creates, %d updates, %d deletes, %d conflicts (%d from a copy older than the controller's own write), %d writes of a deleted Deployment; %d events dropped",
		d.Creates, d.Updates, d.Deletes, d.Conflicts, d.StaleConflicts, d.NotFound, s.deployments.Dropped())
	s.t.Logf("foos/status: %d updates, %d conflicts (%d from a copy older than the controller's own write)",
		f.Updates, f.Conflicts, f.StaleConflicts)
	s.t.Logf("syncs skipped for a stale cache: %v foos, %v deployments", skips[writes.Foos], skips[writes.Deployments])
	s.t.Logf("Deployments created for a Foo that no longer existed: %d", s.orphans.Load())

	if n := s.orphans.Load(); n > 0 {
		s.t.Errorf("%d Deployments created for a Foo that the API server no longer had", n)
	}
	if d.StaleConflicts+f.StaleConflicts > 0 {
		s.t.Errorf("%d updates were sent from a copy older than the controller's own last write of the object", d.StaleConflicts+f.StaleConflicts)
	}
	// The least the scenario needs: 3 + 1 (rename) + 1 (rename back) + 1 (hand
	// delete) + 1 (replace) creates; 3 scales of an existing Deployment.
	if d.Creates > 10 || d.Updates > 6 || d.Deletes > 5 {
		s.t.Errorf("Deployments: %d creates, %d updates, %d deletes; want at most 10, 6 and 5", d.Creates, d.Updates, d.Deletes)
	}
	if f.Updates > 40 {
		s.t.Errorf("%d status writes, want at most 40", f.Updates)
	}
}

// Users and the cluster's other controllers act on the API server directly, not
// through the clientsets, so that only the controller's requests are counted.

func (s *staleScenario) userCreate(foo *samplev1alpha1.Foo) {
	s.t.Helper()
	if _, err := s.foos.Create(foo); err != nil {
		s.t.Fatal(err)
	}
}

func (s *staleScenario) userEditFoo(name string, edit func(*samplev1alpha1.Foo)) {
	s.t.Helper()
	if err := s.foos.Edit(metav1.NamespaceDefault, name, func(obj runtime.Object) { edit(obj.(*samplev1alpha1.Foo)) }); err != nil {
		s.t.Fatal(err)
	}
}

func (s *staleScenario) userDeleteFoo(name string) {
	s.t.Helper()
	if err := s.foos.Remove(metav1.NamespaceDefault, name, nil); err != nil {
		s.t.Fatal(err)
	}
}

func (s *staleScenario) userDeleteDeployment(name string) {
	s.t.Helper()
	if err := s.deployments.Remove(metav1.NamespaceDefault, name, nil); err != nil {
		s.t.Fatal(err)
	}
}

// deploymentReplicas is the spec.replicas of the named Deployment on the API server,
// 0 when it does not exist.
func (s *staleScenario) deploymentReplicas(name string) int32 {
	obj, err := s.deployments.Get(metav1.NamespaceDefault, name)
	if err != nil {
		return 0
	}
	return ptr.Deref(obj.(*appsv1.Deployment).Spec.Replicas, 1)
}

// storedDeployments are the Deployments on the API server.
func (s *staleScenario) storedDeployments() []*appsv1.Deployment {
	var ds []*appsv1.Deployment
	for _, obj := range s.deployments.List() {
		ds = append(ds, obj.(*appsv1.Deployment))
	}
	return ds
}

// collectGarbage deletes, as the garbage collector does, every Deployment whose
// controlling Foo no longer exists, checking the owner on the API server.
func (s *staleScenario) collectGarbage(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, false, func(context.Context) (bool, error) {
		for _, d := range s.storedDeployments() {
			ref := metav1.GetControllerOf(d)
			if ref == nil {
				continue
			}
			foo, err := s.foos.Get(d.Namespace, ref.Name)
			if err == nil && foo.(metav1.Object).GetUID() == ref.UID {
				continue
			}
			_ = s.deployments.Remove(d.Namespace, d.Name, &metav1.Preconditions{UID: &d.UID})
		}
		return false, nil
	})
}

// rollOut plays the Deployment controller: it brings each Deployment's status to its
// spec in three status writes in a row (observed, ready, available), as Pods come up.
func (s *staleScenario) rollOut(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, false, func(context.Context) (bool, error) {
		for _, d := range s.storedDeployments() {
			final := d.DeepCopy()
			for _, step := range rolloutSteps {
				step(final)
			}
			if equality.Semantic.DeepEqual(final.Status, d.Status) {
				continue
			}
			_ = s.deployments.EditStatusInARow(d.Namespace, d.Name, d.UID, len(rolloutSteps), func(i int, obj runtime.Object) {
				rolloutSteps[i](obj.(*appsv1.Deployment))
			})
		}
		return false, nil
	})
}

// rolloutSteps are the status writes of a Deployment's rollout, in order.
var rolloutSteps = []func(*appsv1.Deployment){
	func(d *appsv1.Deployment) {
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := &d.Status
		st.ObservedGeneration, st.Replicas, st.UpdatedReplicas = d.Generation, want, want
		st.ReadyReplicas, st.AvailableReplicas = min(st.ReadyReplicas, want), min(st.AvailableReplicas, want)
	},
	func(d *appsv1.Deployment) { d.Status.ReadyReplicas = ptr.Deref(d.Spec.Replicas, 1) },
	func(d *appsv1.Deployment) { d.Status.AvailableReplicas = ptr.Deref(d.Spec.Replicas, 1) },
}

// TestSyncOnAFooOlderThanItsDeployments syncs a Foo whose cached copy is a spec behind
// the API server, while the Deployment cache already holds what the newer spec made:
// a new leader's warm cache whose Foo watch lags, or a Foo watch that relisted from a
// lagging watch cache. Every check the writes make of the Deployment (its UID, its
// resourceVersion) passes; only the Foo is old. The controller must write no
// Deployment from it, and sync the Foo once the cache holds the newer spec.
func TestSyncOnAFooOlderThanItsDeployments(t *testing.T) {
	// cached is the Foo as the lagging cache holds it: at generation 1, synced.
	foo := newFoo("web", ptr.To[int32](3))
	cached := withStatus(foo, availableDeployment(foo))
	for _, tc := range []struct {
		name string
		// current is the Foo's newer spec; its Deployments are as the leader before
		// left them for it, in the cache and on the server.
		current func(*samplev1alpha1.Foo)
	}{
		{
			// From the old spec, the new Deployment looks left from a rename, and the
			// old name free to take again.
			name:    "renamed",
			current: func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2" },
		},
		{
			name:    "scaled",
			current: func(f *samplev1alpha1.Foo) { f.Spec.Replicas = ptr.To[int32](5) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current := modifiedFoo(cached, func(f *samplev1alpha1.Foo) {
				tc.current(f)
				f.Generation, f.ResourceVersion = 2, fakeapiserver.NextResourceVersion()
			})
			current.Status = calculatedStatus(withoutRecords(current), availableDeployment(current), now)
			made := availableDeployment(current)
			f := newFixture(t, []*samplev1alpha1.Foo{cached}, []*appsv1.Deployment{made}, nil)
			if err := f.client.Tracker().Update(foosResource, current, current.Namespace); err != nil {
				t.Fatal(err)
			}
			fakeapiserver.Versioned(f.kubeclient, deploymentsResource)
			skips := testutil.ToFloat64(staleSkipsTotal.WithLabelValues(writes.Foos))

			if err := f.sync(cached); !errors.Is(err, errStaleCache) {
				t.Errorf("sync of a Foo older than its Deployment: err = %v, want errStaleCache", err)
			}
			f.checkActions([]action{get(foosResource, "web")})
			if got := testutil.ToFloat64(staleSkipsTotal.WithLabelValues(writes.Foos)) - skips; got != 1 {
				t.Errorf("stale skips counted = %v, want 1", got)
			}
			// Another event of the Foo before the cache has the new spec (its own
			// status, say) changes nothing: the sync waits, and reads nothing.
			f.client.ClearActions()
			if err := f.sync(cached); !errors.Is(err, errStaleCache) {
				t.Errorf("second sync before the cache caught up: err = %v, want errStaleCache", err)
			}
			f.checkActions(nil)

			// The cache catches up: its event wakes the Foo, whose sync has nothing
			// to do.
			if err := f.controller.foosIndexer.Update(current.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			f.controller.onFooUpdate(current.DeepCopy())
			if diff := cmp.Diff([]cache.ObjectName{cache.MetaObjectToName(current)}, queued(f.controller)); diff != "" {
				t.Errorf("the event that brought the newer spec did not wake the Foo: queued mismatch (-want +got):\n%s", diff)
			}
			f.client.ClearActions()
			if err := f.sync(current); err != nil {
				t.Errorf("sync once the cache caught up: %v", err)
			}
			f.checkActions(nil)
		})
	}
}

// TestSyncOnDeploymentsOlderThanTheFoo is the other order of the two watches: the Foo
// cache holds the new spec, the Deployment cache the Deployments as they were before
// the leader before wrote for it. The writes are conditional on what the cache holds:
// the API server refuses them, and nothing is undone.
func TestSyncOnDeploymentsOlderThanTheFoo(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](3))
	before := availableDeployment(foo)
	for _, tc := range []struct {
		name    string
		current func(*samplev1alpha1.Foo)
		// onServer is what the leader before wrote, which the cache has not seen.
		onServer func(current *samplev1alpha1.Foo) []*appsv1.Deployment
	}{
		{
			// The new Deployment exists and the old one is gone: the create finds the
			// name taken by the Foo's own, and the delete finds nothing.
			name:    "renamed",
			current: func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2" },
			onServer: func(current *samplev1alpha1.Foo) []*appsv1.Deployment {
				return []*appsv1.Deployment{availableDeployment(current)}
			},
		},
		{
			// Scaled, then changed by hand since: the patch from the old copy is
			// refused.
			name:    "scaled",
			current: func(f *samplev1alpha1.Foo) { f.Spec.Replicas = ptr.To[int32](5) },
			onServer: func(current *samplev1alpha1.Foo) []*appsv1.Deployment {
				return []*appsv1.Deployment{modified(availableDeployment(current), func(d *appsv1.Deployment) {
					d.ResourceVersion = fakeapiserver.NextResourceVersion()
					d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
				})}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current := modifiedFoo(withStatus(foo, before), func(f *samplev1alpha1.Foo) { tc.current(f); f.Generation = 2 })
			f := newFixture(t, []*samplev1alpha1.Foo{current}, nil, nil)
			if err := f.controller.deploymentsIndexer.Add(cachedCopy(before)); err != nil {
				t.Fatal(err)
			}
			if err := f.kubeclient.Tracker().Add(before); err != nil {
				t.Fatal(err)
			}
			for _, d := range tc.onServer(current) {
				if err := f.kubeclient.Tracker().Delete(deploymentsResource, d.Namespace, d.Name); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				if err := f.kubeclient.Tracker().Add(d); err != nil {
					t.Fatal(err)
				}
			}
			if current.Spec.DeploymentName != before.Name {
				// The leader before deleted the old Deployment.
				if err := f.kubeclient.Tracker().Delete(deploymentsResource, before.Namespace, before.Name); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]*appsv1.Deployment{}
			for _, d := range f.storedDeployments(t) {
				want[d.Name] = d
			}
			fakeapiserver.Versioned(f.kubeclient, deploymentsResource)

			_ = f.sync(current)
			got := map[string]*appsv1.Deployment{}
			for _, d := range f.storedDeployments(t) {
				got[d.Name] = d
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("the sync changed the Deployments the API server holds:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// storedDeployments lists the Deployments the fixture's fake API server holds.
func (f *fixture) storedDeployments(t *testing.T) []*appsv1.Deployment {
	t.Helper()
	objs, err := f.kubeclient.Tracker().List(deploymentsResource, appsv1.SchemeGroupVersion.WithKind("Deployment"), metav1.NamespaceDefault)
	if err != nil {
		t.Fatal(err)
	}
	var ds []*appsv1.Deployment
	for _, d := range objs.(*appsv1.DeploymentList).Items {
		ds = append(ds, d.DeepCopy())
	}
	return ds
}

// TestANewLeaderWaitsForThePresent checks a new leader's comparison of its warm caches
// with the API server (catchUp): each Foo the caches hold behind the server, its own
// copy or one of its Deployments, waits for the cache to hold the version listed, and
// so does a Foo the server no longer has; a Foo the caches hold as the server does
// syncs at once.
func TestANewLeaderWaitsForThePresent(t *testing.T) {
	ready := func(name string) (*samplev1alpha1.Foo, *appsv1.Deployment) {
		foo := newFoo(name, ptr.To[int32](1))
		foo.UID = types.UID(name + "-uid")
		d := availableDeployment(foo)
		return withStatus(foo, d), d
	}
	for _, tc := range []struct {
		name string
		// server changes what the API server lists from what the caches hold.
		server func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) (listed []metav1.Object)
		// wantWait is the resource whose cache the Foo waits for; empty for none.
		wantWait string
	}{{
		name:   "caches as the server has them",
		server: func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object { return []metav1.Object{foo, d} },
	}, {
		name: "Foo newer on the server",
		server: func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object {
			foo = modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.ResourceVersion = "3" })
			return []metav1.Object{foo, d}
		},
		wantWait: writes.Foos,
	}, {
		name:     "Foo deleted on the server",
		server:   func(_ *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object { return []metav1.Object{d} },
		wantWait: writes.Foos,
	}, {
		name: "Foo recreated on the server",
		server: func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object {
			foo = modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.UID, f.ResourceVersion = "web-uid-2", "3" })
			return []metav1.Object{foo}
		},
		wantWait: writes.Foos,
	}, {
		// The new Foo's Deployment, which the cache has not seen, must not stand for
		// the cached Foo of its name.
		name: "Foo recreated on the server with its Deployment",
		server: func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object {
			foo = modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
				f.UID, f.ResourceVersion, f.Spec.DeploymentName = "web-uid-2", "3", "web-v2"
			})
			made := availableDeployment(foo)
			made.ResourceVersion = "4"
			return []metav1.Object{foo, made}
		},
		wantWait: writes.Foos,
	}, {
		name: "Deployment newer on the server",
		server: func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object {
			return []metav1.Object{foo, modified(d, func(d *appsv1.Deployment) { d.ResourceVersion = "3" })}
		},
		wantWait: writes.Deployments,
	}, {
		name: "Deployment the cache has not seen",
		server: func(foo *samplev1alpha1.Foo, d *appsv1.Deployment) []metav1.Object {
			unseen := availableDeployment(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2" }))
			unseen.ResourceVersion = "3"
			return []metav1.Object{foo, d, unseen}
		},
		wantWait: writes.Deployments,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			foo, d := ready("web")
			f := newFixture(t, []*samplev1alpha1.Foo{foo}, []*appsv1.Deployment{d}, nil)
			client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
			listMetadata(client, "5", tc.server(foo, d))
			skips := map[string]float64{}
			for _, r := range []string{writes.Foos, writes.Deployments} {
				skips[r] = testutil.ToFloat64(staleSkipsTotal.WithLabelValues(r))
			}

			_, ctx := ktesting.NewTestContext(t)
			foos, deployments, err := expectThePresent(ctx, f.controller, client, "")
			if err != nil {
				t.Fatal(err)
			}
			behind := map[string]int{writes.Foos: foos, writes.Deployments: deployments}
			err = f.sync(foo)
			if tc.wantWait == "" {
				if err != nil || foos+deployments != 0 {
					t.Errorf("sync on caches as the server has them: err = %v, %d Foos and %d Deployments behind; want no error, none behind", err, foos, deployments)
				}
				return
			}
			if !errors.Is(err, errStaleCache) {
				t.Errorf("sync on caches behind the server: err = %v, want errStaleCache", err)
			}
			f.checkActions(nil)
			if behind[tc.wantWait] != 1 {
				t.Errorf("behind = %v, want 1 of %s", behind, tc.wantWait)
			}
			if got := testutil.ToFloat64(staleSkipsTotal.WithLabelValues(tc.wantWait)) - skips[tc.wantWait]; got != 1 {
				t.Errorf("stale skips of %s = %v, want 1", tc.wantWait, got)
			}
		})
	}
}

// listMetadata has client list the metadata of objects, Foos and Deployments, each
// list at resourceVersion rv, as a metadata client's lists of an API server.
func listMetadata(client *metadatafake.FakeMetadataClient, rv string, objects []metav1.Object) {
	lists := map[string]*metav1.List{
		"foos":        {ListMeta: metav1.ListMeta{ResourceVersion: rv}},
		"deployments": {ListMeta: metav1.ListMeta{ResourceVersion: rv}},
	}
	for _, obj := range objects {
		m, resource := &metav1.PartialObjectMetadata{}, "foos"
		switch obj := obj.(type) {
		case *samplev1alpha1.Foo:
			m.ObjectMeta = *obj.ObjectMeta.DeepCopy()
		case *appsv1.Deployment:
			m.ObjectMeta, resource = *obj.ObjectMeta.DeepCopy(), "deployments"
		}
		lists[resource].Items = append(lists[resource].Items, runtime.RawExtension{Object: m})
	}
	client.PrependReactor("list", "*", func(a core.Action) (bool, runtime.Object, error) {
		return true, lists[a.GetResource().Resource].DeepCopy(), nil
	})
}
