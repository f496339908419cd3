// The controller's informers: what it watches and how much of each object it keeps.
// Both caches are trimmed: the Foos of their managedFields (reconcile.CacheFoo), the
// Deployments to the fields the controller reads (reconcile.CachedDeployment). The Deployment cache holds only the
// Deployments the controller labelled, and in sharded mode both hold one slot's share,
// filtered by the API server.

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	kubeinternal "k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
	sampleinternal "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/internalinterfaces"
	fooinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/samplecontroller/v1alpha1"
)

// SlotLabel marks, in sharded mode, each Deployment with the slot of its Foo, so that
// the replica holding the slot can list and watch exactly its Deployments by label.
const SlotLabel = samplecontroller.GroupName + "/slot"

// scope is the Foos a controller acts on. The nil scope is every Foo the informer
// holds; in sharded mode it is one slot's, which the API server filters for by a shard
// selector on the Foos' UIDs and by SlotLabel on the Deployments.
type scope struct {
	space    slots.Space
	slot     int
	value    string // slot as the value of SlotLabel
	selector string // the shard selector of the slot
	// outside is set once the controller saw a Foo of another slot, so that it says
	// so once.
	outside atomic.Bool
}

// newSlotScope is the scope of one slot of space.
func newSlotScope(space slots.Space, slot int) (*scope, error) {
	selector, _, err := space.Selector([]int{slot})
	if err != nil {
		return nil, err
	}
	return &scope{space: space, slot: slot, value: strconv.Itoa(slot), selector: selector}, nil
}

// owns tells whether foo is in the scope. The API server sends a Foo of another slot
// only when it ignores the shard selector (ShardedListAndWatch off, or older than
// 1.36); the slot's informer then drops it before the cache, and says so once.
func (s *scope) owns(logger klog.Logger, foo *samplev1alpha1.Foo) bool {
	if s == nil || s.space.Of(foo.UID) == s.slot {
		return true
	}
	if !s.outside.Swap(true) {
		logger.Info("The API server sent Foos outside this slot: it ignores shard selectors (feature ShardedListAndWatch off, or older than 1.36); dropping them here instead, at the cost of receiving every Foo",
			"slot", s.slot, "example", klog.KObj(foo))
	}
	return false
}

// label marks d as the scope's, so that the scope's Deployment informer sees it, and
// tells whether that changed it.
func (s *scope) label(d *appsv1.Deployment) bool {
	if s == nil || d.Labels[SlotLabel] == s.value {
		return false
	}
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	d.Labels[SlotLabel] = s.value
	return true
}

// deploymentSelector selects the Deployments the controller of the scope manages.
func (s *scope) deploymentSelector() string {
	if s == nil {
		return reconcile.FooUIDLabel
	}
	return reconcile.FooUIDLabel + "," + SlotLabel + "=" + s.value
}

// informers are a controller's two informers, built from its Config.
type informers struct {
	kube   kubeinformers.SharedInformerFactory
	sample sampleinformers.SharedInformerFactory
	// deployments holds reconcile.CachedDeployments, which the typed lister of
	// Deployments cannot read: see Controller.cachedDeployment.
	deployments cache.SharedIndexInformer
	foos        fooinformers.FooInformer
	// release gives back the informers' metric names once they have shut down, for a
	// slot that comes back.
	release func()
}

