// Command floor is the bench's floor: the least a client-go controller of Foos must do,
// run and measured as ours is. Informers of the Foos and of the labelled Deployments,
// built and trimmed as ours' (protobuf, cached.TrimDeployment, cached.TrimFoo); a work
// queue; and per Foo the writes ours makes: the Deployment (created, or patched to a new
// spec), the DeploymentCreated Event through client-go's events broadcaster, and the
// status with its record. Nothing else: no expectations, no leader election, no
// metrics or probes, no retries but the queue's. ../README.md says how it is compared.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/cached"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	samplescheme "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/scheme"
	fooinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/samplecontroller/v1alpha1"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	namespace := flag.String("namespace", "", "the namespace of the Foos; all when empty")
	workers := flag.Int("workers", 32, "Foos synced at once, as ours' --workers")
	resync := flag.Duration("resync-period", 30*time.Second, "how often the informers replay their caches")
	flag.Parse()
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(50) // as ours
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace, *workers, *resync); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
}

// floor is the controller: its clients, caches, queue and Events.
type floor struct {
	kube        kubernetes.Interface
	sample      clientset.Interface
	deployments cache.Indexer // of *cached.Deployment
	foos        cache.Indexer
	queue       workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder    events.EventRecorder
}

func run(ctx context.Context, kubeconfig, namespace string, workers int, resync time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// As ours: no client-side rate limit, Foos as JSON, built-in types as protobuf.
	cfg.QPS, cfg.UserAgent = -1, "sample-controller-floor"
	sample, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	eventScheme := runtime.NewScheme()
	if err := scheme.AddToScheme(eventScheme); err != nil {
		return err
	}
	if err := samplescheme.AddToScheme(eventScheme); err != nil {
		return err
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()

	f := &floor{kube: kube, sample: sample,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]()),
		recorder: broadcaster.NewRecorder(eventScheme, "sample-controller-floor")}
	deployments := appsinformers.NewFilteredDeploymentInformer(kube, namespace, resync, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = reconcile.FooUIDLabel })
	foos := fooinformers.NewFooInformer(sample, namespace, resync, cache.Indexers{})
	if err := deployments.SetTransform(cached.TrimDeployment); err != nil {
		return err
	}
	if err := foos.SetTransform(cached.TrimFoo); err != nil {
		return err
	}
	f.deployments, f.foos = deployments.GetIndexer(), foos.GetIndexer()
	if _, err := foos.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: f.enqueue,
		UpdateFunc: func(old, new any) {
			if old.(metav1.Object).GetResourceVersion() != new.(metav1.Object).GetResourceVersion() {
				f.enqueue(new)
			}
		},
	}); err != nil {
		return err
	}
	if _, err := deployments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: f.enqueueOwner,
		UpdateFunc: func(old, new any) {
			if old.(metav1.Object).GetResourceVersion() != new.(metav1.Object).GetResourceVersion() {
				f.enqueueOwner(new)
			}
		},
		DeleteFunc: f.enqueueOwner,
	}); err != nil {
		return err
	}
	go deployments.RunWithContext(ctx)
	go foos.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), deployments.HasSynced, foos.HasSynced) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for f.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	f.queue.ShutDown()
	wg.Wait()
	return nil
}

func (f *floor) enqueue(obj any) {
	if key, err := cache.ObjectToName(obj); err == nil {
		f.queue.Add(key)
	}
}

// enqueueOwner queues the Foo that controls a Deployment.
func (f *floor) enqueueOwner(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil && ref.Kind == "Foo" {
		f.queue.Add(cache.ObjectName{Namespace: m.GetNamespace(), Name: ref.Name})
	}
}

func (f *floor) next(ctx context.Context) bool {
	key, shutdown := f.queue.Get()
	if shutdown {
		return false
	}
	defer f.queue.Done(key)
	if err := f.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Sync failed", "foo", key)
		f.queue.AddRateLimited(key)
		return true
	}
	f.queue.Forget(key)
	return true
}

// sync makes the Foo's Deployment as its spec says, then writes its status if it changed.
func (f *floor) sync(ctx context.Context, key cache.ObjectName) error {
	obj, exists, err := f.foos.GetByKey(key.String())
	if err != nil || !exists {
		return err
	}
	foo := obj.(*samplev1alpha1.Foo)
	deployments := f.kube.AppsV1().Deployments(foo.Namespace)
	var d *appsv1.Deployment
	if obj, exists, err := f.deployments.GetByKey(foo.Namespace + "/" + foo.Spec.DeploymentName); err != nil {
		return err
	} else if exists {
		d = obj.(*cached.Deployment).Full()
	}
	switch {
	case d == nil:
		created, err := deployments.Create(ctx, reconcile.NewDeployment(foo), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // in the cache soon, with its event
		}
		if err != nil {
			return err
		}
		d = created
		f.recorder.Eventf(foo, d, corev1.EventTypeNormal, reconcile.EventDeploymentCreated, "Create", "Created Deployment %q", d.Name)
	case metav1.IsControlledBy(d, foo):
		if updated, changed := reconcile.UpdateDeployment(foo, d); changed {
			patch, err := reconcile.DeploymentPatch(d, updated)
			if err != nil {
				return err
			}
			if d, err = deployments.Patch(ctx, d.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
	default:
		return nil // not its own: ours reports it; the bench never makes one
	}
	status := reconcile.CalculateStatus(foo, d, nil, metav1.Now())
	status.Deployments = []samplev1alpha1.CreatedDeployment{{Name: d.Name, UID: d.UID}}
	if equality.Semantic.DeepEqual(foo.Status, status) {
		return nil
	}
	updated := foo.DeepCopy()
	updated.Status = status
	_, err = f.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // the Foo's event brings it back
	}
	return err
}
