// Package namewatch wakes the Foos that wait for a Deployment they do not control to go
// away, by watching that one Deployment by name until none waits for it.
//
// The controller's Deployment informer holds only the Deployments it labelled, and in
// sharded mode only those of its slots. A Foo whose Deployment name is taken by one
// outside that cache (made by hand, or the last Deployment of a Foo deleted and created
// again under its name, which another slot labelled) would learn that the name is free
// only from a periodic recheck. A watch of the one name, with a field selector, brings
// the deletion or the change of hands the moment it happens, whatever replica or slot
// holds the old Deployment.
package namewatch

import (
	"context"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watcher watches Deployments by name on behalf of waiters (Foos, by namespace and
// name), and wakes each waiter when the Deployment it saw under the name is deleted or
// replaced by another. It watches a limited number of names at once; Wait tells when a
// waiter must fall back on a recheck.
type Watcher struct {
	client kubernetes.Interface
	wake   func(waiter cache.ObjectName)
	limit  int

	mu        sync.Mutex
	ctx       context.Context
	watches   map[cache.ObjectName]*nameWatch // by Deployment
	waitingOn map[cache.ObjectName]cache.ObjectName
}

// nameWatch is the informer of one Deployment name and its waiters.
type nameWatch struct {
	stop     context.CancelFunc
	informer cache.SharedIndexInformer
	waiters  map[cache.ObjectName]types.UID // the UID each waiter saw under the name
}

// New returns a watcher of at most limit names, which calls wake for the waiters. Its
// watches end with ctx.
func New(ctx context.Context, client kubernetes.Interface, limit int, wake func(waiter cache.ObjectName)) *Watcher {
	return &Watcher{
		client: client, wake: wake, limit: limit, ctx: ctx,
		watches: map[cache.ObjectName]*nameWatch{}, waitingOn: map[cache.ObjectName]cache.ObjectName{},
	}
}

// Wait has waiter woken when the Deployment named target, which it saw with the UID
// seen, is deleted or replaced; a waiter waits for one name at a time. It returns false
// when the limit of names is watched already: the waiter must look again by itself.
func (w *Watcher) Wait(waiter, target cache.ObjectName, seen types.UID) bool {
	w.mu.Lock()
	if current, ok := w.waitingOn[waiter]; ok && current != target {
		w.doneLocked(waiter)
	}
	nw := w.watches[target]
	joined := nw != nil
	if !joined {
		if len(w.watches) >= w.limit || w.ctx.Err() != nil {
			w.mu.Unlock()
			return false
		}
		nw = w.start(target)
		w.watches[target] = nw
	}
	nw.waiters[waiter] = seen
	w.waitingOn[waiter] = target
	w.mu.Unlock()
	// A watch already running may have seen the change this waiter waits for before
	// it joined: what it holds now tells.
	if joined && nw.informer.HasSynced() {
		obj, exists, _ := nw.informer.GetStore().Get(&metav1.ObjectMeta{Namespace: target.Namespace, Name: target.Name})
		if !exists {
			obj = nil
		}
		w.changed(target, obj)
	}
	return true
}

// Done ends waiter's wait, if any: its Foo now controls its Deployment, asks for
// another name, or is gone.
func (w *Watcher) Done(waiter cache.ObjectName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.doneLocked(waiter)
}

func (w *Watcher) doneLocked(waiter cache.ObjectName) {
	target, ok := w.waitingOn[waiter]
	if !ok {
		return
	}
	delete(w.waitingOn, waiter)
	nw := w.watches[target]
	delete(nw.waiters, waiter)
	if len(nw.waiters) == 0 {
		nw.stop()
		delete(w.watches, target)
	}
}

// Watched is the number of names watched now.
func (w *Watcher) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// start runs the informer of target. w.mu is held.
func (w *Watcher) start(target cache.ObjectName) *nameWatch {
	ctx, stop := context.WithCancel(w.ctx)
	deployments := w.client.AppsV1().Deployments(target.Namespace)
	selector := fields.OneTermEqualSelector("metadata.name", target.Name).String()
	// With the client's watch-list semantics, as the generated informers build them.
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.FieldSelector = selector
			return deployments.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.FieldSelector = selector
			return deployments.Watch(ctx, options)
		},
	}, w.client), &appsv1.Deployment{}, 0, cache.Indexers{})
	nw := &nameWatch{stop: stop, informer: informer, waiters: map[cache.ObjectName]types.UID{}}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// The first list included: the name may have been freed or taken over
		// between the waiter's look and this watch's start.
		AddFunc:    func(obj any) { w.changed(target, obj) },
		UpdateFunc: func(_, obj any) { w.changed(target, obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if d, ok := obj.(*appsv1.Deployment); ok && d.Name == target.Name {
				w.changed(target, nil)
			}
		},
	})
	go informer.RunWithContext(ctx)
	go func() {
		// Nothing under the name when the first list came back: it was freed
		// before the watch began.
		if !cache.WaitFor(ctx, "", informer.HasSyncedChecker()) {
			return
		}
		if _, exists, _ := informer.GetStore().Get(&metav1.ObjectMeta{Namespace: target.Namespace, Name: target.Name}); !exists {
			w.changed(target, nil)
		}
	}()
	return nw
}

// changed wakes the waiters of target for whom obj (nil: no Deployment) is not the
// Deployment they saw. A change to the one they saw cannot free the name: the
// controller never adopts a Deployment, so only its deletion or replacement can.
func (w *Watcher) changed(target cache.ObjectName, obj any) {
	var uid types.UID
	if d, ok := obj.(*appsv1.Deployment); ok {
		if d.Name != target.Name {
			// A server (or a fake) that ignored the field selector.
			return
		}
		if d.DeletionTimestamp != nil {
			// On its way out: its deletion wakes the waiters.
			return
		}
		uid = d.UID
	}
	w.mu.Lock()
	var wake []cache.ObjectName
	if nw := w.watches[target]; nw != nil {
		for waiter, seen := range nw.waiters {
			if uid != seen {
				wake = append(wake, waiter)
			}
		}
	}
	w.mu.Unlock()
	for _, waiter := range wake {
		w.wake(waiter)
	}
}
