package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
)

// watcher watches the Foos and Deployments of the bench namespace and hands every
// change, with the time it arrived, to the current handlers. It only watches, so the
// bench adds no requests while a controller is measured.
type watcher struct {
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu           sync.Mutex
	onDeployment func(d *appsv1.Deployment, at time.Time)
	onFoo        func(f *samplev1alpha1.Foo, at time.Time)

	fooStore cache.Store
}

func startWatcher(ctx context.Context, kube kubernetes.Interface, sample clientset.Interface) (*watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel}

	// Deployments keep their spec and owner references; their managedFields are of no
	// use here. Foos keep theirs: they tell whether a status was written.
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithNamespace(benchNamespace),
		kubeinformers.WithTransform(func(obj any) (any, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}))
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sample, 0, sampleinformers.WithNamespace(benchNamespace))

	deployments := kubeFactory.Apps().V1().Deployments().Informer()
	foos := sampleFactory.Samplecontroller().V1alpha1().Foos().Informer()
	w.fooStore = foos.GetStore()
	_, err := deployments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.deployment(obj) },
		UpdateFunc: func(_, obj any) { w.deployment(obj) },
	})
	if err != nil {
		cancel()
		return nil, err
	}
	_, err = foos.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.foo(obj) },
		UpdateFunc: func(_, obj any) { w.foo(obj) },
	})
	if err != nil {
		cancel()
		return nil, err
	}

	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	w.done.Go(func() {
		<-ctx.Done()
		kubeFactory.Shutdown()
		sampleFactory.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), deployments.HasSynced, foos.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("watching the bench namespace: caches did not sync: %w", context.Cause(ctx))
	}
	return w, nil
}

// setHandlers replaces the handlers; nil ignores that kind.
func (w *watcher) setHandlers(onDeployment func(*appsv1.Deployment, time.Time), onFoo func(*samplev1alpha1.Foo, time.Time)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onDeployment, w.onFoo = onDeployment, onFoo
}

func (w *watcher) deployment(obj any) {
	at := time.Now()
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return
	}
	w.mu.Lock()
	h := w.onDeployment
	w.mu.Unlock()
	if h != nil {
		h(d, at)
	}
}

func (w *watcher) foo(obj any) {
	at := time.Now()
	f, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		return
	}
	w.mu.Lock()
	h := w.onFoo
	w.mu.Unlock()
	if h != nil {
		h(f, at)
	}
}

// waitForFoos waits until the watch has seen n Foos, so that none of the creations
// are still in flight when a measurement starts.
func (w *watcher) waitForFoos(ctx context.Context, n int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(w.fooStore.ListKeys()) < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func (w *watcher) stop() {
	w.cancel()
	w.done.Wait()
}
