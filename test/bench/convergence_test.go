package main

import (
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

func newFoo(name string, replicas int32) *samplev1alpha1.Foo {
	return &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To(replicas)},
	}
}

// withReadyStatus is foo with the status our controller writes.
func withReadyStatus(foo *samplev1alpha1.Foo, observed int64) *samplev1alpha1.Foo {
	f := foo.DeepCopy()
	f.Status = samplev1alpha1.FooStatus{
		ObservedGeneration: observed,
		Conditions:         []metav1.Condition{{Type: samplev1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: samplev1alpha1.ReasonDeploymentProgressing}},
	}
	return f
}

// withStatusWrite is foo as the apiserver returns it after an update of its status.
func withStatusWrite(foo *samplev1alpha1.Foo) *samplev1alpha1.Foo {
	f := foo.DeepCopy()
	f.ManagedFields = append(f.ManagedFields, metav1.ManagedFieldsEntry{Manager: "sample-controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"})
	return f
}

func newDeploymentOf(foo *samplev1alpha1.Foo, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: foo.Spec.DeploymentName, Namespace: foo.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(foo, samplev1alpha1.SchemeGroupVersion.WithKind("Foo"))},
		},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
	}
}

func TestStatusRule(t *testing.T) {
	foo := newFoo("a", 1)
	created := foo.DeepCopy()
	created.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate}}
	available := withStatusWrite(withReadyStatus(created, 1))
	available.Status.Conditions[0].Status, available.Status.AvailableReplicas = metav1.ConditionTrue, 1
	classicAvailable := withStatusWrite(created)
	classicAvailable.Status.AvailableReplicas = 1
	// ready and wrtn: done without nodes, as ours and as the classic peer; and with
	// nodes, where the replicas must be available.
	tests := []struct {
		name                               string
		foo                                *samplev1alpha1.Foo
		ready, wrtn, readyNodes, wrtnNodes bool
	}{
		{"as created", created, false, false, false, false},
		{"status of the current generation with Ready False", withStatusWrite(withReadyStatus(created, 1)), true, true, false, false},
		{"status of the current generation with Ready True", available, true, true, true, true},
		{"status of an older generation", withStatusWrite(withReadyStatus(created, 0)), false, true, false, false},
		{"status without a Ready condition", withStatusWrite(func() *samplev1alpha1.Foo {
			f := created.DeepCopy()
			f.Status.ObservedGeneration = 1
			return f
		}()), false, true, false, false},
		{"only availableReplicas written, as the classic controller does", withStatusWrite(created), false, true, false, false},
		{"the classic controller's, its replicas available", classicAvailable, false, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				anyStatus, nodes, want bool
			}{{false, false, tt.ready}, {true, false, tt.wrtn}, {false, true, tt.readyNodes}, {true, true, tt.wrtnNodes}} {
				if got := statusDone(tt.foo, c.anyStatus, c.nodes); got != c.want {
					t.Errorf("statusDone(anyStatus %v, nodes %v) = %v, want %v", c.anyStatus, c.nodes, got, c.want)
				}
			}
		})
	}
}

