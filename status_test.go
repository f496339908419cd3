package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

var (
	earlier = metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	now     = metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
)

func TestNewFooStatus(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason, message string, at metav1.Time) []metav1.Condition {
		return []metav1.Condition{{
			Type: "Ready", Status: status, Reason: reason, Message: message,
			ObservedGeneration: 4, LastTransitionTime: at,
		}}
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
				d = newDeployment(foo)
				d.Generation = 2
				tc.deployment(d)
			}
			got := newFooStatus(foo, d, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("newFooStatus() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewNotOwnedStatus(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	foo.Generation = 2
	foo.Status = samplev1alpha1.FooStatus{ObservedGeneration: 1, Replicas: 1, AvailableReplicas: 1, Selector: "a=b"}
	want := samplev1alpha1.FooStatus{
		ObservedGeneration: 2,
		Conditions: []metav1.Condition{{
			Type: "Ready", Status: "False", Reason: "DeploymentNotOwned",
			Message:            `Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`,
			ObservedGeneration: 2, LastTransitionTime: now,
		}},
	}
	if diff := cmp.Diff(want, newNotOwnedStatus(foo, now)); diff != "" {
		t.Errorf("newNotOwnedStatus() mismatch (-want +got):\n%s", diff)
	}
}