// newInformers builds the informers of a controller over the scope s, watching one
// namespace, or all when namespace is empty.
//
// name, unless empty, names the informers in client-go's informer metrics
// (informer_queued_items, informer_store_resource_version: how far behind each cache
// is), as name-deployments and name-foos.
func newInformers(kubeClient kubernetes.Interface, sampleClient clientset.Interface, namespace string, resync time.Duration, s *scope, name string) *informers {
	kubeName, sampleName := reserveInformerName(name, "deployments"), reserveInformerName(name, "foos")
	// Each informer is built here, with the controller's one index, in place of the
	// generated factories' default, which adds a namespace index the controller never
	// reads: a set per namespace holding every key, kept up to date on every event.
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, resync,
		kubeinformers.WithTransform(reconcile.CacheDeployment))
	deployments := kubeFactory.InformerFor(&appsv1.Deployment{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return appsinformers.NewDeploymentInformerWithOptions(client, namespace, kubeinternal.InformerOptions{
			ResyncPeriod: resync,
			Indexers:     cache.Indexers{byControllerUID: indexByControllerUID},
			InformerName: kubeName,
			TweakListOptions: func(options *metav1.ListOptions) {
				options.LabelSelector = s.deploymentSelector()
			},
		})
	})
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sampleClient, resync,
		sampleinformers.WithTransform(reconcile.CacheFoo))
	// Registered before anyone asks for the Foo informer, so that it is the one.
	sampleFactory.InformerFor(&samplev1alpha1.Foo{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
		if s == nil {
			return fooinformers.NewFooInformerWithOptions(client, namespace, sampleinternal.InformerOptions{
				ResyncPeriod: resync,
				Indexers:     fooIndexers(),
				InformerName: sampleName,
			})
		}
		return newSlotFooInformer(client, namespace, resync, s, sampleName)
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

// newSlotFooInformer is the Foo informer of the generated factory with the slot's
// shard selector, whose lists and watches drop the Foos of other slots, which an API
// server that ignores the selector sends.
func newSlotFooInformer(client clientset.Interface, namespace string, resync time.Duration, s *scope, name *cache.InformerName) cache.SharedIndexInformer {
	foos := client.SamplecontrollerV1alpha1().Foos(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.ShardSelector = s.selector
			list, err := foos.List(ctx, options)
			if err != nil {
				return nil, err
			}
			list.Items = slices.DeleteFunc(list.Items, func(foo samplev1alpha1.Foo) bool { return !s.owns(klog.FromContext(ctx), &foo) })
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.ShardSelector = s.selector
			w, err := foos.Watch(ctx, options)
			if err != nil {
				return nil, err
			}
			logger := klog.FromContext(ctx)
			return newFilteredWatch(w, func(e watch.Event) bool {
				foo, ok := e.Object.(*samplev1alpha1.Foo)
				// Bookmarks carry only a resourceVersion, and errors no Foo.
				return !ok || e.Type == watch.Bookmark || e.Type == watch.Error || s.owns(logger, foo)
			}), nil
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &samplev1alpha1.Foo{},
		cache.SharedIndexInformerOptions{
			ResyncPeriod: resync,
			Indexers:     fooIndexers(),
			Identifier:   name.WithResource(samplev1alpha1.SchemeGroupVersion.WithResource("foos")),
		})
}

// filteredWatch passes on the events of a watch that keep accepts. Unlike
// apimachinery's watch.Filter, whose goroutine blocks for good on an event nobody reads
// once the reader has stopped, it ends when stopped.
type filteredWatch struct {
	upstream watch.Interface
	result   chan watch.Event
	done     chan struct{}
	stop     sync.Once
}

func newFilteredWatch(upstream watch.Interface, keep func(watch.Event) bool) watch.Interface {
	w := &filteredWatch{upstream: upstream, result: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(w.result)
		for e := range upstream.ResultChan() {
			if !keep(e) {
				continue
			}
			select {
			case w.result <- e:
			case <-w.done:
				return
			}
		}
	}()
	return w
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *filteredWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.upstream.Stop()
	})
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

// fooIndexers are the Foo informer's indexes, a map of its own for each informer.
func fooIndexers() cache.Indexers {
	return cache.Indexers{byDeploymentName: indexByDeploymentName}
}

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
// it, with only the fields reconcile.CachedDeployment keeps, or a NotFound error. Like
// a lister's, what it returns shares the cache's maps and must not be written to.
func (c *Controller) cachedDeployment(namespace, name string) (*appsv1.Deployment, error) {
	obj, exists, err := c.deploymentsIndexer.GetByKey(cache.NewObjectName(namespace, name).String())
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(appsv1.Resource("deployment"), name)
	}
	cached, ok := obj.(*reconcile.CachedDeployment)
	if !ok {
		return nil, fmt.Errorf("the Deployment cache holds a %T for %s/%s", obj, namespace, name)
	}
	return cached.Deployment(), nil
}

// indexByDeploymentName is the index function of byDeploymentName.
func indexByDeploymentName(obj any) ([]string, error) {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		return nil, nil
	}
	return []string{foo.Namespace + "/" + foo.Spec.DeploymentName}, nil
}
