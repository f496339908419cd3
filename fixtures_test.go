package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/cached"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
)

// newFoo returns a Foo named name in namespace default, whose deploymentName is name.
func newFoo(name string, replicas *int32) *samplev1alpha1.Foo {
	return &samplev1alpha1.Foo{
		TypeMeta: metav1.TypeMeta{APIVersion: samplev1alpha1.SchemeGroupVersion.String(), Kind: "Foo"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       metav1.NamespaceDefault,
			UID:             types.UID(name + "-uid"),
			Generation:      1,
			ResourceVersion: "1",
		},
		Spec: samplev1alpha1.FooSpec{DeploymentName: name, Replicas: replicas},
	}
}

// availableDeployment returns foo's Deployment as the API server serves it once every
// replica is up: with the defaults, the annotation and the conditions that the
// controller's cache trims, so that a test sees a patch made from the cache keep them.
func availableDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	d := reconcile.NewDeployment(foo)
	d.UID = types.UID(d.Name + "-deployment-uid")
	d.ResourceVersion = "1"
	d.Generation = 1
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	d.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	d.Spec.Template.Spec.Containers[0].TerminationMessagePath = corev1.TerminationMessagePathDefault
	n := reconcile.DesiredReplicas(foo)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: 1, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", Message: `ReplicaSet "web-6d4cf56db6" has successfully progressed.`},
		},
	}
	return d
}

// withStatus returns foo with the status the controller computes from d, which it
// records as created for foo.
func withStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment) *samplev1alpha1.Foo {
	foo = foo.DeepCopy()
	foo.Status = calculatedStatus(foo, d, now)
	return foo
}

// calculatedStatus is the status of a Foo whose sync went through, with d, which it
// records as created for foo, under d's UID or the one the fixture's API server gives
// it.
func calculatedStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment, at metav1.Time) samplev1alpha1.FooStatus {
	status := reconcile.CalculateStatus(foo, d, nil, at)
	uid := d.UID
	if uid == "" {
		uid = createdUID(d.Name)
	}
	status.Deployments = reconcile.SetRecord(status.Deployments, samplev1alpha1.CreatedDeployment{Name: d.Name, UID: uid})
	return status
}

// testCreationKey keys the creation tokens of the fixtures' controllers.
var testCreationKey = []byte("test creation key")

// createdUID is the UID the fixture's API server gives the Deployment named name that
// the controller creates, as availableDeployment has it.
func createdUID(name string) types.UID { return types.UID(name + "-deployment-uid") }

// newCreated is the Deployment the controller creates for foo: with its creation
// token.
func newCreated(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	d := reconcile.NewDeployment(foo)
	d.Annotations = map[string]string{reconcile.CreationTokenAnnotation: reconcile.CreationToken(testCreationKey, foo, d.Name)}
	return d
}

// creating returns foo with the record of its Deployment being created, as the
// controller writes it before the create.
func creating(foo *samplev1alpha1.Foo) *samplev1alpha1.Foo {
	foo = foo.DeepCopy()
	name := foo.Spec.DeploymentName
	foo.Status.Deployments = reconcile.SetRecord(foo.Status.Deployments, samplev1alpha1.CreatedDeployment{
		Name: name, Creating: reconcile.TokenHash(reconcile.CreationToken(testCreationKey, foo, name)),
	})
	return foo
}

// withoutRecords returns foo with no record of the Deployments created for it, as a
// controller that kept none wrote its status.
func withoutRecords(foo *samplev1alpha1.Foo) *samplev1alpha1.Foo {
	foo = foo.DeepCopy()
	foo.Status.Deployments = nil
	return foo
}

// giveCreatedUIDs has the fake API server give each Deployment the controller creates
// createdUID.
func giveCreatedUIDs(client *k8sfake.Clientset) {
	client.PrependReactor("create", "deployments", func(a core.Action) (bool, runtime.Object, error) {
		d, ok := a.(core.CreateAction).GetObject().(*appsv1.Deployment)
		if !ok || d.UID != "" {
			return false, nil, nil
		}
		d = d.DeepCopy()
		d.UID = createdUID(d.Name)
		if err := client.Tracker().Create(deploymentsResource, d, d.Namespace); err != nil {
			return true, nil, err
		}
		return true, d, nil
	})
}

