// Package cached holds the trimmed forms in which the controller's informers cache
// Deployments and Foos (their transforms, TrimDeployment and TrimFoo), and the string
// table they share.
package cached

import (
	"maps"
	"slices"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// Deployment is a Deployment as the controller's informer keeps it: only what the
// controller reads (reconcile.CalculateStatus, reconcile.UpdateDeployment and its
// checks of ownership), in a struct of its own. An appsv1.Deployment is 1232 bytes
// before any field is set (the Pod spec is inlined), each container another few
// hundred, and each map of labels a few hundred more; kept this way a cached Deployment
// takes a sixth of the heap of the Deployment decoded (BenchmarkDeploymentCache). Full
// turns it back into one for a sync.
//
// What stays:
//   - metadata: name, namespace, UID, resourceVersion, generation, deletionTimestamp,
//     labels and ownerReferences;
//   - spec: replicas, the selector, the Pod template's labels, and each container's
//     name and image;
//   - status: the replica counts, observedGeneration, and a Progressing condition that
//     is False, the one the Foo's status reports.
//
// The labels are kept as a list of pairs, not in ObjectMeta.Labels, which stays empty:
// read them through Deployment. Strings that many Deployments repeat (the namespace,
// label keys, the owner's kind, the image) are kept once for all of them.
//
// An update from such a copy would wipe what it lacks, so the controller writes a cached
// Deployment only by patches of the fields it changes (reconcile.DeploymentPatch), with the cached
// resourceVersion as their precondition.
type Deployment struct {
	metav1.ObjectMeta
	// LabelPairs are the labels, key then value, by key.
	LabelPairs []string
	Replicas   *int32
	// Selector is nil when SelectsLabels is set: the selector is exactly the labels, as
	// in every Deployment the controller creates. So are TemplateLabels with
	// TemplateHasLabels.
	Selector          *metav1.LabelSelector
	SelectsLabels     bool
	TemplateLabels    map[string]string
	TemplateHasLabels bool
	Containers        []Container
	Status            appsv1.DeploymentStatus
}

// Container is what a Deployment keeps of a container.
type Container struct {
	Name, Image string
}

// TrimDeployment is the Deployment informer's transform: it turns each Deployment into
// a Deployment, and leaves anything else (a tombstone, holding one cached
// already) as it is.
func TrimDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	c := &Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:              d.Name,
			Namespace:         shared(d.Namespace),
			UID:               d.UID,
			ResourceVersion:   d.ResourceVersion,
			Generation:        d.Generation,
			DeletionTimestamp: d.DeletionTimestamp,
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
	c.OwnerReferences = sharedOwners(d.OwnerReferences, d.Name)
	c.LabelPairs = labelPairs(d.Labels, c.OwnerReferences)
	if maps.Equal(c.TemplateLabels, d.Labels) {
		c.TemplateLabels, c.TemplateHasLabels = nil, true
	}
	if s := c.Selector; s != nil && len(s.MatchExpressions) == 0 && maps.Equal(s.MatchLabels, d.Labels) {
		c.Selector, c.SelectsLabels = nil, true
	}
	if containers := d.Spec.Template.Spec.Containers; len(containers) > 0 {
		c.Containers = make([]Container, len(containers))
		for i, container := range containers {
			c.Containers[i] = Container{Name: shared(container.Name), Image: shared(container.Image)}
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

// Full returns the Deployment c keeps, with only the fields it keeps set. It
// shares c's maps and slices, which neither may be written through.
func (c *Deployment) Full() *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: c.ObjectMeta,
		Spec:       appsv1.DeploymentSpec{Replicas: c.Replicas, Selector: c.Selector},
		Status:     c.Status,
	}
	if c.LabelPairs != nil {
		d.Labels = make(map[string]string, len(c.LabelPairs)/2)
		for i := 0; i+1 < len(c.LabelPairs); i += 2 {
			d.Labels[c.LabelPairs[i]] = c.LabelPairs[i+1]
		}
	}
	if c.SelectsLabels {
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: d.Labels}
	}
	d.Spec.Template.Labels = c.TemplateLabels
	if c.TemplateHasLabels {
		d.Spec.Template.Labels = d.Labels
	}
	if len(c.Containers) > 0 {
		d.Spec.Template.Spec.Containers = make([]corev1.Container, len(c.Containers))
		for i, container := range c.Containers {
			d.Spec.Template.Spec.Containers[i] = corev1.Container{Name: container.Name, Image: container.Image}
		}
	}
	return d
}

