// Package reconcile holds the decisions of the Foo controller: the Deployment a Foo
// asks for, and the status that reports how far it got; and the trimmed forms in which
// its informers cache both (cached.go). It has no clients, so the controller, its
// tests and the benchmark share one definition.
package reconcile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

const (
	// FooUIDLabel marks a Deployment, and the Pods it selects, as belonging to the Foo
	// with that UID. The Deployment informer selects on this key, so the cache holds
	// only the Deployments this controller manages. A UID, unlike a Foo's name, is
	// always a valid label value and is never reused by a later Foo of the same name.
	FooUIDLabel = samplecontroller.GroupName + "/foo-uid"

	// ContainerName and ContainerImage describe the one container a Foo runs.
	ContainerName  = "nginx"
	ContainerImage = "nginx:latest"
)

// FooGVK is the group, version and kind written into owner references.
var FooGVK = samplev1alpha1.SchemeGroupVersion.WithKind("Foo")

// DesiredReplicas is the replica count a Foo asks for. The CRD defaults a missing
// value to 1; this covers Foos that bypassed the schema's defaulting.
func DesiredReplicas(foo *samplev1alpha1.Foo) int32 {
	if foo.Spec.Replicas == nil {
		return 1
	}
	return *foo.Spec.Replicas
}

// deploymentLabels are the labels a Foo's Deployment carries and selects its Pods by.
func deploymentLabels(foo *samplev1alpha1.Foo) map[string]string {
	return map[string]string{FooUIDLabel: string(foo.UID)}
}

// NewDeployment builds the Deployment a Foo asks for, controlled by the Foo so that
// deleting the Foo garbage-collects it.
func NewDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            foo.Spec.DeploymentName,
			Namespace:       foo.Namespace,
			Labels:          deploymentLabels(foo),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(foo, FooGVK)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(DesiredReplicas(foo)),
			Selector: &metav1.LabelSelector{MatchLabels: deploymentLabels(foo)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: deploymentLabels(foo)},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: ContainerName, Image: ContainerImage}},
				},
			},
		},
	}
}

// UpdateDeployment returns a copy of current, a Deployment that foo controls, with
// every field NewDeployment sets brought back to what foo asks for, and whether
// anything had to change. Everything else is left as it is: annotations such as the
// one `kubectl rollout restart` adds, labels and containers that others added
// (wherever they stand), and the defaults the apiserver filled in.
//
// The selector is immutable, so a Deployment created by an older controller keeps its
// own, and its Pod template keeps the labels that selector needs. That also means an
// adopted Deployment is not rolled out again just to relabel its Pods.
func UpdateDeployment(foo *samplev1alpha1.Foo, current *appsv1.Deployment) (*appsv1.Deployment, bool) {
	d := current.DeepCopy()
	changed := false

	if ensureLabels(&d.Labels, deploymentLabels(foo)) {
		changed = true
	}
	if want := DesiredReplicas(foo); d.Spec.Replicas == nil || *d.Spec.Replicas != want {
		d.Spec.Replicas = ptr.To(want)
		changed = true
	}
	if d.Spec.Selector != nil && ensureLabels(&d.Spec.Template.Labels, d.Spec.Selector.MatchLabels) {
		changed = true
	}
	// The Foo's container is the one named ContainerName, wherever it stands: others
	// may add containers before or after it, and those are left alone.
	spec := &d.Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == ContainerName })
	if i < 0 {
		spec.Containers = append(spec.Containers, corev1.Container{Name: ContainerName, Image: ContainerImage})
		changed = true
	} else if c := &spec.Containers[i]; c.Image != ContainerImage {
		c.Image = ContainerImage
		changed = true
	}
	return d, changed
}

// ensureLabels sets every key of want in *labels to its value in want, keeping any
// other labels, and reports whether it changed anything.
func ensureLabels(labels *map[string]string, want map[string]string) bool {
	changed := false
	for k, v := range want {
		if got, ok := (*labels)[k]; ok && got == v {
			continue
		}
		if *labels == nil {
			*labels = make(map[string]string, len(want))
		}
		(*labels)[k] = v
		changed = true
	}
	return changed
}

// DeploymentPatch is the strategic merge patch that turns current into updated, a copy
// of it that UpdateDeployment or the controller changed, with current's
// resourceVersion as its precondition: the API server refuses it with a conflict once
// the Deployment has changed since current was read, as it would an update.
//
// The patch names only the fields that differ, so it can be made from a trimmed copy
// (the controller's cache keeps only what it reads) and leaves everything else on the
// server as it is. Containers merge by name: a container the Foo's is added to the
// others, wherever they stand, and an image set on it changes nothing else of it.
func DeploymentPatch(current, updated *appsv1.Deployment) ([]byte, error) {
	from, err := json.Marshal(current)
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(updated)
	if err != nil {
		return nil, err
	}
	diff, err := strategicpatch.CreateTwoWayMergePatch(from, to, appsv1.Deployment{})
	if err != nil {
		return nil, fmt.Errorf("computing the patch of Deployment %s/%s: %w", current.Namespace, current.Name, err)
	}
	patch := map[string]any{}
	decoder := json.NewDecoder(bytes.NewReader(diff))
	decoder.UseNumber() // numbers pass through as they are, not as float64
	if err := decoder.Decode(&patch); err != nil {
		return nil, err
	}
	metadata, _ := patch["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		patch["metadata"] = metadata
	}
	metadata["resourceVersion"] = current.ResourceVersion
	return json.Marshal(patch)
}
