package gitops

import (
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// moment is a Foo as the API server serves it at one point of its life, and how the
// tools should read it.
type moment struct {
	name string
	foo  *unstructured.Unstructured
	want kstatus.Status
}

// lifecycle takes one Foo through every outcome of a sync, each status computed by
// CalculateStatus from the one before it, as the controller computes them: created,
// rolled out, a new spec, refused, a progress deadline, a name taken.
func lifecycle(t *testing.T) []moment {
	t.Helper()
	foo := &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault, UID: "web-uid", Generation: 1},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: "web", Replicas: ptr.To[int32](2)},
	}
	now := metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	deployment := func(updated, available int32, conditions ...appsv1.DeploymentCondition) *appsv1.Deployment {
		d := reconcile.NewDeployment(foo)
		d.Status = appsv1.DeploymentStatus{Replicas: updated, UpdatedReplicas: updated, ReadyReplicas: available, AvailableReplicas: available, Conditions: conditions}
		return d
	}
	deadline := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "timed out"}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("exceeded quota"))
	steps := []struct {
		name       string
		generation int64
		deployment *appsv1.Deployment
		err        error
		synced     bool // false: only the spec changed, the controller has not synced yet
		want       kstatus.Status
	}{
		{name: "no Deployment yet", synced: true, want: kstatus.InProgressStatus},
		{name: "rolling out", deployment: deployment(2, 1), synced: true, want: kstatus.InProgressStatus},
		{name: "available", deployment: deployment(2, 2), synced: true, want: kstatus.CurrentStatus},
		{name: "a new spec not yet observed", generation: 2, want: kstatus.InProgressStatus},
		{name: "the update refused", generation: 2, deployment: deployment(2, 2), err: forbidden, synced: true, want: kstatus.FailedStatus},
		{name: "the update accepted at last", generation: 2, deployment: deployment(2, 2), synced: true, want: kstatus.CurrentStatus},
		{name: "progress deadline exceeded", generation: 2, deployment: deployment(1, 1, deadline), synced: true, want: kstatus.FailedStatus},
		{name: "rolled out after all", generation: 2, deployment: deployment(2, 2), synced: true, want: kstatus.CurrentStatus},
		{name: "the name taken by another's Deployment", generation: 3, deployment: &appsv1.Deployment{}, err: reconcile.ErrNotOwned, synced: true, want: kstatus.FailedStatus},
		{name: "the name free again, its Deployment created", generation: 3, synced: true, want: kstatus.InProgressStatus},
	}
	var moments []moment
	for _, step := range steps {
		if step.generation != 0 {
			foo.Generation = step.generation
		}
		if step.synced {
			foo.Status = reconcile.CalculateStatus(foo, step.deployment, step.err, now)
		}
		moments = append(moments, moment{name: step.name, foo: toUnstructured(t, foo), want: step.want})
	}
	return moments
}

// toUnstructured is foo as JSON from the API server, which tools decode without its type.
func toUnstructured(t *testing.T, foo *samplev1alpha1.Foo) *unstructured.Unstructured {
	t.Helper()
	object, err := runtime.DefaultUnstructuredConverter.ToUnstructured(foo)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: object}
	u.SetGroupVersionKind(samplev1alpha1.SchemeGroupVersion.WithKind("Foo"))
	return u
}

// TestKStatusReadsTheFoo reads each moment of a Foo's life with kstatus: Current once
// available, InProgress while its Deployment is created or rolled out and while a new
// spec is not yet observed, Failed when it cannot converge until someone acts.
func TestKStatusReadsTheFoo(t *testing.T) {
	for _, m := range lifecycle(t) {
		got, message, err := KStatus(m.foo)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if got != m.want {
			t.Errorf("%s: kstatus reads %s (%s), want %s; status %v", m.name, got, message, m.want, m.foo.Object["status"])
		}
	}
}
