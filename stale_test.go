package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

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
		deployments, foos      watchFault
		wantDroppedDeployments bool
	}{
		{
			name:        "Deployment watch lags",
			deployments: watchFault{lag: lag},
		},
		{
			name: "Foo watch lags",
			foos: watchFault{lag: lag},
		},
		{
			// A later event of the same object follows at once, so that every
			// event the informer applies still leaves it as the API server was at
			// that resourceVersion.
			name:                   "Deployment watch loses intermediate states",
			deployments:            watchFault{lag: lag, coalesce: true},
			wantDroppedDeployments: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStaleScenario(t, tc.deployments, tc.foos)
			s.run()
			s.report()
			if tc.wantDroppedDeployments && s.deployments.dropped.Load() == 0 {
				t.Error("no Deployment event was dropped: the case tested nothing")
			}
		})
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
	deployments, foos *apiServer
	skipsBefore       map[string]float64
	originalWebUID    types.UID
	// orphans counts the Deployments the controller created for a Foo that the API
	// server no longer had.
	orphans atomic.Int64
}

func startStaleScenario(t *testing.T, deploymentsFault, foosFault watchFault) *staleScenario {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	s := &staleScenario{
		t:           t,
		ctx:         ctx,
		kubeclient:  k8sfake.NewClientset(),
		client:      fake.NewClientset(),
		skipsBefore: map[string]float64{},
	}
	s.deployments = newAPIServer(s.kubeclient, deploymentsResource, deploymentsFault)
	s.foos = newAPIServer(s.client, foosResource, foosFault)
	s.deployments.created = func(obj runtime.Object) {
		ref := metav1.GetControllerOf(obj.(metav1.Object))
		foo, err := s.foos.tracker.Get(foosResource, metav1.NamespaceDefault, ref.Name)
		if err != nil || foo.(metav1.Object).GetUID() != ref.UID {
			s.orphans.Add(1)
		}
	}
	for _, name := range []string{"web", "api", "db"} {
		foo := newFoo(name, ptr.To[int32](1))
		foo.UID = uuid.NewUUID()
		s.userCreate(foo)
		if name == "web" {
			s.originalWebUID = foo.UID
		}
	}
	for _, resource := range []string{resourceFoos, resourceDeployments} {
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
	quiet := 3 * max(s.deployments.fault.lag, s.foos.fault.lag, 100*time.Millisecond)
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
	d, f := s.deployments.counts(), s.foos.counts()
	return d.creates + d.updates + d.deletes + d.conflicts + d.notFound + f.updates + f.conflicts + f.notFound
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
	d, f := s.deployments.counts(), s.foos.counts()
	skips := map[string]float64{}
	for resource, before := range s.skipsBefore {
		skips[resource] = testutil.ToFloat64(staleSkipsTotal.WithLabelValues(resource)) - before
	}
	s.t.Logf("deployments: %d creates, %d updates, %d deletes, %d conflicts (%d from a copy older than the controller's own write), %d updates of a deleted Deployment; %d events dropped",
		d.creates, d.updates, d.deletes, d.conflicts, d.staleConflicts, d.notFound, s.deployments.dropped.Load())
	s.t.Logf("foos/status: %d updates, %d conflicts (%d from a copy older than the controller's own write)",
		f.updates, f.conflicts, f.staleConflicts)
	s.t.Logf("syncs skipped for a stale cache: %v foos, %v deployments", skips[resourceFoos], skips[resourceDeployments])
	s.t.Logf("Deployments created for a Foo that no longer existed: %d", s.orphans.Load())

	if n := s.orphans.Load(); n > 0 {
		s.t.Errorf("%d Deployments created for a Foo that the API server no longer had", n)
	}
	if d.staleConflicts+f.staleConflicts > 0 {
		s.t.Errorf("%d updates were sent from a copy older than the controller's own last write of the object", d.staleConflicts+f.staleConflicts)
	}
	// The least the scenario needs: 3 + 1 (rename) + 1 (rename back) + 1 (hand
	// delete) + 1 (replace) creates; 3 scales of an existing Deployment.
	if d.creates > 10 || d.updates > 6 || d.deletes > 5 {
		s.t.Errorf("Deployments: %d creates, %d updates, %d deletes; want at most 10, 6 and 5", d.creates, d.updates, d.deletes)
	}
	if f.updates > 40 {
		s.t.Errorf("%d status writes, want at most 40", f.updates)
	}
}

// Users and the cluster's other controllers act on the API server directly, not
// through the clientsets, so that only the controller's requests are counted.

func (s *staleScenario) userCreate(foo *samplev1alpha1.Foo) {
	s.t.Helper()
	if _, err := s.foos.create(foo); err != nil {
		s.t.Fatal(err)
	}
}

func (s *staleScenario) userEditFoo(name string, edit func(*samplev1alpha1.Foo)) {
	s.t.Helper()
	if err := s.foos.edit(metav1.NamespaceDefault, name, func(obj runtime.Object) { edit(obj.(*samplev1alpha1.Foo)) }); err != nil {
		s.t.Fatal(err)
	}
}

func (s *staleScenario) userDeleteFoo(name string) {
	s.t.Helper()
	if err := s.foos.remove(metav1.NamespaceDefault, name, nil); err != nil {
		s.t.Fatal(err)
	}
}

func (s *staleScenario) userDeleteDeployment(name string) {
	s.t.Helper()
	if err := s.deployments.remove(metav1.NamespaceDefault, name, nil); err != nil {
		s.t.Fatal(err)
	}
}

// deploymentReplicas is the spec.replicas of the named Deployment on the API server,
// 0 when it does not exist.
func (s *staleScenario) deploymentReplicas(name string) int32 {
	obj, err := s.deployments.tracker.Get(deploymentsResource, metav1.NamespaceDefault, name)
	if err != nil {
		return 0
	}
	return ptr.Deref(obj.(*appsv1.Deployment).Spec.Replicas, 1)
}

// collectGarbage deletes, as the garbage collector does, every Deployment whose
// controlling Foo no longer exists, checking the owner on the API server.
func (s *staleScenario) collectGarbage(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, false, func(context.Context) (bool, error) {
		for _, d := range s.deployments.list() {
			ref := metav1.GetControllerOf(d)
			if ref == nil {
				continue
			}
			foo, err := s.foos.tracker.Get(foosResource, d.Namespace, ref.Name)
			if err == nil && foo.(metav1.Object).GetUID() == ref.UID {
				continue
			}
			_ = s.deployments.remove(d.Namespace, d.Name, &metav1.Preconditions{UID: &d.UID})
		}
		return false, nil
	})
}

