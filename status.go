package main

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// newFooStatus computes the status a Foo should have given d, the Deployment it
// controls as last observed, or nil when that Deployment does not exist (yet).
// now stamps a Ready condition whose status changes; an unchanged condition keeps
// its transition time, so an unchanged world computes a status equal to the stored one.
func newFooStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment, now metav1.Time) samplev1alpha1.FooStatus {
	status := samplev1alpha1.FooStatus{
		ObservedGeneration: foo.Generation,
		Conditions:         cloneConditions(foo.Status.Conditions),
	}
	ready := metav1.Condition{
		Type:               samplev1alpha1.ConditionReady,
		ObservedGeneration: foo.Generation,
		LastTransitionTime: now,
	}
	if d == nil {
		ready.Status = metav1.ConditionFalse
		ready.Reason = samplev1alpha1.ReasonDeploymentProgressing
		ready.Message = fmt.Sprintf("Deployment %q does not exist yet", foo.Spec.DeploymentName)
	} else {
		status.Replicas = d.Status.Replicas
		status.ReadyReplicas = d.Status.ReadyReplicas
		status.AvailableReplicas = d.Status.AvailableReplicas
		if selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
			status.Selector = selector.String()
		}
		ready.Status, ready.Reason, ready.Message = deploymentReadiness(d, desiredReplicas(foo))
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	return status
}

// newNotOwnedStatus computes the status of a Foo whose Deployment name is taken by a
// Deployment that the Foo does not control.
func newNotOwnedStatus(foo *samplev1alpha1.Foo, now metav1.Time) samplev1alpha1.FooStatus {
	status := samplev1alpha1.FooStatus{
		ObservedGeneration: foo.Generation,
		Conditions:         cloneConditions(foo.Status.Conditions),
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               samplev1alpha1.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             samplev1alpha1.ReasonDeploymentNotOwned,
		Message:            notOwnedMessage(foo),
		ObservedGeneration: foo.Generation,
		LastTransitionTime: now,
	})
	return status
}

// newRejectedStatus computes the status of a Foo whose Deployment the API server
// refused to create or update, with message; d is the Deployment as last observed, or
// nil when it does not exist.
func newRejectedStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment, message string, now metav1.Time) samplev1alpha1.FooStatus {
	status := newFooStatus(foo, d, now)
	// The replica counts of d, but not the readiness newFooStatus judged from it:
	// Ready goes from the stored condition to the refusal, so that a refusal already
	// reported keeps its transition time and computes the stored status again.
	status.Conditions = cloneConditions(foo.Status.Conditions)
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               samplev1alpha1.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             samplev1alpha1.ReasonDeploymentRejected,
		Message:            message,
		ObservedGeneration: foo.Generation,
		LastTransitionTime: now,
	})
	return status
}

func notOwnedMessage(foo *samplev1alpha1.Foo) string {
	return fmt.Sprintf("Deployment %q already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName", foo.Spec.DeploymentName)
}

// deploymentReadiness tells whether d has rolled out its current spec with want
// replicas, all available, as the status, reason and message of a Ready condition.
func deploymentReadiness(d *appsv1.Deployment, want int32) (metav1.ConditionStatus, string, string) {
	progressing := func(format string, args ...any) (metav1.ConditionStatus, string, string) {
		return metav1.ConditionFalse, samplev1alpha1.ReasonDeploymentProgressing, fmt.Sprintf(format, args...)
	}
	switch {
	case d.DeletionTimestamp != nil:
		return progressing("Deployment %q is being deleted", d.Name)
	case d.Status.ObservedGeneration < d.Generation:
		return progressing("Waiting for Deployment %q to observe its latest spec", d.Name)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == "False" {
			return metav1.ConditionFalse, samplev1alpha1.ReasonDeploymentFailed,
				fmt.Sprintf("Deployment %q is not progressing: %s", d.Name, c.Message)
		}
	}
	switch {
	case d.Status.UpdatedReplicas < want:
		return progressing("Rolling out: %d of %d replicas updated", d.Status.UpdatedReplicas, want)
	case d.Status.Replicas > d.Status.UpdatedReplicas:
		return progressing("Rolling out: %d old replicas pending termination", d.Status.Replicas-d.Status.UpdatedReplicas)
	case d.Status.AvailableReplicas < want:
		return progressing("%d of %d replicas available", d.Status.AvailableReplicas, want)
	}
	return metav1.ConditionTrue, samplev1alpha1.ReasonDeploymentAvailable,
		fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
}

func cloneConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	return append(make([]metav1.Condition, 0, len(in)), in...)
}