// labelPairs are labels as Deployment keeps them: key, value, by key, the keys
// shared, and a value equal to an owner's UID (FooUIDLabel's) sharing its string.
func labelPairs(labels map[string]string, owners []metav1.OwnerReference) []string {
	if labels == nil {
		return nil
	}
	pairs := make([]string, 0, 2*len(labels))
	for _, key := range slices.Sorted(maps.Keys(labels)) {
		value := labels[key]
		for _, owner := range owners {
			if string(owner.UID) == value {
				value = string(owner.UID)
				break
			}
		}
		pairs = append(pairs, shared(key), value)
	}
	return pairs
}

// sharedOwners is a copy of owners whose API version, kind and flags are shared, and
// whose name, when it is the Deployment's name, shares that string.
func sharedOwners(owners []metav1.OwnerReference, name string) []metav1.OwnerReference {
	if owners == nil {
		return nil
	}
	out := make([]metav1.OwnerReference, len(owners))
	for i, owner := range owners {
		out[i] = metav1.OwnerReference{
			APIVersion: shared(owner.APIVersion), Kind: shared(owner.Kind), Name: owner.Name, UID: owner.UID,
			Controller: sharedBool(owner.Controller), BlockOwnerDeletion: sharedBool(owner.BlockOwnerDeletion),
		}
		if owner.Name == name {
			out[i].Name = name
		}
	}
	return out
}

// shared returns s as the one copy that every cached object holding that string shares,
// for the first maxShared strings shared; later ones keep their own copy. Only
// strings that many objects repeat (namespaces, label keys, kinds, images, condition
// reasons) are shared. Go's unique package would let a string go at the next garbage
// collection once no Handle holds it, and the caches keep strings, not Handles.
func shared(s string) string {
	if len(s) > maxSharedLen {
		return s
	}
	sharedStrings.RLock()
	c, ok := sharedStrings.m[s]
	sharedStrings.RUnlock()
	if ok {
		return c
	}
	sharedStrings.Lock()
	defer sharedStrings.Unlock()
	if c, ok := sharedStrings.m[s]; ok {
		return c
	}
	if len(sharedStrings.m) >= maxShared {
		return s
	}
	sharedStrings.m[s] = s
	return s
}

// maxShared bounds the strings shared, in case a field thought to repeat does not,
// and maxSharedLen their length, so that the table holds at most 4096 x 256 bytes
// whatever a tenant writes (a container image can be as long as the object).
const (
	maxShared    = 4096
	maxSharedLen = 256
)

var sharedStrings = struct {
	sync.RWMutex
	m map[string]string
}{m: map[string]string{}}

// yes and no are what every cached *bool that is set points to: like everything a
// cached object holds, never to be written through.
var yes, no = true, false

func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &yes
	default:
		return &no
	}
}

// GetObjectKind is runtime.Object's: a cached Deployment carries no kind.
func (c *Deployment) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is runtime.Object's, for client-go's cache mutation detector.
func (c *Deployment) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.LabelPairs = slices.Clone(c.LabelPairs)
	if c.Replicas != nil {
		replicas := *c.Replicas
		out.Replicas = &replicas
	}
	out.Selector = c.Selector.DeepCopy()
	out.TemplateLabels = maps.Clone(c.TemplateLabels)
	out.Containers = slices.Clone(c.Containers)
	c.Status.DeepCopyInto(&out.Status)
	return &out
}

// TrimFoo is the Foo informer's transform: it keeps of each Foo only what the
// controller reads (name, namespace, UID, resourceVersion, generation,
// deletionTimestamp, spec and status), so that a Foo costs the cache the same whatever
// a tenant puts in its labels, annotations, finalizers or owner references (the status
// update the controller sends without them leaves the stored ones as they are). The
// strings that every Foo repeats (its kind, namespace, and its conditions' types,
// statuses and reasons) are shared. Anything else (a tombstone) it leaves as it is.
func TrimFoo(obj any) (any, error) {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		return obj, nil
	}
	trimmed := &samplev1alpha1.Foo{
		TypeMeta: metav1.TypeMeta{APIVersion: shared(foo.APIVersion), Kind: shared(foo.Kind)},
		ObjectMeta: metav1.ObjectMeta{
			Name:              foo.Name,
			Namespace:         shared(foo.Namespace),
			UID:               foo.UID,
			ResourceVersion:   foo.ResourceVersion,
			Generation:        foo.Generation,
			DeletionTimestamp: foo.DeletionTimestamp,
		},
		Spec:   foo.Spec,
		Status: foo.Status,
	}
	if trimmed.Spec.DeploymentName == trimmed.Name {
		trimmed.Spec.DeploymentName = trimmed.Name
	}
	for i := range trimmed.Status.Conditions {
		c := &trimmed.Status.Conditions[i]
		c.Type, c.Status, c.Reason = shared(c.Type), metav1.ConditionStatus(shared(string(c.Status))), shared(c.Reason)
	}
	return trimmed, nil
}