// rollOut plays the Deployment controller: it brings each Deployment's status to its
// spec in three status writes in a row (observed, ready, available), as Pods come up.
func (s *staleScenario) rollOut(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, false, func(context.Context) (bool, error) {
		for _, d := range s.deployments.list() {
			final := d.DeepCopy()
			for _, step := range rolloutSteps {
				step(final)
			}
			if equality.Semantic.DeepEqual(final.Status, d.Status) {
				continue
			}
			_ = s.deployments.editInARow(d.Namespace, d.Name, d.UID, len(rolloutSteps), func(i int, obj runtime.Object) {
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

// watchFault is how a watch of the fake API server misbehaves.
type watchFault struct {
	// lag delays every event.
	lag time.Duration
	// coalesce drops an update event when the next event in the stream is of the
	// same object: the informer applies only the last of a run of changes. Nothing
	// else comes in between, so every resourceVersion the informer reaches still
	// describes the API server's state at that version, as a real watch does.
	coalesce bool
}

// apiServer makes a fake clientset's writes of one resource behave as a real API
// server's do where the controller's correctness depends on it, and counts the
// controller's requests:
//   - writes are applied one at a time, each with a new resourceVersion from one
//     sequence, so that every watch sees them in resourceVersion order (reactors that
//     number a write before the tracker applies it let concurrent writes reach the
//     watch out of order, and an informer's resourceVersion go backwards);
//   - a create sets the UID and generation 1, a spec change bumps the generation;
//   - an update of a stale copy or of another object of the same name is a conflict,
//     as is a delete whose preconditions do not hold;
//   - a delete event carries the resourceVersion of the deletion, not the object's
//     last one.
//
// Its watches are faulty as fault says.
type apiServer struct {
	tracker  core.ObjectTracker
	resource schema.GroupVersionResource
	fault    watchFault
	dropped  atomic.Int64
	// created, when set, is called with each object the controller creates.
	created func(runtime.Object)

	mu sync.Mutex
	// deletions holds the resourceVersion of each deletion, by UID, for its event.
	deletions map[types.UID]string
	// written holds the resourceVersion of the controller's last write of each
	// object, by namespace/name.
	written  map[string]int64
	requests requestCounts
}

// requestCounts are the controller's write requests to one resource.
type requestCounts struct {
	creates, updates, deletes, conflicts int
	// notFound are the updates of an object that no longer exists.
	notFound int
	// staleConflicts are the updates refused because they were sent from a copy
	// older than the controller's own last write of that object.
	staleConflicts int
}

// fakeAPI is what newAPIServer needs of a fake clientset.
type fakeAPI interface {
	fakeClient
	PrependWatchReactor(resource string, reaction core.WatchReactionFunc)
}

func newAPIServer(client fakeAPI, resource schema.GroupVersionResource, fault watchFault) *apiServer {
	s := &apiServer{
		tracker:   client.Tracker(),
		resource:  resource,
		fault:     fault,
		deletions: map[types.UID]string{},
		written:   map[string]int64{},
	}
	client.PrependReactor("create", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		obj, err := s.create(a.(core.CreateAction).GetObject())
		if err == nil {
			s.requests.creates++
			s.written[objectKey(obj)] = resourceVersionOf(obj)
			if s.created != nil {
				s.created(obj)
			}
		}
		return true, obj, err
	})
	client.PrependReactor("update", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sent := a.(core.UpdateAction).GetObject()
		obj, err := s.update(sent, a.GetSubresource())
		switch {
		case apierrors.IsNotFound(err):
			s.requests.notFound++
		case apierrors.IsConflict(err):
			s.requests.conflicts++
			if resourceVersionOf(sent) < s.written[objectKey(sent)] {
				s.requests.staleConflicts++
			}
		case err == nil:
			s.requests.updates++
			s.written[objectKey(obj)] = resourceVersionOf(obj)
		}
		return true, obj, err
	})
	client.PrependReactor("delete", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		d := a.(core.DeleteAction)
		err := s.delete(d.GetNamespace(), d.GetName(), d.GetDeleteOptions().Preconditions)
		if err == nil {
			s.requests.deletes++
		}
		return true, nil, err
	})
	client.PrependWatchReactor(resource.Resource, func(a core.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := a.(core.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		source, err := s.tracker.Watch(resource, a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		return true, newFaultyWatch(s, source), nil
	})
	return s
}

func (s *apiServer) counts() requestCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// create stores a new object. The caller holds mu.
func (s *apiServer) create(obj runtime.Object) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if _, err := s.tracker.Get(s.resource, m.GetNamespace(), m.GetName()); err == nil {
		return nil, apierrors.NewAlreadyExists(s.resource.GroupResource(), m.GetName())
	}
	if m.GetUID() == "" {
		m.SetUID(uuid.NewUUID())
	}
	m.SetGeneration(1)
	m.SetResourceVersion(nextResourceVersion())
	// Add, not Create: the field manager of the fake knows no schema for Foos.
	if err := s.tracker.Add(obj); err != nil {
		return nil, err
	}
	return s.tracker.Get(s.resource, m.GetNamespace(), m.GetName())
}

// update stores a new state of an object, of its status when subresource is
// "status". The caller holds mu.
func (s *apiServer) update(obj runtime.Object, subresource string) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	stored, err := s.tracker.Get(s.resource, m.GetNamespace(), m.GetName())
	if err != nil {
		return nil, err
	}
	current, _ := meta.Accessor(stored)
	if current.GetUID() != m.GetUID() {
		return nil, apierrors.NewConflict(s.resource.GroupResource(), m.GetName(),
			fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", m.GetUID(), current.GetUID()))
	}
	if rv := m.GetResourceVersion(); rv != "" && rv != current.GetResourceVersion() {
		return nil, apierrors.NewConflict(s.resource.GroupResource(), m.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	m.SetGeneration(current.GetGeneration())
	if subresource == "" && !equality.Semantic.DeepEqual(specOf(obj), specOf(stored)) {
		m.SetGeneration(current.GetGeneration() + 1)
	}
	m.SetResourceVersion(nextResourceVersion())
	if err := s.tracker.Update(s.resource, obj, m.GetNamespace()); err != nil {
		return nil, err
	}
	return s.tracker.Get(s.resource, m.GetNamespace(), m.GetName())
}

// delete removes an object. The caller holds mu.
func (s *apiServer) delete(namespace, name string, preconditions *metav1.Preconditions) error {
	stored, err := s.tracker.Get(s.resource, namespace, name)
	if err != nil {
		return err
	}
	current, _ := meta.Accessor(stored)
	if p := preconditions; p != nil && (p.UID != nil && *p.UID != current.GetUID() ||
		p.ResourceVersion != nil && *p.ResourceVersion != current.GetResourceVersion()) {
		return apierrors.NewConflict(s.resource.GroupResource(), name, fmt.Errorf("Precondition failed"))
	}
	s.deletions[current.GetUID()] = nextResourceVersion()
	return s.tracker.Delete(s.resource, namespace, name)
}

// edit is a user's read-modify-write of an object, which never conflicts.
func (s *apiServer) edit(namespace, name string, mutate func(runtime.Object)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := s.tracker.Get(s.resource, namespace, name)
	if err != nil {
		return err
	}
	obj := stored.DeepCopyObject()
	mutate(obj)
	_, err = s.update(obj, "")
	return err
}

// editInARow writes n changes of the status of the object with UID uid, with no
// other write in between.
func (s *apiServer) editInARow(namespace, name string, uid types.UID, n int, mutate func(int, runtime.Object)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		stored, err := s.tracker.Get(s.resource, namespace, name)
		if err != nil {
			return err
		}
		if m, _ := meta.Accessor(stored); m.GetUID() != uid {
			return nil
		}
		obj := stored.DeepCopyObject()
		mutate(i, obj)
		if _, err := s.update(obj, "status"); err != nil {
			return err
		}
	}
	return nil
}

// remove is a deletion by someone other than the controller.
func (s *apiServer) remove(namespace, name string, preconditions *metav1.Preconditions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delete(namespace, name, preconditions)
}

// list returns the Deployments stored.
func (s *apiServer) list() []*appsv1.Deployment {
	obj, err := s.tracker.List(deploymentsResource, appsv1.SchemeGroupVersion.WithKind("Deployment"), metav1.NamespaceAll)
	if err != nil {
		return nil
	}
	var ds []*appsv1.Deployment
	for i := range obj.(*appsv1.DeploymentList).Items {
		ds = append(ds, &obj.(*appsv1.DeploymentList).Items[i])
	}
	return ds
}

// deletionEvent gives a delete event the resourceVersion of the deletion.
func (s *apiServer) deletionEvent(e watch.Event) watch.Event {
	if e.Type != watch.Deleted {
		return e
	}
	m, err := meta.Accessor(e.Object)
	if err != nil {
		return e
	}
	s.mu.Lock()
	rv, ok := s.deletions[m.GetUID()]
	s.mu.Unlock()
	if ok {
		e.Object = e.Object.DeepCopyObject()
		m, _ = meta.Accessor(e.Object)
		m.SetResourceVersion(rv)
	}
	return e
}

// faultyWatch passes on the events of a watch of the fake API server late, and
// drops those its fault says. It reads its source at once, whatever the lag: the
// fake's watch panics when 100 events wait.
type faultyWatch struct {
	server *apiServer
	source watch.Interface
	result chan watch.Event
	stop   chan struct{}
	halt   sync.Once

	mu      sync.Mutex
	pending []lateEvent
	ended   bool
	arrived chan struct{}
}

type lateEvent struct {
	watch.Event
	due time.Time
}

func newFaultyWatch(server *apiServer, source watch.Interface) *faultyWatch {
	w := &faultyWatch{
		server:  server,
		source:  source,
		result:  make(chan watch.Event),
		stop:    make(chan struct{}),
		arrived: make(chan struct{}, 1),
	}
	go w.receive()
	go w.deliver()
	return w
}

func (w *faultyWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *faultyWatch) Stop() {
	w.halt.Do(func() {
		close(w.stop)
		w.source.Stop()
	})
}

func (w *faultyWatch) receive() {
	for e := range w.source.ResultChan() {
		e = w.server.deletionEvent(e)
		w.mu.Lock()
		w.pending = append(w.pending, lateEvent{Event: e, due: time.Now().Add(w.server.fault.lag)})
		w.mu.Unlock()
		w.signal()
	}
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.signal()
}

func (w *faultyWatch) signal() {
	select {
	case w.arrived <- struct{}{}:
	default:
	}
}

func (w *faultyWatch) deliver() {
	defer close(w.result)
	for {
		w.mu.Lock()
		if len(w.pending) == 0 {
			ended := w.ended
			w.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-w.arrived:
				continue
			case <-w.stop:
				return
			}
		}
		next := w.pending[0]
		w.mu.Unlock()
		if wait := time.Until(next.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-w.stop:
				return
			}
		}
		w.mu.Lock()
		w.pending = w.pending[1:]
		superseded := w.server.fault.coalesce && next.Type == watch.Modified &&
			len(w.pending) > 0 && sameObject(next.Object, w.pending[0].Object)
		w.mu.Unlock()
		if superseded {
			w.server.dropped.Add(1)
			continue
		}
		select {
		case w.result <- next.Event:
		case <-w.stop:
			return
		}
	}
}

func sameObject(a, b runtime.Object) bool {
	ma, err1 := meta.Accessor(a)
	mb, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && ma.GetUID() == mb.GetUID()
}

// nextResourceVersion numbers a write, from the sequence likeAnAPIServer uses.
func nextResourceVersion() string {
	return strconv.FormatInt(resourceVersions.Add(1), 10)
}

func resourceVersionOf(obj runtime.Object) int64 {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return rv
}

func objectKey(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// specOf returns an object's spec, as the API server compares it to bump the
// generation.
func specOf(obj runtime.Object) any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil
	}
	return u["spec"]
}
