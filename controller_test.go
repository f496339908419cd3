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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
	"github.com/seed-e6610ed6/sample-controller/pkg/reconcile"
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

// availableDeployment returns foo's Deployment as it looks once every replica is up.
func availableDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	d := reconcile.NewDeployment(foo)
	d.UID = types.UID(d.Name + "-deployment-uid")
	d.ResourceVersion = "1"
	d.Generation = 1
	n := reconcile.DesiredReplicas(foo)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	return d
}

// withStatus returns foo with the status the controller computes from d.
func withStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment) *samplev1alpha1.Foo {
	foo = foo.DeepCopy()
	foo.Status = reconcile.CalculateStatus(foo, d, nil, now)
	return foo
}

// calculatedStatus is the status of a Foo whose sync went through, with d.
func calculatedStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment, at metav1.Time) samplev1alpha1.FooStatus {
	return reconcile.CalculateStatus(foo, d, nil, at)
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
}

// newFixture builds a controller whose caches hold foos and cached, and whose fake
// API server holds those plus serverOnly: Deployments the filtered cache cannot see.
func newFixture(t *testing.T, foos []*samplev1alpha1.Foo, cached, serverOnly []*appsv1.Deployment) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	var kubeObjects, sampleObjects []runtime.Object
	for _, d := range append(append([]*appsv1.Deployment{}, cached...), serverOnly...) {
		kubeObjects = append(kubeObjects, d.DeepCopy())
	}
	for _, foo := range foos {
		sampleObjects = append(sampleObjects, foo.DeepCopy())
	}
	f := &fixture{
		t:          t,
		kubeclient: k8sfake.NewClientset(kubeObjects...),
		client:     fake.NewClientset(sampleObjects...),
		recorder:   events.NewFakeRecorder(100),
	}
	kubeFactory, sampleFactory := newInformerFactories(f.kubeclient, f.client, "", 0)
	c, err := NewController(ctx, f.kubeclient, f.client,
		kubeFactory.Apps().V1().Deployments(), sampleFactory.Samplecontroller().V1alpha1().Foos(), f.recorder)
	if err != nil {
		t.Fatalf("NewController: %v", err)
	}
	c.clock = testingclock.NewFakePassiveClock(now.Time)
	for _, foo := range foos {
		if err := sampleFactory.Samplecontroller().V1alpha1().Foos().Informer().GetIndexer().Add(foo.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range cached {
		if err := kubeFactory.Apps().V1().Deployments().Informer().GetIndexer().Add(d.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	f.controller = c
	t.Cleanup(c.workqueue.ShutDown)
	return f
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
func update(obj runtime.Object) action {
	return action{verb: "update", resource: resourceOf(obj), name: nameOf(obj), object: obj}
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

// checkActions asserts that the fake clientsets saw exactly want, in order.
func (f *fixture) checkActions(want []action) {
	f.t.Helper()
	got := append(append([]core.Action{}, f.kubeclient.Actions()...), f.client.Actions()...)
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
		switch g := g.(type) {
		case core.CreateAction:
			object = g.GetObject()
			name = nameOf(object)
		case core.UpdateAction:
			object = g.GetObject()
			name = nameOf(object)
		case core.GetAction:
			name = g.GetName()
		case core.DeleteAction:
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

func TestSyncHandler(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](2))
	ready := availableDeployment(foo)
	readyFoo := withStatus(foo, ready)
	// rescaled is readyFoo once its author set spec.replicas to n, the Deployment the
	// controller then writes, and the Foo with the status it then writes.
	rescaled := func(n int32) (*samplev1alpha1.Foo, *appsv1.Deployment, *samplev1alpha1.Foo) {
		f := modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) { f.Spec.Replicas = ptr.To(n); f.Generation = 2 })
		d := modified(ready, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(n) })
		return f, d, modifiedFoo(f, func(f *samplev1alpha1.Foo) { f.Status = calculatedStatus(f, d, now) })
	}
	toZero, zeroDeployment, toZeroWithStatus := rescaled(0)
	toThree, threeDeployment, toThreeWithStatus := rescaled(3)
	// otherImage is ready after someone set its image by hand.
	otherImage := modified(ready, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "httpd" })
	// refusedEarlier is f once an earlier sync reported that the API server refused
	// the write of ready.
	refusedEarlier := func(f *samplev1alpha1.Foo) *samplev1alpha1.Foo {
		return modifiedFoo(f, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, ready, refusal, earlier) })
	}

	tests := []struct {
		name       string
		foo        *samplev1alpha1.Foo // in the cache and on the server; nil for none
		cached     []*appsv1.Deployment
		serverOnly []*appsv1.Deployment
		setup      func(f *fixture)
		synced     *samplev1alpha1.Foo // the Foo synced, when foo is nil
		want       []action
		wantEvents []string
		wantErr    bool
	}{{
		name: "creates the deployment and reports progress",
		foo:  foo,
		want: []action{
			create(reconcile.NewDeployment(foo)),
			updateStatus(withStatus(foo, reconcile.NewDeployment(foo))),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name:   "nothing to do makes no API calls",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{ready},
	}, {
		name:   "reports readiness once the deployment is available",
		foo:    withStatus(foo, reconcile.NewDeployment(foo)),
		cached: []*appsv1.Deployment{ready},
		want:   []action{updateStatus(readyFoo)},
	}, {
		name: "reverts replicas drift",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](9)
		})},
		want:       []action{update(ready)},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name:       "reverts image drift",
		foo:        readyFoo,
		cached:     []*appsv1.Deployment{otherImage},
		want:       []action{update(ready)},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name: "reverts label drift and keeps labels others added",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Labels = map[string]string{reconcile.FooUIDLabel: "stale", "team": "blue"}
		})},
		want: []action{update(modified(ready, func(d *appsv1.Deployment) {
			d.Labels = map[string]string{reconcile.FooUIDLabel: "web-uid", "team": "blue"}
		}))},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name: "keeps the rollout restart annotation when nothing else differs",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
		})},
	}, {
		name: "keeps the rollout restart annotation while reverting drift",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
			d.Spec.Replicas = ptr.To[int32](1)
		})},
		want: []action{update(modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
		}))},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name:   "leaves a foreign deployment in the cache alone and says so",
		foo:    foo,
		cached: []*appsv1.Deployment{foreignDeployment("web", map[string]string{reconcile.FooUIDLabel: "x"})},
		want: []action{updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, now)
		}))},
		wantEvents: []string{`Warning DeploymentNotOwned Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`},
	}, {
		name:       "leaves a foreign deployment only on the server alone and says so",
		foo:        foo,
		serverOnly: []*appsv1.Deployment{foreignDeployment("web", nil)},
		want: []action{
			create(reconcile.NewDeployment(foo)),
			get(deploymentsResource, "web"),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, now) })),
		},
		wantEvents: []string{`Warning DeploymentNotOwned Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`},
	}, {
		name:       "a reported conflict is looked at again without a write or an event",
		foo:        modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier) }),
		serverOnly: []*appsv1.Deployment{foreignDeployment("web", nil)},
		want:       []action{get(deploymentsResource, "web")},
	}, {
		name: "a reported conflict that went away is resolved",
		foo:  modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier) }),
		want: []action{
			get(deploymentsResource, "web"),
			create(reconcile.NewDeployment(foo)),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
				f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
				f.Status = calculatedStatus(f, reconcile.NewDeployment(foo), now)
			})),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name: "adopts a deployment the classic controller created for this Foo",
		foo:  readyFoo,
		serverOnly: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Labels = nil
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx", "controller": "web"}}
			d.Spec.Template.Labels = map[string]string{"app": "nginx", "controller": "web"}
		})},
		want: []action{
			create(reconcile.NewDeployment(foo)),
			get(deploymentsResource, "web"),
			update(modified(ready, func(d *appsv1.Deployment) {
				d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx", "controller": "web"}}
				d.Spec.Template.Labels = map[string]string{"app": "nginx", "controller": "web"}
			})),
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) { f.Status.Selector = "app=nginx,controller=web" })),
		},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name: "replaces the deployment when deploymentName changes",
		foo: modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
			f.Spec.DeploymentName = "web-v2"
			f.Generation = 2
		}),
		cached: []*appsv1.Deployment{ready},
		want: []action{
			create(reconcile.NewDeployment(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2" }))),
			del(deploymentsResource, "web"),
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
				f.Spec.DeploymentName = "web-v2"
				f.Generation = 2
				f.Status = calculatedStatus(f, reconcile.NewDeployment(f), now)
			})),
		},
		wantEvents: []string{
			`Normal DeploymentCreated Created Deployment "web-v2"`,
			`Normal DeploymentDeleted Deleted Deployment "web", replaced by "web-v2"`,
		},
	}, {
		name:   "foo deleted before the sync",
		synced: foo,
		cached: []*appsv1.Deployment{ready},
	}, {
		name: "foo being deleted is left to the garbage collector",
		foo: modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
			f.DeletionTimestamp = &now
			f.Finalizers = []string{"foregroundDeletion"}
		}),
	}, {
		name: "recreates a deployment that was deleted",
		foo:  readyFoo,
		want: []action{
			create(reconcile.NewDeployment(foo)),
			updateStatus(withStatus(readyFoo, reconcile.NewDeployment(foo))),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name:   "does not touch a deployment that is being deleted",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) { d.DeletionTimestamp = &now; d.Spec.Replicas = ptr.To[int32](5) })},
		want: []action{updateStatus(withStatus(readyFoo, modified(ready, func(d *appsv1.Deployment) {
			d.DeletionTimestamp = &now
		})))},
	}, {
		name: "replicas nil means one",
		foo:  newFoo("web", nil),
		want: []action{
			create(reconcile.NewDeployment(newFoo("web", ptr.To[int32](1)))),
			updateStatus(withStatus(newFoo("web", nil), reconcile.NewDeployment(newFoo("web", nil)))),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name:   "scales to zero",
		foo:    toZero,
		cached: []*appsv1.Deployment{ready},
		want:   []action{update(zeroDeployment), updateStatus(toZeroWithStatus)},
		// A new spec is reported by observedGeneration; no event is recorded for it.
	}, {
		name:   "a spec change records no event, even when the deployment also drifted",
		foo:    toThree,
		cached: []*appsv1.Deployment{otherImage},
		want:   []action{update(threeDeployment), updateStatus(toThreeWithStatus)},
	}, {
		name:  "a refused create is reported and retried",
		foo:   foo,
		setup: func(f *fixture) { refuse(f, "create") },
		want: []action{
			create(reconcile.NewDeployment(foo)),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, refusal, now) })),
		},
		wantEvents: []string{"Warning DeploymentRejected " + refusedMessage},
		wantErr:    true,
	}, {
		name:  "a refusal already reported makes no event and no status write",
		foo:   modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, refusal, earlier) }),
		setup: func(f *fixture) { refuse(f, "create") },
		want:  []action{create(reconcile.NewDeployment(foo))},
		// Still an error: the key goes back to the queue with backoff.
		wantErr: true,
	}, {
		name:   "a refused update is reported with the deployment's replicas",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) })},
		setup:  func(f *fixture) { refuse(f, "update") },
		want: []action{
			update(ready),
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
				f.Status = reconcile.CalculateStatus(f, modified(ready, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) }), refusal, now)
			})),
		},
		wantEvents: []string{"Warning DeploymentRejected " + refusedMessage},
		wantErr:    true,
	}, {
		// The drifted Deployment is available, which alone would make Ready True.
		name:    "a refused update already reported writes no status, though the deployment is available",
		foo:     refusedEarlier(readyFoo),
		cached:  []*appsv1.Deployment{otherImage},
		setup:   func(f *fixture) { refuse(f, "update") },
		want:    []action{update(ready)},
		wantErr: true,
	}, {
		name:   "the update that applies a spec refused before records no event",
		foo:    refusedEarlier(toThree),
		cached: []*appsv1.Deployment{ready},
		want:   []action{update(threeDeployment), updateStatus(withStatus(refusedEarlier(toThree), threeDeployment))},
	}, {
		// The status cannot tell a refused revert from a refused new spec; the Ready
		// condition's change says what happened.
		name:   "the revert of a hand edit refused before records no event",
		foo:    refusedEarlier(readyFoo),
		cached: []*appsv1.Deployment{otherImage},
		want:   []action{update(ready), updateStatus(withStatus(refusedEarlier(readyFoo), ready))},
	}, {
		name: "a namespace being deleted is not reported on the foo",
		foo:  foo,
		setup: func(f *fixture) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				err := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
					errors.New("unable to create new content in namespace default because it is being terminated"))
				err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
				return true, nil, err
			})
		},
		want:    []action{create(reconcile.NewDeployment(foo))},
		wantErr: true,
	}, {
		name: "create failure is returned for a retry",
		foo:  foo,
		setup: func(f *fixture) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			})
		},
		want:    []action{create(reconcile.NewDeployment(foo))},
		wantErr: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var foos []*samplev1alpha1.Foo
			synced := tc.synced
			if tc.foo != nil {
				foos = append(foos, tc.foo)
				synced = tc.foo
			}
			f := newFixture(t, foos, tc.cached, tc.serverOnly)
			if tc.setup != nil {
				tc.setup(f)
			}
			err := f.sync(synced)
			if (err != nil) != tc.wantErr {
				t.Fatalf("syncHandler() error = %v, wantErr %v", err, tc.wantErr)
			}
			f.checkActions(tc.want)
			f.checkEvents(tc.wantEvents...)
		})
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