// foreignDeployment returns a Deployment named name that something else controls.
func foreignDeployment(name string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault, UID: "foreign-uid", ResourceVersion: "7", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Foo", Name: name, UID: "other", Controller: ptr.To(true)}},
		},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](5)},
	}
}

// forgedDeployment returns a Deployment named name that someone other than the
// controller gave foo's owner reference and the controller's labels.
func forgedDeployment(foo *samplev1alpha1.Foo, name string) *appsv1.Deployment {
	d := reconcile.NewDeployment(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = name }))
	d.UID, d.ResourceVersion = types.UID(name+"-forged-uid"), "5"
	d.Spec.Replicas = ptr.To[int32](9)
	return d
}

// update puts foo on the fixture's API server in place of the Foo it holds.
func update(f *fixture, foo *samplev1alpha1.Foo) {
	f.t.Helper()
	if err := f.client.Tracker().Update(foosResource, foo.DeepCopy(), foo.Namespace); err != nil {
		f.t.Fatal(err)
	}
}

// remove deletes the Deployment named name from the fixture's API server, not from
// the cache.
func remove(f *fixture, name string) {
	f.t.Helper()
	if err := f.kubeclient.Tracker().Delete(deploymentsResource, metav1.NamespaceDefault, name); err != nil {
		f.t.Fatal(err)
	}
}

// notCreatedEvent is the Warning about foo's Deployment "web" when the controller did not
// create it.
const notCreatedEvent = `Warning DeploymentNotOwned Deployment "web" names this Foo as its controller, but the controller did not create it for this Foo and leaves it alone; delete it or choose another spec.deploymentName`

var (
	earlier = metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	now     = metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))

	deploymentsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	foosResource        = samplev1alpha1.SchemeGroupVersion.WithResource("foos")
)

// fixture is a controller on fake clientsets whose caches are filled by hand.
type fixture struct {
	t          *testing.T
	kubeclient *k8sfake.Clientset
	client     *fake.Clientset
	controller *Controller
	recorder   *events.FakeRecorder
	// deployments are the Deployments the fake API server held when the fixture was
	// built, by name, to which checkActions applies a patch the controller sent.
	deployments map[string]*appsv1.Deployment
}

// newFixture builds a controller whose caches hold foos and cached, and whose fake
// API server holds those plus serverOnly: Deployments the filtered cache cannot see.
func newFixture(t *testing.T, foos []*samplev1alpha1.Foo, cached, serverOnly []*appsv1.Deployment) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	var kubeObjects, sampleObjects []runtime.Object
	deployments := map[string]*appsv1.Deployment{}
	for _, d := range append(append([]*appsv1.Deployment{}, cached...), serverOnly...) {
		kubeObjects = append(kubeObjects, d.DeepCopy())
		deployments[d.Name] = d.DeepCopy()
	}
	for _, foo := range foos {
		sampleObjects = append(sampleObjects, foo.DeepCopy())
	}
	f := &fixture{
		t:           t,
		kubeclient:  k8sfake.NewClientset(kubeObjects...),
		client:      fake.NewClientset(sampleObjects...),
		recorder:    events.NewFakeRecorder(100),
		deployments: deployments,
	}
	giveCreatedUIDs(f.kubeclient)
	c, err := NewController(ctx, Config{KubeClient: f.kubeclient, SampleClient: f.client, Recorder: f.recorder})
	if err != nil {
		t.Fatalf("NewController: %v", err)
	}
	c.clock = testingclock.NewFakePassiveClock(now.Time)
	c.creationKey = testCreationKey
	for _, foo := range foos {
		if err := c.foosIndexer.Add(foo.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range cached {
		if err := c.deploymentsIndexer.Add(cachedCopy(d)); err != nil {
			t.Fatal(err)
		}
	}
	f.controller = c
	t.Cleanup(c.workqueue.ShutDown)
	return f
}

// cachedCopy is d as the informer caches it (cached.TrimDeployment).
func cachedCopy(d *appsv1.Deployment) *cached.Deployment {
	obj, _ := cached.TrimDeployment(d.DeepCopy())
	return obj.(*cached.Deployment)
}

// useQueueClock gives the controller a work queue, with the same rate limiter, whose
// delays run on a fake clock, and returns the clock: a test sees exactly when a
// requeued key comes back, whatever the machine's load.
func (f *fixture) useQueueClock() *testingclock.FakeClock {
	clk := testingclock.NewFakeClock(now.Time)
	c := f.controller
	c.workqueue.ShutDown()
	c.workqueue = workqueue.NewTypedRateLimitingQueueWithConfig(c.rateLimiter,
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "foos", Clock: clk})
	f.t.Cleanup(c.workqueue.ShutDown)
	return clk
}