func TestDeploymentMatches(t *testing.T) {
	foo := newFoo("a", 3)
	other := newFoo("b", 3)
	notController := newDeploymentOf(foo, 3)
	notController.OwnerReferences[0].Controller = nil
	tests := []struct {
		name string
		d    *appsv1.Deployment
		want bool
	}{
		{"controlled by the Foo with its replicas", newDeploymentOf(foo, 3), true},
		{"other replicas", newDeploymentOf(foo, 2), false},
		{"no replicas", func() *appsv1.Deployment { d := newDeploymentOf(foo, 3); d.Spec.Replicas = nil; return d }(), false},
		{"controlled by another Foo", newDeploymentOf(other, 3), false},
		{"owned but not controlled", notController, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deploymentMatches(tt.d, foo); got != tt.want {
				t.Errorf("deploymentMatches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConvergence(t *testing.T) {
	a, b := newFoo("a", 1), newFoo("b", 2)
	start := time.Unix(100, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	c := newConvergence([]*samplev1alpha1.Foo{a, b}, false, false, false, start)

	c.observe(newDeploymentOf(a, 1), at(100))
	c.observe(newDeploymentOf(b, 1), at(200)) // wrong replicas: arrived, not done
	c.observe(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}, at(250))
	c.observe(withReadyStatus(a, 1), at(300))
	c.observe(withReadyStatus(b, 1), at(400))
	if got, want := c.progress(), "1 of 2 Deployments, 2 of 2 statuses"; got != want || c.isDone() {
		t.Fatalf("progress = %q, done %v; want %q, not done", got, c.isDone(), want)
	}
	c.observe(withReadyStatus(a, 0), at(450)) // a status can fall behind again
	if got, want := c.progress(), "1 of 2 Deployments, 1 of 2 statuses"; got != want {
		t.Fatalf("progress = %q after a status fell behind, want %q", got, want)
	}
	c.observe(withReadyStatus(a, 1), at(460))
	c.observe(newDeploymentOf(b, 2), at(500))
	c.observe(newDeploymentOf(b, 2), at(900)) // later events change nothing
	if !c.isDone() {
		t.Fatal("not done with every Deployment and status in place")
	}
	// The first Deployment at 100 ms, the last at 500; the statuses all done at 460 ms,
	// after one fell behind at 450.
	want := coldStartResult{Foos: 2, Converged: true, Seconds: 0.5, DeploymentsDone: 2, StatusesDone: 2,
		FirstDeploymentSeconds: 0.1, DeploymentsSeconds: 0.5, StatusesSeconds: 0.46}
	got := c.result(time.Minute)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("result = %+v, want %+v", got, want)
	}
}

func TestConvergenceTimedOut(t *testing.T) {
	a := newFoo("a", 1)
	c := newConvergence([]*samplev1alpha1.Foo{a, newFoo("b", 1)}, false, false, false, time.Unix(100, 0))
	c.observe(newDeploymentOf(a, 1), time.Unix(101, 0))
	c.observe(withReadyStatus(a, 1), time.Unix(102, 0))
	r := c.result(time.Minute)
	if r.Converged || r.Seconds != 60 || r.timedOutText() != "timed out: 1 of 2 after 60 s" {
		t.Errorf("result = %+v, %q", r, r.timedOutText())
	}
}

func TestConvergenceCountsEvents(t *testing.T) {
	a := newFoo("a", 1)
	start := time.Unix(100, 0)
	c := newConvergence([]*samplev1alpha1.Foo{a}, false, false, true, start)
	c.observe(newDeploymentOf(a, 1), start.Add(100*time.Millisecond))
	c.observe(withReadyStatus(a, 1), start.Add(200*time.Millisecond))
	if c.isDone() {
		t.Fatal("done before the Foo's Event")
	}
	event := func(reason string) *eventsv1.Event {
		return &eventsv1.Event{Reason: reason, Regarding: corev1.ObjectReference{UID: a.UID}}
	}
	c.observe(event("DeploymentUpdated"), start.Add(300*time.Millisecond))
	if got, want := c.progress(), "1 of 1 Deployments, 1 of 1 statuses, 0 of 1 Events"; got != want {
		t.Fatalf("progress = %q, want %q", got, want)
	}
	c.observe(event(reconcile.EventDeploymentCreated), start.Add(400*time.Millisecond))
	c.observe(event(reconcile.EventDeploymentCreated), start.Add(900*time.Millisecond)) // a second one counts once
	if r := c.result(time.Minute); !r.Converged || r.Seconds != 0.4 || c.nEvent != 1 {
		t.Errorf("result = %+v, %d Events; want converged at the first Event, 0.4 s, and one Event", r, c.nEvent)
	}
}