// TestSyncHandlerMarksRefusals checks that only a reported refusal gets the capped
// backoff of processNextWorkItem.
func TestSyncHandlerMarksRefusals(t *testing.T) {
	foo := newFoo("web", nil)
	terminating := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("namespace is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused by a policy", apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("no")), true},
		{"namespace being deleted", terminating, false},
		{"server unavailable", apierrors.NewServiceUnavailable("etcd is down"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			err := f.sync(foo)
			if err == nil {
				t.Fatal("syncHandler() = nil, want an error")
			}
			if got := errors.Is(err, errRejected); got != tt.want {
				t.Errorf("errors.Is(%v, errRejected) = %v, want %v", err, got, tt.want)
			}
		})
	}
}

func TestSyncHandlerStatusConflict(t *testing.T) {
	stale := newFoo("web", ptr.To[int32](2))
	ready := availableDeployment(stale)
	// Someone changed the Foo's labels meanwhile: same generation, new resourceVersion.
	fresh := modifiedFoo(stale, func(f *samplev1alpha1.Foo) {
		f.ResourceVersion = "2"
		f.Labels = map[string]string{"team": "blue"}
	})

	t.Run("retries with the foo as the server has it", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{stale}, []*appsv1.Deployment{ready}, nil)
		conflictOnce(f)
		if err := f.client.Tracker().Update(foosResource, fresh.DeepCopy(), fresh.Namespace); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()

		if err := f.sync(stale); err != nil {
			t.Fatalf("syncHandler() = %v, want nil", err)
		}
		f.checkActions([]action{
			updateStatus(withStatus(stale, ready)),
			get(foosResource, "web"),
			updateStatus(withStatus(fresh, ready)),
		})
		f.checkEvents()
	})

	t.Run("leaves the write to the next sync when the spec changed", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{stale}, []*appsv1.Deployment{ready}, nil)
		conflictOnce(f)
		changed := modifiedFoo(fresh, func(f *samplev1alpha1.Foo) { f.Generation = 2; f.Spec.Replicas = ptr.To[int32](3) })
		if err := f.client.Tracker().Update(foosResource, changed, changed.Namespace); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()

		if err := f.sync(stale); err != nil {
			t.Fatalf("syncHandler() = %v, want nil", err)
		}
		f.checkActions([]action{
			updateStatus(withStatus(stale, ready)),
			get(foosResource, "web"),
		})
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

