package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
)

// watcher watches the Foos, Deployments and Events of a namespace (or all) and hands
// every change, with the time it arrived, to the collector observing it. It only
// watches, so the bench adds no requests while a controller is measured.
type watcher struct {
	stop func()
	foos cache.Store

	mu           sync.Mutex
	onDeployment func(d *appsv1.Deployment, at time.Time)
	onFoo        func(f *samplev1alpha1.Foo, at time.Time)
	onEvent      func(e *eventsv1.Event, at time.Time)
}

func startWatcher(ctx context.Context, kube kubernetes.Interface, sample clientset.Interface, namespace string) (*watcher, error) {
	// Deployments lose their managedFields, of no use here; Foos keep theirs, which
	// tell whether a status was written.
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTransform(func(obj any) (any, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}))
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sample, 0, sampleinformers.WithNamespace(namespace))
	deployments := kubeFactory.Apps().V1().Deployments().Informer()
	foos := sampleFactory.Samplecontroller().V1alpha1().Foos().Informer()
	events := kubeFactory.Events().V1().Events().Informer()
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{foos: foos.GetStore(), stop: func() {
		cancel()
		kubeFactory.Shutdown()
		sampleFactory.Shutdown()
	}}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.deliver(obj, time.Now()) },
		UpdateFunc: func(_, obj any) { w.deliver(obj, time.Now()) },
	}
	for _, informer := range []cache.SharedIndexInformer{deployments, foos, events} {
		if _, err := informer.AddEventHandler(handler); err != nil {
			cancel()
			return nil, err
		}
	}
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), deployments.HasSynced, foos.HasSynced, events.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("watching the Foos, Deployments and Events: caches did not sync: %w", context.Cause(ctx))
	}
	return w, nil
}

// observe hands later changes to these functions; nil ignores that kind.
func (w *watcher) observe(onDeployment func(*appsv1.Deployment, time.Time), onFoo func(*samplev1alpha1.Foo, time.Time)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onDeployment, w.onFoo = onDeployment, onFoo
}

// observeEvents hands later Events to this function; nil ignores them.
func (w *watcher) observeEvents(onEvent func(*eventsv1.Event, time.Time)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onEvent = onEvent
}

func (w *watcher) deliver(obj any, at time.Time) {
	w.mu.Lock()
	onDeployment, onFoo, onEvent := w.onDeployment, w.onFoo, w.onEvent
	w.mu.Unlock()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if onDeployment != nil {
			onDeployment(o, at)
		}
	case *samplev1alpha1.Foo:
		if onFoo != nil {
			onFoo(o, at)
		}
	case *eventsv1.Event:
		if onEvent != nil {
			onEvent(o, at)
		}
	}
}

func (w *watcher) fooCount() int { return len(w.foos.ListKeys()) }
