package reconcile

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CachedDeployment is a Deployment as the controller's informer keeps it: only what the
// controller reads (CalculateStatus, UpdateDeployment and its checks of ownership), in
// a struct of its own. An appsv1.Deployment is 1232 bytes before any field is set (the
// Pod spec is inlined) and each container another few hundred; kept this way a cached
// Deployment takes a third of the heap of a trimmed appsv1.Deployment
// (BenchmarkDeploymentCache). Deployment turns it back into one for a sync.
//
// What stays:
//   - metadata: name, namespace, UID, resourceVersion, generation, deletionTimestamp,
//     labels and ownerReferences;
//   - spec: replicas, the selector, the Pod template's labels, and each container's
//     name and image;
//   - status: the replica counts, observedGeneration, and a Progressing condition that
//     is False, the one the Foo's status reports.
//
// An update from such a copy would wipe what it lacks, so the controller writes a cached
// Deployment only by patches of the fields it changes (DeploymentPatch), with the cached
// resourceVersion as their precondition. Cached objects are never written to, so a
// selector or template labels equal to the Deployment's labels, as in every Deployment
// the controller creates, share the labels' map.
type CachedDeployment struct {
	metav1.ObjectMeta
	Replicas *int32
	// Selector is nil when SelectsLabels is set: the selector is exactly the labels.
	Selector       *metav1.LabelSelector
	SelectsLabels  bool
	TemplateLabels map[string]string
	Containers     []CachedContainer
	Status         appsv1.DeploymentStatus
}

// CachedContainer is what a CachedDeployment keeps of a container.
type CachedContainer struct {
	Name, Image string
}

// CacheDeployment is the Deployment informer's transform: it turns each Deployment into
// a CachedDeployment, and leaves anything else (a tombstone, holding one cached
// already) as it is.
func CacheDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	c := &CachedDeployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:              d.Name,
			Namespace:         d.Namespace,
			UID:               d.UID,
			ResourceVersion:   d.ResourceVersion,
			Generation:        d.Generation,
			DeletionTimestamp: d.DeletionTimestamp,
			Labels:            d.Labels,
			OwnerReferences:   d.OwnerReferences,
		},
		Replicas:       d.Spec.Replicas,
		Selector:       d.Spec.Selector,
		TemplateLabels: d.Spec.Template.Labels,
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: d.Status.ObservedGeneration,
			Replicas:           d.Status.Replicas,
			UpdatedReplicas:    d.Status.UpdatedReplicas,
			ReadyReplicas:      d.Status.ReadyReplicas,
			AvailableReplicas:  d.Status.AvailableReplicas,
		},
	}
	if maps.Equal(c.TemplateLabels, c.Labels) {
		c.TemplateLabels = c.Labels
	}
	if s := c.Selector; s != nil && len(s.MatchExpressions) == 0 && maps.Equal(s.MatchLabels, c.Labels) {
		c.Selector, c.SelectsLabels = nil, true
	}
	if containers := d.Spec.Template.Spec.Containers; len(containers) > 0 {
		c.Containers = make([]CachedContainer, len(containers))
		for i, container := range containers {
			c.Containers[i] = CachedContainer{Name: container.Name, Image: container.Image}
		}
	}
	for _, condition := range d.Status.Conditions {
		if condition.Type == appsv1.DeploymentProgressing && condition.Status == corev1.ConditionFalse {
			c.Status.Conditions = []appsv1.DeploymentCondition{{Type: condition.Type, Status: condition.Status, Reason: condition.Reason, Message: condition.Message}}
			break // the first, as deploymentReadiness reads it
		}
	}
	return c, nil
}

// Deployment returns the Deployment c keeps, with only the fields it keeps set. It
// shares c's maps and slices, which neither may be written through.
func (c *CachedDeployment) Deployment() *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: c.ObjectMeta,
		Spec:       appsv1.DeploymentSpec{Replicas: c.Replicas, Selector: c.Selector},
		Status:     c.Status,
	}
	if c.SelectsLabels {
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: c.Labels}
	}
	d.Spec.Template.Labels = c.TemplateLabels
	if len(c.Containers) > 0 {
		d.Spec.Template.Spec.Containers = make([]corev1.Container, len(c.Containers))
		for i, container := range c.Containers {
			d.Spec.Template.Spec.Containers[i] = corev1.Container{Name: container.Name, Image: container.Image}
		}
	}
	return d
}

// GetObjectKind is runtime.Object's: a cached Deployment carries no kind.
func (c *CachedDeployment) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is runtime.Object's, for client-go's cache mutation detector.
func (c *CachedDeployment) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if c.Replicas != nil {
		replicas := *c.Replicas
		out.Replicas = &replicas
	}
	out.Selector = c.Selector.DeepCopy()
	out.TemplateLabels = maps.Clone(c.TemplateLabels)
	if maps.Equal(c.TemplateLabels, c.Labels) {
		out.TemplateLabels = out.Labels // shared, as CacheDeployment shares them
	}
	out.Containers = append([]CachedContainer(nil), c.Containers...)
	c.Status.DeepCopyInto(&out.Status)
	return &out
}