func TestHandleObject(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	owned := availableDeployment(foo)
	tests := []struct {
		name string
		obj  any
		want []cache.ObjectName
	}{{
		name: "deployment controlled by a foo",
		obj:  owned,
		want: []cache.ObjectName{{Namespace: "default", Name: "web"}},
	}, {
		name: "tombstone of a deployment controlled by a foo",
		obj:  cache.DeletedFinalStateUnknown{Key: "default/web", Obj: owned},
		want: []cache.ObjectName{{Namespace: "default", Name: "web"}},
	}, {
		name: "tombstone holding something else",
		obj:  cache.DeletedFinalStateUnknown{Key: "default/web", Obj: "not an object"},
	}, {
		name: "not an object",
		obj:  42,
	}, {
		name: "no controller",
		obj:  modified(owned, func(d *appsv1.Deployment) { d.OwnerReferences = nil }),
	}, {
		name: "owner of kind Foo in another group",
		obj:  foreignDeployment("web", nil),
	}, {
		name: "owner of another kind in our group",
		obj: modified(owned, func(d *appsv1.Deployment) {
			d.OwnerReferences[0].Kind = "Bar"
		}),
	}, {
		name: "foo that was replaced by one of the same name",
		obj: modified(owned, func(d *appsv1.Deployment) {
			d.OwnerReferences[0].UID = "old-uid"
		}),
	}, {
		name: "foo that no longer exists",
		obj: modified(owned, func(d *appsv1.Deployment) {
			d.OwnerReferences[0].Name = "gone"
		}),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
			_, ctx := ktesting.NewTestContext(t)
			f.controller.handleObject(ctx, tc.obj)
			if diff := cmp.Diff(tc.want, queued(f.controller)); diff != "" {
				t.Errorf("queued mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// queued drains the controller's queue and returns what it held.
func queued(c *Controller) []cache.ObjectName {
	var keys []cache.ObjectName
	for c.workqueue.Len() > 0 {
		key, _ := c.workqueue.Get()
		keys = append(keys, key)
		c.workqueue.Done(key)
	}
	return keys
}

func TestFooEventHandlers(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	f := newFixture(t, nil, nil, nil)
	c := f.controller

	c.enqueueFoo(foo)
	if diff := cmp.Diff([]cache.ObjectName{{Namespace: "default", Name: "web"}}, queued(c)); diff != "" {
		t.Errorf("enqueueFoo: queued mismatch (-want +got):\n%s", diff)
	}
	c.enqueueFoo("not a foo")
	if got := queued(c); len(got) != 0 {
		t.Errorf("enqueueFoo(non-Foo) queued %v, want nothing", got)
	}
	if !sameResourceVersion(foo, foo.DeepCopy()) {
		t.Errorf("sameResourceVersion(resync) = false, want true")
	}
	if sameResourceVersion(foo, modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.ResourceVersion = "2" })) {
		t.Errorf("sameResourceVersion(change) = true, want false")
	}
}

func TestProcessNextWorkItem(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	key := cache.MetaObjectToName(foo)

	t.Run("requeues with backoff on error", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		})
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		clk := f.useQueueClock()
		c.workqueue.Add(key)
		if !c.processNextWorkItem(ctx) {
			t.Fatal("processNextWorkItem() = false, want true")
		}
		if got := c.workqueue.NumRequeues(key); got != 1 {
			t.Errorf("NumRequeues = %d, want 1", got)
		}
		// The retry waits out its backoff, 5 ms, rather than coming straight back.
		f.waitRequeued(ctx, clk, 5*time.Millisecond)
		// Another failure backs off further: 10 ms.
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 2 {
			t.Errorf("NumRequeues after another failure = %d, want 2", got)
		}
		f.waitRequeued(ctx, clk, 10*time.Millisecond)
	})

	t.Run("forgets the key on success", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		c.workqueue.AddRateLimited(key) // as if an earlier attempt had failed
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return c.workqueue.Len() == 1, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !c.processNextWorkItem(ctx) {
			t.Fatal("processNextWorkItem() = false, want true")
		}
		if got := c.workqueue.NumRequeues(key); got != 0 {
			t.Errorf("NumRequeues = %d, want 0", got)
		}
		if got := c.workqueue.Len(); got != 0 {
			t.Errorf("queue length = %d, want 0", got)
		}
	})

	t.Run("returns false once the queue shuts down", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil)
		_, ctx := ktesting.NewTestContext(t)
		f.controller.workqueue.ShutDown()
		if f.controller.processNextWorkItem(ctx) {
			t.Error("processNextWorkItem() = true after shutdown, want false")
		}
	})

	t.Run("a refused write is retried with backoff", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		refuse(f, "create")
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		clk := f.useQueueClock()
		rejected, failed := testutil.ToFloat64(syncsTotal.WithLabelValues(syncRejected)), testutil.ToFloat64(syncsTotal.WithLabelValues(syncError))
		c.workqueue.Add(key)
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 1 {
			t.Errorf("NumRequeues = %d, want 1", got)
		}
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncRejected)) - rejected; got != 1 {
			t.Errorf("rejected syncs counted = %v, want 1", got)
		}
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncError)) - failed; got != 0 {
			t.Errorf("error syncs counted for a refusal = %v, want 0", got)
		}
		f.waitRequeued(ctx, clk, 5*time.Millisecond)
	})

	t.Run("a refused write waits at most a minute between tries", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil)
		c := f.controller
		if got := c.rejectedBackoff(key); got != 5*time.Millisecond {
			t.Errorf("first backoff = %v, want 5ms", got)
		}
		var got time.Duration
		for range 30 {
			got = c.rejectedBackoff(key)
		}
		if got != rejectedRecheckInterval {
			t.Errorf("backoff after 31 refusals = %v, want %v", got, rejectedRecheckInterval)
		}
	})

	t.Run("a taken name is looked at again later, not in a tight loop", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, []*appsv1.Deployment{foreignDeployment("web", map[string]string{reconcile.FooUIDLabel: "x"})}, nil)
		_, ctx := ktesting.NewTestContext(t)
		c := f.controller
		c.workqueue.Add(key)
		c.processNextWorkItem(ctx)
		if got := c.workqueue.NumRequeues(key); got != 0 {
			t.Errorf("NumRequeues = %d, want 0 (not an error)", got)
		}
		if got := c.workqueue.Len(); got != 0 {
			t.Errorf("queue length = %d, want 0 (the recheck waits %v)", got, notOwnedRecheckInterval)
		}
	})
}

