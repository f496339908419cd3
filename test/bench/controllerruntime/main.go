// Command controllerruntime is the bench's controller-runtime peer: the Foo job as a
// kubebuilder user writes it, with the manager at its defaults, CreateOrUpdate of the
// Deployment, the status written when it changed, and no Events (../README.md). Its
// flags tune it as controller-runtime's documentation shows a user who cares: more
// workers, a cache of only its own Deployments, no managedFields in the cache. A
// module of its own, so that controller-runtime stays out of the other go.mod files.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// managedLabel is put on the peer's Deployments with --own-deployments-only, whose
// cache selects them by it.
const managedLabel = "app.kubernetes.io/managed-by"

// managedBy is managedLabel's value on the peer's Deployments.
const managedBy = "foo-controller-runtime"

func main() {
	var metricsAddr, probeAddr string
	var syncPeriod time.Duration
	var workers int
	var ownOnly, stripManagedFields bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "address of the metrics endpoint; 0 turns it off")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the probe endpoints; 0 turns them off")
	// Not in kubebuilder's scaffold: the bench gives every side the same resync.
	flag.DurationVar(&syncPeriod, "sync-period", 10*time.Hour, "how often the cache replays its objects (controller-runtime's default)")
	flag.IntVar(&workers, "max-concurrent-reconciles", 1, "reconciles run at once (controller-runtime's default)")
	flag.BoolVar(&ownOnly, "own-deployments-only", false, "label the Deployments it makes "+managedLabel+"="+managedBy+" and cache only those (cache.Options.ByObject)")
	flag.BoolVar(&stripManagedFields, "strip-managed-fields", false, "drop managedFields from every cached object (cache.TransformStripManagedFields)")
	flag.Parse() // with controller-runtime's --kubeconfig
	ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	log := ctrl.Log.WithName("setup")
	must := func(err error, what string) {
		if err != nil {
			log.Error(err, what)
			os.Exit(1)
		}
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(samplev1alpha1.AddToScheme(scheme))

	cacheOptions := cache.Options{SyncPeriod: &syncPeriod}
	if ownOnly {
		cacheOptions.ByObject = map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: {Label: labels.SelectorFromSet(labels.Set{managedLabel: managedBy})},
		}
	}
	if stripManagedFields {
		cacheOptions.DefaultTransform = cache.TransformStripManagedFields()
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOptions,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	})
	must(err, "unable to create the manager")
	// Foos and the Deployments they own, as kubebuilder's SetupWithManager watches them.
	must(ctrl.NewControllerManagedBy(mgr).For(&samplev1alpha1.Foo{}).Owns(&appsv1.Deployment{}).Named("foo").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&FooReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), label: ownOnly}), "unable to create the controller")
	log.Info("starting the manager")
	must(mgr.Start(ctrl.SetupSignalHandler()), "the manager failed")
}

// FooReconciler makes each Foo's Deployment and reports it in the Foo's status.
type FooReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	label  bool // put managedLabel on the Deployments
}

// Reconcile creates or updates the Foo's Deployment, then writes its status if changed.
func (r *FooReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var foo samplev1alpha1.Foo
	if err := r.Get(ctx, req.NamespacedName, &foo); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: foo.Spec.DeploymentName, Namespace: foo.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, deployment, func() error {
		// The template is set once: the API server fills in defaults, so setting it
		// again would differ from what was read and update the Deployment every time.
		if deployment.CreationTimestamp.IsZero() {
			labels := map[string]string{"app": "nginx", "controller": foo.Name}
			deployment.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
			deployment.Spec.Template.Labels = labels
			deployment.Spec.Template.Spec.Containers = []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}
		}
		deployment.Spec.Replicas = foo.Spec.Replicas
		if r.label {
			metav1.SetMetaDataLabel(&deployment.ObjectMeta, managedLabel, managedBy)
		}
		return controllerutil.SetControllerReference(&foo, deployment, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, err
	}

	status, d := *foo.Status.DeepCopy(), deployment.Status
	status.ObservedGeneration, status.Replicas, status.ReadyReplicas, status.AvailableReplicas = foo.Generation, d.Replicas, d.ReadyReplicas, d.AvailableReplicas
	status.Selector = metav1.FormatLabelSelector(deployment.Spec.Selector)
	meta.SetStatusCondition(&status.Conditions, readyCondition(&foo, deployment))
	if equality.Semantic.DeepEqual(status, foo.Status) {
		return ctrl.Result{}, nil
	}
	foo.Status = status
	return ctrl.Result{}, r.Status().Update(ctx, &foo)
}

// readyCondition is True once the Deployment has rolled out every replica available.
func readyCondition(foo *samplev1alpha1.Foo, d *appsv1.Deployment) metav1.Condition {
	ready := metav1.Condition{Type: samplev1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: samplev1alpha1.ReasonDeploymentProgressing, ObservedGeneration: foo.Generation}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	rolledOut := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want
	if rolledOut && d.Status.AvailableReplicas == want {
		ready.Status, ready.Reason = metav1.ConditionTrue, samplev1alpha1.ReasonDeploymentAvailable
	}
	ready.Message = fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
	return ready
}