// waitRequeued steps clk until key is back in the queue, which it must be within the
// given backoff, and fails the test if it comes back before.
func (f *fixture) waitRequeued(ctx context.Context, clk *testingclock.FakeClock, backoff time.Duration) {
	f.t.Helper()
	q := f.controller.workqueue
	if got := q.Len(); got != 0 {
		f.t.Fatalf("queue length right after the failure = %d, want 0 until %v pass", got, backoff)
	}
	clk.Step(backoff - time.Millisecond)
	if got := q.Len(); got != 0 {
		f.t.Fatalf("queue length %v after the failure = %d, want 0", backoff-time.Millisecond, got)
	}
	// The queue's timer may be set after a step; step again until it fires.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		clk.Step(time.Millisecond)
		return q.Len() == 1, nil
	}); err != nil {
		f.t.Fatalf("the failed key was not requeued: %v", err)
	}
}

// sync runs one sync of foo and returns its error.
func (f *fixture) sync(foo *samplev1alpha1.Foo) error {
	_, ctx := ktesting.NewTestContext(f.t)
	return f.controller.syncHandler(ctx, cache.MetaObjectToName(foo))
}

// action is an expected API request: verb, resource, subresource, name, and for
// creates and updates the object sent.
type action struct {
	verb, subresource string
	resource          schema.GroupVersionResource
	name              string
	object            runtime.Object
}

func create(obj runtime.Object) action {
	return action{verb: "create", resource: resourceOf(obj), name: nameOf(obj), object: obj}
}

// patch is a patch of a Deployment that turns the one the fake API server held when
// the fixture was built into want.
func patch(want *appsv1.Deployment) action {
	return action{verb: "patch", resource: deploymentsResource, name: want.Name, object: want}
}
func updateStatus(foo *samplev1alpha1.Foo) action {
	return action{verb: "update", subresource: "status", resource: foosResource, name: foo.Name, object: foo}
}
func get(resource schema.GroupVersionResource, name string) action {
	return action{verb: "get", resource: resource, name: name}
}
func del(resource schema.GroupVersionResource, name string) action {
	return action{verb: "delete", resource: resource, name: name}
}

func resourceOf(obj runtime.Object) schema.GroupVersionResource {
	if _, ok := obj.(*appsv1.Deployment); ok {
		return deploymentsResource
	}
	return foosResource
}

func nameOf(obj runtime.Object) string {
	m, _ := obj.(metav1.Object)
	return m.GetName()
}