// TestRun runs the controller with real informers on fake clientsets, from an empty
// cache to a converged Foo, and checks that cancellation stops it.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](2))
	unrelated := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "default"}}
	kubeclient := k8sfake.NewClientset(unrelated)
	client := fake.NewClientset(foo)
	c, done := runController(t, ctx, kubeclient, client, 2)

	// The controller creates the Deployment and reports on it.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.SamplecontrollerV1alpha1().Foos("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == 1 && got.Status.Selector != "", nil
	}); err != nil {
		t.Fatalf("Foo status was never written: %v", err)
	}
	if _, err := kubeclient.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("Deployment was not created: %v", err)
	}
	// The label selector keeps unrelated Deployments out of the cache.
	if _, err := c.deploymentsLister.Deployments("default").Get("unrelated"); !apierrors.IsNotFound(err) {
		t.Errorf("unrelated Deployment in the cache: err = %v, want NotFound", err)
	}
	// Cached objects carry no managedFields.
	cachedFoo, err := c.foosLister.Foos("default").Get("web")
	if err != nil {
		t.Fatal(err)
	}
	if len(cachedFoo.ManagedFields) != 0 {
		t.Errorf("cached Foo has %d managedFields entries, want 0", len(cachedFoo.ManagedFields))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if !c.workqueue.ShuttingDown() {
		t.Error("work queue still running after Run returned")
	}
}

