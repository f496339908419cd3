package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// newFoo returns a Foo named name in namespace default, whose deploymentName is name.
func newFoo(name string, replicas *int32) *samplev1alpha1.Foo {
	return &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID(name + "-uid"), Generation: 1},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: replicas},
	}
}

var (
	earlier = metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	now     = metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
)

// TestCalculateStatus covers a sync that went through: readiness judged from the
// Deployment.
func TestCalculateStatus(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason, message string, at metav1.Time) []metav1.Condition {
		return withKStatus(metav1.Condition{
			Type: "Ready", Status: status, Reason: reason, Message: message,
			ObservedGeneration: 4, LastTransitionTime: at,
		})
	}
	tests := []struct {
		name       string
		replicas   *int32
		conditions []metav1.Condition // stored on the Foo before
		deployment func(d *appsv1.Deployment)
		noDeploy   bool
		want       samplev1alpha1.FooStatus
	}{{
		name:     "no deployment yet",
		replicas: ptr.To[int32](3),
		noDeploy: true,
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4,
			Conditions:         ready("False", "DeploymentProgressing", `Deployment "web" does not exist yet`, now),
		},
	}, {
		name:     "all replicas available",
		replicas: ptr.To[int32](3),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("True", "DeploymentAvailable", "3 of 3 replicas available", now),
		},
	}, {
		name:       "unchanged readiness keeps its transition time",
		replicas:   ptr.To[int32](3),
		conditions: ready("True", "DeploymentAvailable", "3 of 3 replicas available", earlier),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("True", "DeploymentAvailable", "3 of 3 replicas available", earlier),
		},
	}, {
		name:       "losing a replica flips readiness",
		replicas:   ptr.To[int32](3),
		conditions: ready("True", "DeploymentAvailable", "3 of 3 replicas available", earlier),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 3, ReadyReplicas: 2, AvailableReplicas: 2,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentProgressing", "2 of 3 replicas available", now),
		},
	}, {
		name:     "spec not yet observed by the deployment controller",
		replicas: ptr.To[int32](3),
		deployment: func(d *appsv1.Deployment) {
			d.Generation = 3
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentProgressing", `Waiting for Deployment "web" to observe its latest spec`, now),
		},
	}, {
		name:     "rolling out",
		replicas: ptr.To[int32](3),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1, ReadyReplicas: 3, AvailableReplicas: 3}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 4, ReadyReplicas: 3, AvailableReplicas: 3,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentProgressing", "Rolling out: 1 of 3 replicas updated", now),
		},
	}, {
		name:     "old replicas terminating",
		replicas: ptr.To[int32](3),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 3, ReadyReplicas: 4, AvailableReplicas: 4}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 4, ReadyReplicas: 4, AvailableReplicas: 4,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentProgressing", "Rolling out: 1 old replicas pending termination", now),
		},
	}, {
		name:     "progress deadline exceeded",
		replicas: ptr.To[int32](3),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3,
				Conditions: []appsv1.DeploymentCondition{{
					Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
					Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "web-1" has timed out progressing.`,
				}}}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 3,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentFailed", `Deployment "web" is not progressing: ReplicaSet "web-1" has timed out progressing.`, now),
		},
	}, {
		name:     "scaled to zero is ready",
		replicas: ptr.To[int32](0),
		deployment: func(d *appsv1.Deployment) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4,
			Selector:           "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions:         ready("True", "DeploymentAvailable", "0 of 0 replicas available", now),
		},
	}, {
		name:     "deployment being deleted",
		replicas: ptr.To[int32](1),
		deployment: func(d *appsv1.Deployment) {
			d.DeletionTimestamp = &earlier
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		},
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 4, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentProgressing", `Deployment "web" is being deleted`, now),
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("web", tc.replicas)
			foo.Generation = 4
			foo.Status.Conditions = tc.conditions
			var d *appsv1.Deployment
			if !tc.noDeploy {
				d = NewDeployment(foo)
				d.Generation = 2
				tc.deployment(d)
			}
			got := CalculateStatus(foo, d, nil, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CalculateStatus() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCalculateStatusAfterSyncErrors covers the syncs that did not go through: the
// name was taken, the write was refused, or the server failed.
func TestCalculateStatusAfterSyncErrors(t *testing.T) {
	const notOwned = `Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`
	const refused = `The API server refused to write Deployment "web": deployments.apps "web" is forbidden: exceeded quota`
	forbidden := fmt.Errorf("creating Deployment default/web: %w",
		apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("exceeded quota")))
	ready := func(status metav1.ConditionStatus, reason, message string, generation int64, at metav1.Time) []metav1.Condition {
		return withKStatus(metav1.Condition{
			Type: "Ready", Status: status, Reason: reason, Message: message,
			ObservedGeneration: generation, LastTransitionTime: at,
		})
	}
	stored := samplev1alpha1.FooStatus{
		ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, Selector: "a=b",
		Conditions: ready("True", "DeploymentAvailable", "1 of 1 replicas available", 1, earlier),
	}
	running := func(foo *samplev1alpha1.Foo) *appsv1.Deployment {
		d := NewDeployment(foo)
		d.Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		return d
	}
	tests := []struct {
		name       string
		stored     samplev1alpha1.FooStatus
		deployment func(foo *samplev1alpha1.Foo) *appsv1.Deployment
		err        error
		want       samplev1alpha1.FooStatus
	}{{
		name:   "name taken: no replica counts of someone else's Deployment",
		stored: stored,
		deployment: func(*samplev1alpha1.Foo) *appsv1.Deployment {
			return &appsv1.Deployment{Status: appsv1.DeploymentStatus{Replicas: 5, AvailableReplicas: 5}}
		},
		err:  fmt.Errorf("syncing: %w", ErrNotOwned),
		want: samplev1alpha1.FooStatus{ObservedGeneration: 2, Conditions: ready("False", "DeploymentNotOwned", notOwned, 2, now)},
	}, {
		name:   "name taken, already reported: unchanged",
		stored: samplev1alpha1.FooStatus{ObservedGeneration: 2, Conditions: ready("False", "DeploymentNotOwned", notOwned, 2, earlier)},
		err:    ErrNotOwned,
		want:   samplev1alpha1.FooStatus{ObservedGeneration: 2, Conditions: ready("False", "DeploymentNotOwned", notOwned, 2, earlier)},
	}, {
		name:   "create refused",
		stored: samplev1alpha1.FooStatus{},
		err:    forbidden,
		want:   samplev1alpha1.FooStatus{ObservedGeneration: 2, Conditions: ready("False", "DeploymentRejected", refused, 2, now)},
	}, {
		name:       "update refused: the replicas that run are still reported",
		stored:     stored,
		deployment: running,
		err:        forbidden,
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 2, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentRejected", refused, 2, now),
		},
	}, {
		// Readiness is not judged from the Deployment, so a refusal of a Deployment
		// that is available computes the stored status again and writes nothing.
		name: "update refused, already reported: unchanged",
		stored: samplev1alpha1.FooStatus{
			ObservedGeneration: 2, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentRejected", refused, 2, earlier),
		},
		deployment: running,
		err:        forbidden,
		want: samplev1alpha1.FooStatus{
			ObservedGeneration: 2, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Selector:   "samplecontroller.k8s.io/foo-uid=web-uid",
			Conditions: ready("False", "DeploymentRejected", refused, 2, earlier),
		},
	}, {
		name:       "server failed: the stored status is kept",
		stored:     stored,
		deployment: running,
		err:        apierrors.NewServiceUnavailable("etcd is down"),
		want:       stored,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("web", ptr.To[int32](1))
			foo.Generation = 2
			foo.Status = *tc.stored.DeepCopy()
			var d *appsv1.Deployment
			if tc.deployment != nil {
				d = tc.deployment(foo)
			}
			before := foo.DeepCopy()
			got := CalculateStatus(foo, d, tc.err, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CalculateStatus() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, foo); diff != "" {
				t.Errorf("CalculateStatus() modified the Foo (-before +after):\n%s", diff)
			}
		})
	}
}

// withKStatus returns ready and, after it, the condition kstatus reads for its reason:
// Reconciling while the Deployment progresses, Stalled when the Foo cannot converge.
func withKStatus(ready metav1.Condition) []metav1.Condition {
	conditions := []metav1.Condition{ready}
	other := ready
	other.Status = metav1.ConditionTrue
	switch ready.Reason {
	case "DeploymentProgressing":
		other.Type = "Reconciling"
	case "DeploymentFailed", "DeploymentNotOwned", "DeploymentRejected":
		other.Type = "Stalled"
	default:
		return conditions
	}
	return append(conditions, other)
}

func TestIsRejected(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	tests := []struct {
		err  error
		want bool
	}{
		{apierrors.NewForbidden(gr, "web", errors.New("exceeded quota")), true},
		{apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil), true},
		{apierrors.NewBadRequest("bad"), true},
		{apierrors.NewRequestEntityTooLargeError("too large"), true},
		{fmt.Errorf("creating Deployment default/web: %w", apierrors.NewForbidden(gr, "web", errors.New("no"))), true},
		{apierrors.NewConflict(gr, "web", errors.New("stale")), false},
		{apierrors.NewServiceUnavailable("etcd is down"), false},
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewInternalError(errors.New("webhook timed out")), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := IsRejected(tt.err); got != tt.want {
			t.Errorf("IsRejected(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestRejectedMessage(t *testing.T) {
	foo := newFoo("web", nil)
	if got, want := RejectedMessage(foo, errors.New("plain")), `The API server refused to write Deployment "web": plain`; got != want {
		t.Errorf("RejectedMessage = %q, want %q", got, want)
	}
	// Not UTF-8: each stray byte becomes U+FFFD, as in the status the API server stores.
	if got, want := RejectedMessage(foo, errors.New("a\xa2b\xff\xfe")), "The API server refused to write Deployment \"web\": a\uFFFDb\uFFFD\uFFFD"; got != want {
		t.Errorf("RejectedMessage = %q, want %q", got, want)
	}
	// A webhook chooses its message; a long one is cut, on a rune boundary, to fit an
	// event's note.
	long := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New(strings.Repeat("é", 2000)))
	got := RejectedMessage(foo, long)
	if len(got) > MaxMessageLength || !utf8.ValidString(got) || !strings.HasSuffix(got, "é...") {
		t.Errorf("RejectedMessage of a long answer: %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[len(got)-10:])
	}
}

func TestRejectionCause(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	invalid := func(fields ...string) error {
		var errs field.ErrorList
		for _, f := range fields {
			errs = append(errs, field.Invalid(field.NewPath(f), "x", "bad"))
		}
		return apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", errs)
	}
	forbidden := func(why string) error { return apierrors.NewForbidden(gr, "web", errors.New(why)) }

	same := [][2]error{
		{forbidden("denied request 1"), forbidden("denied request 2")},
		{invalid("spec.replicas", "spec.template"), invalid("spec.template", "spec.replicas")},
		{fmt.Errorf("creating: %w", forbidden("a")), forbidden("b")},
	}
	for _, pair := range same {
		if a, b := RejectionCause(pair[0]), RejectionCause(pair[1]); a != b {
			t.Errorf("RejectionCause(%v) = %q, RejectionCause(%v) = %q; want the same", pair[0], a, pair[1], b)
		}
	}
	different := [][2]error{
		{forbidden("a"), invalid("spec.replicas")},
		{invalid("spec.replicas"), invalid("spec.template")},
		{apierrors.NewBadRequest("a"), apierrors.NewRequestEntityTooLargeError("a")},
	}
	for _, pair := range different {
		if a, b := RejectionCause(pair[0]), RejectionCause(pair[1]); a == b {
			t.Errorf("RejectionCause(%v) = RejectionCause(%v) = %q; want different", pair[0], pair[1], a)
		}
	}
	if got := RejectionCause(errors.New("connection refused")); got != "unknown" {
		t.Errorf("RejectionCause(not an API status) = %q, want unknown", got)
	}
}