// checkActions asserts that the fake clientsets saw exactly want, in order, leaving
// out the lists and watches of one Deployment name (internal/namewatch, tested there),
// which start on goroutines of their own.
func (f *fixture) checkActions(want []action) {
	f.t.Helper()
	got := slices.DeleteFunc(append(append([]core.Action{}, f.kubeclient.Actions()...), f.client.Actions()...), isNameWatch)
	if len(got) != len(want) {
		var names []string
		for _, a := range got {
			names = append(names, fmt.Sprintf("%s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource()))
		}
		f.t.Fatalf("got %d actions %v, want %d", len(got), names, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.GetVerb() != w.verb || g.GetResource() != w.resource || g.GetSubresource() != w.subresource {
			f.t.Errorf("action %d: got %s %s/%s, want %s %s/%s", i, g.GetVerb(), g.GetResource().Resource, g.GetSubresource(), w.verb, w.resource.Resource, w.subresource)
			continue
		}
		var name string
		var object runtime.Object
		// By what the action has: the action interfaces overlap (every UpdateAction
		// is also a CreateAction), so a switch on them would take the first that fits.
		switch g := g.(type) {
		case interface{ GetObject() runtime.Object }: // create, update
			object = g.GetObject()
			name = nameOf(object)
		case core.PatchAction:
			name = g.GetName()
			object = f.patched(g)
		case interface{ GetName() string }: // get, delete
			name = g.GetName()
		}
		if name != w.name {
			f.t.Errorf("action %d (%s %s): name %q, want %q", i, w.verb, w.resource.Resource, name, w.name)
		}
		if w.object != nil {
			if diff := cmp.Diff(w.object, object); diff != "" {
				f.t.Errorf("action %d (%s %s): object mismatch (-want +got):\n%s", i, w.verb, w.resource.Resource, diff)
			}
		}
	}
}

// patched returns the Deployment the fake API server held when the fixture was built
// with the patch of a applied, or nil when it held none of that name or the patch does
// not apply.
func (f *fixture) patched(a core.PatchAction) runtime.Object {
	f.t.Helper()
	d, ok := f.deployments[a.GetName()]
	if !ok {
		f.t.Errorf("patch of Deployment %q, which the API server did not hold", a.GetName())
		return nil
	}
	if a.GetPatchType() != types.StrategicMergePatchType {
		f.t.Errorf("patch of Deployment %q is a %s, want a strategic merge patch", a.GetName(), a.GetPatchType())
		return nil
	}
	var precondition struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(a.GetPatch(), &precondition); err != nil || precondition.Metadata.ResourceVersion != d.ResourceVersion {
		f.t.Errorf("patch of Deployment %q is conditional on resourceVersion %q (%v), want the cached %q", a.GetName(), precondition.Metadata.ResourceVersion, err, d.ResourceVersion)
	}
	result, err := fakeapiserver.Patched(d, a.GetPatchType(), a.GetPatch())
	if err != nil {
		f.t.Errorf("patch of Deployment %q does not apply: %v", a.GetName(), err)
		return nil
	}
	return result
}

// isNameWatch tells whether a is a list or watch of Deployments by name.
func isNameWatch(a core.Action) bool {
	var selector fields.Selector
	switch a := a.(type) {
	case core.ListAction:
		selector = a.GetListRestrictions().Fields
	case core.WatchAction:
		selector = a.GetWatchRestrictions().Fields
	default:
		return false
	}
	_, byName := selector.RequiresExactMatch("metadata.name")
	return a.GetResource() == deploymentsResource && byName
}

// checkEvents asserts that the recorder saw exactly want, in order.
func (f *fixture) checkEvents(want ...string) {
	f.t.Helper()
	var got []string
	for {
		select {
		case e := <-f.recorder.Events:
			got = append(got, e)
			continue
		default:
		}
		break
	}
	if diff := cmp.Diff(want, got); diff != "" {
		f.t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// refusedMessage is the condition message for refuse's answer.
const refusedMessage = `The API server refused to write Deployment "web": deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'no-web' denied request: not here`

// refusal is the answer of an admission policy that refuses writes of Deployment "web".
var refusal = apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
	errors.New("ValidatingAdmissionPolicy 'no-web' denied request: not here"))

// refuse makes the API server refuse verb on Deployment "web", as an admission policy
// would.
func refuse(f *fixture, verb string) {
	f.kubeclient.PrependReactor(verb, "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
}

// conflictOnce makes the first status write fail with a conflict.
func conflictOnce(f *fixture) {
	conflicted := false
	f.client.PrependReactor("update", "foos", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" || conflicted {
			return false, nil, nil
		}
		conflicted = true
		return true, nil, apierrors.NewConflict(foosResource.GroupResource(), "web", errors.New("the object has been modified"))
	})
}

func modified(d *appsv1.Deployment, mutate func(*appsv1.Deployment)) *appsv1.Deployment {
	d = d.DeepCopy()
	mutate(d)
	return d
}

func modifiedFoo(foo *samplev1alpha1.Foo, mutate func(*samplev1alpha1.Foo)) *samplev1alpha1.Foo {
	foo = foo.DeepCopy()
	mutate(foo)
	return foo
}