// TestRunFinishesInFlightSyncs cancels Run while a sync waits on the API server: the
// sync completes, and Run returns only after it.
func TestRunFinishesInFlightSyncs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](1))
	kubeclient := k8sfake.NewClientset()
	client := fake.NewClientset(foo)
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release
		finished.Store(true)
		return false, nil, nil // on to the object tracker
	})
	c, done := runController(t, ctx, kubeclient, client, 1)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync never reached the API server")
	}
	cancel()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.workqueue.ShuttingDown(), nil
	}); err != nil {
		t.Fatal("the queue did not shut down after cancellation")
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if !finished.Load() {
		t.Error("Run returned before its in-flight sync finished")
	}
	if _, err := kubeclient.Tracker().Get(deploymentsResource, "default", "web"); err != nil {
		t.Errorf("the in-flight create did not complete: %v", err)
	}
}

// runController wires a controller to real informers on the fake clientsets, as
// main does, and runs it until ctx is cancelled. Run's result arrives on the channel.
func runController(t *testing.T, ctx context.Context, kubeclient *k8sfake.Clientset, client *fake.Clientset, workers int) (*Controller, <-chan error) {
	t.Helper()
	kubeFactory, sampleFactory := newInformerFactories(kubeclient, client, "", 0)
	c, err := NewController(ctx, kubeclient, client,
		kubeFactory.Apps().V1().Deployments(), sampleFactory.Samplecontroller().V1alpha1().Foos(), events.NewFakeRecorder(100))
	if err != nil {
		t.Fatal(err)
	}
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	t.Cleanup(kubeFactory.Shutdown)
	t.Cleanup(sampleFactory.Shutdown)

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, workers) }()
	return c, done
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
