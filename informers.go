package main

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
	"github.com/seed-e6610ed6/sample-controller/pkg/reconcile"
)

// newInformerFactories builds the informer factories the controller reads from,
// watching one namespace, or all when namespace is empty.
//
// The Deployment informer lists and watches only Deployments that carry the
// controller's label, so its memory does not grow with the other Deployments in the
// cluster. Both drop managedFields from cached objects: the controller never reads
// them, and they are often the largest part of an object.
func newInformerFactories(kubeClient kubernetes.Interface, sampleClient clientset.Interface, namespace string, resync time.Duration, scope *informerScope) (kubeinformers.SharedInformerFactory, sampleinformers.SharedInformerFactory) {
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, resync,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTweakListOptions(func(options *metav1.ListOptions) {
			options.LabelSelector = reconcile.FooUIDLabel
			if scope != nil {
				options.LabelSelector += "," + scope.deploymentLabels
			}
		}),
		kubeinformers.WithTransform(dropManagedFields),
	)
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sampleClient, resync,
		sampleinformers.WithNamespace(namespace),
		sampleinformers.WithTweakListOptions(func(options *metav1.ListOptions) {
			if scope != nil {
				options.ShardSelector = scope.shardSelector
			}
		}),
		sampleinformers.WithTransform(dropManagedFields),
	)
	return kubeFactory, sampleFactory
}

// informerScope narrows the informers to one slot in sharded mode: Deployments by a
// label selector, Foos by a shard selector.
type informerScope struct {
	deploymentLabels string
	shardSelector    string
}

// dropManagedFields is an informer transform that clears metadata.managedFields.
// An update sent without managedFields leaves the stored ones unchanged.
func dropManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
