package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
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
	if scope != nil && scope.keep != nil {
		// Registered before anyone asks for the Foo informer, so that it is the one.
		sampleFactory.InformerFor(&samplev1alpha1.Foo{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
			return newScopedFooInformer(client, namespace, resync, scope)
		})
	}
	return kubeFactory, sampleFactory
}

// informerScope narrows the informers to one slot in sharded mode: Deployments by a
// label selector, Foos by a shard selector, and by keep on this side as well.
type informerScope struct {
	deploymentLabels string
	shardSelector    string
	// keep tells whether a Foo is in the scope. An apiserver without
	// ShardedListAndWatch ignores the shard selector and sends every Foo; the Foos
	// keep refuses are dropped before they reach the cache.
	keep func(*samplev1alpha1.Foo) bool
}

// newScopedFooInformer is the Foo informer of the generated factory, with the shard
// selector, whose lists and watches drop the Foos scope.keep refuses.
func newScopedFooInformer(client clientset.Interface, namespace string, resync time.Duration, scope *informerScope) cache.SharedIndexInformer {
	foos := client.SamplecontrollerV1alpha1().Foos(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.ShardSelector = scope.shardSelector
			list, err := foos.List(ctx, options)
			if err != nil {
				return nil, err
			}
			list.Items = slices.DeleteFunc(list.Items, func(foo samplev1alpha1.Foo) bool { return !scope.keep(&foo) })
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.ShardSelector = scope.shardSelector
			w, err := foos.Watch(ctx, options)
			if err != nil {
				return nil, err
			}
			return newFilteredWatch(w, func(e watch.Event) bool {
				foo, ok := e.Object.(*samplev1alpha1.Foo)
				// Bookmarks carry only a resourceVersion, and errors no Foo.
				return !ok || e.Type == watch.Bookmark || e.Type == watch.Error || scope.keep(foo)
			}), nil
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &samplev1alpha1.Foo{},
		cache.SharedIndexInformerOptions{
			ResyncPeriod: resync,
			Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		})
}

// dropManagedFields is an informer transform that clears metadata.managedFields.
// An update sent without managedFields leaves the stored ones unchanged.
func dropManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
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
