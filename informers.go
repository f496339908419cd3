// The controller's informers: what it watches and how much of each object it keeps.
// Both caches are trimmed: the Foos of their managedFields (cached.TrimFoo), the
// Deployments to the fields the controller reads (cached.Deployment). The
// Deployment cache holds only the Deployments the controller labelled; a Config can
// narrow both further (DeploymentLabels, FooListWatch).

package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	kubeinternal "k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/seed-e6610ed6/sample-controller/internal/cached"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
	sampleinternal "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/internalinterfaces"
	fooinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/samplecontroller/v1alpha1"
)

// deploymentSelector selects the Deployments a controller manages: those it labelled
// with their Foo's UID, and with extra, the labels its Config adds.
func deploymentSelector(extra map[string]string) string {
	if len(extra) == 0 {
		return reconcile.FooUIDLabel
	}
	return reconcile.FooUIDLabel + "," + labels.SelectorFromSet(extra).String()
}

// setLabels sets extra on d, and tells whether that changed it.
func setLabels(d *appsv1.Deployment, extra map[string]string) bool {
	changed := false
	for k, v := range extra {
		if old, ok := d.Labels[k]; ok && old == v {
			continue
		}
		if d.Labels == nil {
			d.Labels = map[string]string{}
		}
		d.Labels[k], changed = v, true
	}
	return changed
}

// informers are a controller's two informers, built from its Config.
type informers struct {
	kube   kubeinformers.SharedInformerFactory
	sample sampleinformers.SharedInformerFactory
	// deployments holds cached.Deployments, which the typed lister of
	// Deployments cannot read: see Controller.cachedDeployment.
	deployments cache.SharedIndexInformer
	foos        fooinformers.FooInformer
	// release gives back the informers' metric names once they have shut down, for
	// informers of the same name built later.
	release func()
}

// newInformers builds the informers of a controller of cfg, watching cfg.Namespace, or
// every namespace when it is empty.
//
// cfg.InformerName, unless empty, names the informers in client-go's informer metrics
// (informer_queued_items, informer_store_resource_version: how far behind each cache
// is), as name-deployments and name-foos.
func newInformers(cfg Config) *informers {
	kubeClient, sampleClient, namespace := cfg.KubeClient, cfg.SampleClient, cfg.Namespace
	kubeName, sampleName := reserveInformerName(cfg.InformerName, "deployments"), reserveInformerName(cfg.InformerName, "foos")
	// Each informer is built here, with the controller's one index, in place of the
	// generated factories' default, which adds a namespace index the controller never
	// reads: a set per namespace holding every key, kept up to date on every event.
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, cfg.ResyncPeriod,
		kubeinformers.WithTransform(cached.TrimDeployment))
	deployments := kubeFactory.InformerFor(&appsv1.Deployment{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return appsinformers.NewDeploymentInformerWithOptions(client, namespace, kubeinternal.InformerOptions{
			ResyncPeriod: resync,
			Indexers:     cache.Indexers{byControllerUID: indexByControllerUID},
			InformerName: kubeName,
			TweakListOptions: func(options *metav1.ListOptions) {
				options.LabelSelector = deploymentSelector(cfg.DeploymentLabels)
			},
		})
	})
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sampleClient, cfg.ResyncPeriod,
		sampleinformers.WithTransform(cached.TrimFoo))
	// Registered before anyone asks for the Foo informer, so that it is the one.
	sampleFactory.InformerFor(&samplev1alpha1.Foo{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
		indexers := cache.Indexers{byDeploymentName: indexByDeploymentName}
		if cfg.FooListWatch == nil {
			return fooinformers.NewFooInformerWithOptions(client, namespace, sampleinternal.InformerOptions{
				ResyncPeriod: resync,
				Indexers:     indexers,
				InformerName: sampleName,
			})
		}
		return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(cfg.FooListWatch, client), &samplev1alpha1.Foo{},
			cache.SharedIndexInformerOptions{
				ResyncPeriod: resync,
				Indexers:     indexers,
				Identifier:   sampleName.WithResource(samplev1alpha1.SchemeGroupVersion.WithResource("foos")),
			})
	})
	return &informers{
		kube:        kubeFactory,
		sample:      sampleFactory,
		deployments: deployments,
		foos:        sampleFactory.Samplecontroller().V1alpha1().Foos(),
		release: func() {
			kubeName.Release()
			sampleName.Release()
		},
	}
}

// start starts the informers, until ctx ends.
func (i *informers) start(ctx context.Context) {
	i.kube.Start(ctx.Done())
	i.sample.Start(ctx.Done())
}

// shutdown waits for the informers' goroutines, once their context has ended, and
// releases their metric names.
func (i *informers) shutdown() {
	i.sample.Shutdown()
	i.kube.Shutdown()
	i.release()
}

// reserveInformerName reserves name-resource for an informer factory's metrics, or
// returns nil, which names nothing: for an empty name, or one already taken (a second
// factory of the same name in one process, which only tests build).
func reserveInformerName(name, resource string) *cache.InformerName {
	if name == "" {
		return nil
	}
	reserved, err := cache.NewInformerName(name + "-" + resource)
	if err != nil {
		return nil
	}
	return reserved
}

// Indexes the controller adds to its informers.
const (
	// byControllerUID indexes the cached Deployments by the UID of the Foo that
	// controls them, so a sync finds a Foo's Deployments without scanning its
	// namespace.
	byControllerUID = "byControllerUID"
	// byDeploymentName indexes the cached Foos by the namespace and name of the
	// Deployment they ask for, so that a Deployment that goes away or changes hands
	// wakes every Foo waiting for its name.
	byDeploymentName = "byDeploymentName"
)

// indexByControllerUID is the index function of byControllerUID.
func indexByControllerUID(obj any) ([]string, error) {
	d, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOf(d); isFooRef(ref) {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// cachedDeployment returns the Deployment named name in namespace as the cache keeps
// it, with only the fields cached.Deployment keeps, or a NotFound error. Like
// a lister's, what it returns shares the cache's maps and must not be written to.
func (c *Controller) cachedDeployment(namespace, name string) (*appsv1.Deployment, error) {
	obj, exists, err := c.deploymentsIndexer.GetByKey(cache.NewObjectName(namespace, name).String())
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(appsv1.Resource("deployment"), name)
	}
	kept, ok := obj.(*cached.Deployment)
	if !ok {
		return nil, fmt.Errorf("the Deployment cache holds a %T for %s/%s", obj, namespace, name)
	}
	return kept.Full(), nil
}

// indexByDeploymentName is the index function of byDeploymentName.
func indexByDeploymentName(obj any) ([]string, error) {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		return nil, nil
	}
	return []string{foo.Namespace + "/" + foo.Spec.DeploymentName}, nil
}
