package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	kubeinternal "k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
	sampleinternal "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/internalinterfaces"
	fooinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// driver makes the writes a session's cases wait for: a controller, or a limit.
type driver interface {
	column() string
	rule() statusRule // when a Foo's status counts as done
	events() bool     // a cold start waits for each Foo's DeploymentCreated Event too
	start(ctx context.Context, s *session) error
}

const (
	// kubeconfigPlaceholder in --controller-args stands for the admin kubeconfig.
	kubeconfigPlaceholder = "{kubeconfig}"
	ourName               = "ours"
)

// controller is a controller binary and how to run it.
type controller struct {
	Name   string     `json:"name"`
	Binary string     `json:"binary"`
	Args   []string   `json:"args"` // may hold kubeconfigPlaceholder
	Rule   statusRule `json:"statusRule"`
	Ours   bool       `json:"-"` // serves metrics and probes, records DeploymentCreated
	Peer   bool       `json:"-"` // one of --peers: the table gives ours ÷ it
	// MaxFoos, when above 0, is the most Foos the side runs at: more would take it past
	// any cold-start timeout.
	MaxFoos int `json:"maxFoos,omitempty"`
	// Replicas, when above 1, run ours in sharded mode with ShardSlots slots, as
	// artifacts/deploy/components/sharded runs it (--shard-replicas).
	Replicas   int `json:"replicas,omitempty"`
	ShardSlots int `json:"shardSlots,omitempty"`
}

// shardLeaseNamespace holds the sharded replicas' Leases, as artifacts/deploy's
// namespace does.
const shardLeaseNamespace = "sample-controller-system"

// shardLeaseArgs are the sharded component's Lease timings.
var shardLeaseArgs = []string{
	"--leader-elect-resource-namespace=" + shardLeaseNamespace,
	"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s",
}

func (c controller) column() string   { return c.Name }
func (c controller) rule() statusRule { return c.Rule }
func (c controller) events() bool     { return c.Ours }

// command returns the arguments for a cluster whose admin kubeconfig is kubeconfig.
func (c controller) command(kubeconfig string) []string {
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = strings.ReplaceAll(a, kubeconfigPlaceholder, kubeconfig)
	}
	return out
}

// start starts the controller's processes (one, or Replicas sharded ones), whose exit
// ends the session's cases unless the bench stopped them (stopController). A restart's
// processes log to files of their own.
func (c controller) start(ctx context.Context, s *session) error {
	kubeconfig := s.cluster.KubeconfigPath()
	args := c.command(kubeconfig)
	if c.Replicas > 1 {
		_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardLeaseNamespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the Leases' namespace: %w", err)
		}
		args = append(slices.Clone(args), shardLeaseArgs...)
		args = append(args, fmt.Sprintf("--shard-slots=%d", c.ShardSlots))
	}
	s.procs, s.ctrls = nil, nil
	for i := range max(1, c.Replicas) {
		name := s.name + "-controller"
		if c.Replicas > 1 {
			name += fmt.Sprintf("-%d", i)
		}
		if s.restarts > 0 {
			name += fmt.Sprintf("-restart-%d", s.restarts)
		}
		var proc *localcluster.Process
		if c.Ours {
			ctrl, err := localcluster.StartController(ctx, localcluster.ControllerOptions{Bin: c.Binary, Kubeconfig: kubeconfig, LogDir: s.cfg.outDir, Name: name, Args: args})
			if err != nil {
				return err
			}
			s.ctrls = append(s.ctrls, ctrl)
			proc = ctrl.Process
		} else { // a controller that ignores flags may still read $KUBECONFIG
			var err error
			if proc, err = localcluster.StartProcess(localcluster.ProcessOptions{Name: name, Bin: c.Binary, Args: args, Env: []string{"KUBECONFIG=" + kubeconfig}, LogDir: s.cfg.outDir}); err != nil {
				return err
			}
		}
		s.procs = append(s.procs, proc)
		go func() {
			<-proc.Exited()
			if !s.stopped(proc) {
				s.fail(proc.ExitError())
			}
		}()
	}
	return nil
}

// resync is the informers' resync period on every side that has informers: ours (by
// its flag) and the watching limit. The steady-state window covers one.
const resync = 30 * time.Second

// ourController builds our controller (unless --our-binary names a build) and says
// how to run it: with a resync that the steady-state window covers, and
// --controller-args unless they are another controller's.
func ourController(ctx context.Context, cfg config, root string) (controller, error) {
	binary := cfg.ourBinary
	if binary == "" {
		binary = filepath.Join(cfg.outDir, "sample-controller")
		progressf("building the controller into %s", binary)
		if err := localcluster.BuildController(ctx, root, binary); err != nil {
			return controller{}, err
		}
	}
	c := asOurs(ourName, binary, cfg)
	if cfg.shardReplicas > 1 {
		c.Name = fmt.Sprintf("%s, %d sharded replicas", ourName, cfg.shardReplicas)
		c.Replicas, c.ShardSlots = cfg.shardReplicas, cfg.shardSlots
	}
	return c, nil
}

// asOurs runs binary, a build of ours, as ours runs: with the bench's resync, and
// --controller-args unless they are another controller's.
func asOurs(name, binary string, cfg config) controller {
	args := []string{"--resync-period=" + resync.String()}
	if cfg.controllerBinary == "" || cfg.controllerOurs {
		args = append(args, strings.Fields(cfg.controllerArgs)...)
	}
	return controller{Name: name, Binary: binary, Args: args, Rule: ruleReady, Ours: true}
}

// foreignController is --controller-binary, with --controller-args as its whole
// command line, and a Foo counts as done once it wrote the status at all; or, with
// --controller-ours, another build of ours, run as ours.
func foreignController(cfg config) controller {
	if cfg.controllerOurs {
		return asOurs(cfg.controllerName, cfg.controllerBinary, cfg)
	}
	args := strings.Fields(cfg.controllerArgs)
	if len(args) == 0 {
		args = []string{"-kubeconfig=" + kubeconfigPlaceholder}
	}
	return controller{Name: cfg.controllerName, Binary: cfg.controllerBinary, Args: args, Rule: ruleWritten}
}

// peerNames are the controllers a user would pick instead of ours, as --peers and
// hack/build-peers.sh name them.
var peerNames = []string{"classic", "controller-runtime"}

// peer says how to run the peer name, built into binDir: at its defaults, with the
// bench's resync where it takes one (the classic one's is 30 s already).
func peer(name, binDir string) controller {
	c := controller{Name: name, Binary: filepath.Join(binDir, "peer-"+name), Peer: true}
	switch name {
	case "classic":
		c.Args = []string{"-kubeconfig=" + kubeconfigPlaceholder}
		// Its status has no conditions: a Foo is done once it was written at all.
		c.Rule = ruleWritten
		// At client-go's default 5 requests a second (two writes and an Event per
		// Foo), 10000 Foos take over an hour.
		c.MaxFoos = 1000
	case "controller-runtime":
		c.Args = []string{"--kubeconfig=" + kubeconfigPlaceholder, "--health-probe-bind-address=0", "--sync-period=" + resync.String()}
		c.Rule = ruleReady
	}
	return c
}

// buildPeers builds the peers named with hack/build-peers.sh, which skips nothing but
// is quick once Go's caches hold them, and says how to run them.
func buildPeers(ctx context.Context, root string, names []string) ([]driver, error) {
	if len(names) == 0 {
		return nil, nil
	}
	progressf("building the peers %s", strings.Join(names, ", "))
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-peers.sh"), names...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("hack/build-peers.sh: %w\n%s", err, out)
	}
	var out []driver
	for _, name := range names {
		out = append(out, peer(name, filepath.Join(root, "_output", "bin")))
	}
	return out, nil
}

// limit is the bench making our controller's writes itself, with no process, queue
// or cache in between: per Foo a Deployment, its DeploymentCreated Event and a status,
// with --workers requests in flight and no rate limit.
type limit struct {
	// Watching first fills informers built as our controller's and keeps them: what a
	// controller's list and watches cost. In the reaction case it learns of a change
	// from its Foo informer, where the plain limit takes the patch's response.
	Watching bool `json:"watching,omitempty"`
}

func (l limit) column() string {
	if l.Watching {
		return "limit watching"
	}
	return "limit"
}

func (limit) rule() statusRule { return ruleReady }
func (limit) events() bool     { return true }

// start makes the cold start's writes, and starts the workers that follow changes.
func (l limit) start(ctx context.Context, s *session) error {
	ctx, cancel := context.WithCancel(ctx)
	run := &limitRun{s: s, watching: l.Watching, cancel: cancel, queue: workqueue.NewTyped[int](),
		deployments: make([]*appsv1.Deployment, len(s.foos)), latest: map[int]*samplev1alpha1.Foo{}}
	s.limit = run // stopped with the session, also after an error here
	if err := run.connect(); err != nil {
		return err
	}
	if l.Watching {
		stopInformers, err := startInformers(ctx, run.kube, run.sample, run.specChanged)
		if err != nil {
			return err
		}
		run.cancel = func() { cancel(); stopInformers() }
	}
	progressf("%s: writing a Deployment, an Event and a status per Foo with %d requests in flight", s.name, s.cfg.workers)
	run.wg.Go(func() {
		if err := parallel(ctx, len(s.foos), s.cfg.workers, run.create); err != nil && ctx.Err() == nil {
			s.fail(err)
		}
	})
	for range s.cfg.workers {
		run.wg.Go(func() {
			for run.work(ctx) {
			}
		})
	}
	return nil
}

// limitRun is a limit's writers on one session.
type limitRun struct {
	s         *session
	kube      kubernetes.Interface // the limit's own clients (connect)
	sample    clientset.Interface
	closeIdle func() // closes their connection
	cancel    context.CancelFunc
	watching  bool // it follows its Foo informer (specChanged), not the patches' responses
	wg        sync.WaitGroup
	queue     workqueue.TypedInterface[int] // Foos to follow, by index
	failed    atomic.Bool                   // a write failed, and was reported

	mu          sync.Mutex
	deployments []*appsv1.Deployment        // by index, as last written
	latest      map[int]*samplev1alpha1.Foo // by index, as the last change followed left it
}

// connect builds the limit's clients as our controller builds its own.
func (l *limitRun) connect() (err error) {
	l.kube, l.sample, l.closeIdle, err = clientsAsOurs(l.s.cluster, "sample-controller-bench-limit")
	return err
}

// clientsAsOurs builds clients as our controller builds its own: built-in types as
// protobuf, Foos as JSON, on one connection, with no rate limit; closeIdle closes it.
// The Dial function keeps client-go from handing out the transport, and so the
// connection, it caches for the bench's.
func clientsAsOurs(cluster *localcluster.Cluster, userAgent string) (kube kubernetes.Interface, sample clientset.Interface, closeIdle func(), err error) {
	cfg := cluster.RESTConfig()
	cfg.QPS, cfg.UserAgent = -1, userAgent
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if sample, err = clientset.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, nil, nil, err
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if kube, err = kubernetes.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, nil, nil, err
	}
	return kube, sample, httpClient.CloseIdleConnections, nil
}

// startInformers lists and watches the Foos and their Deployments as our controller
// does (the Deployments' label, cached as ours; the Foos cached as ours; the
// same resync) until both caches are filled, and calls changed with each Foo whose spec
// an update changed. stop ends them, whether or not ctx has ended.
func startInformers(ctx context.Context, kube kubernetes.Interface, sample clientset.Interface, changed func(*samplev1alpha1.Foo)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	// No index, where the factories' default adds a namespace index: ours keeps only
	// the indexes it reads, and those are its own work.
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
		kubeinformers.WithTransform(reconcile.CacheDeployment))
	kubeFactory.InformerFor(&appsv1.Deployment{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return appsinformers.NewDeploymentInformerWithOptions(client, benchNamespace, kubeinternal.InformerOptions{
			ResyncPeriod:     resync,
			TweakListOptions: func(o *metav1.ListOptions) { o.LabelSelector = reconcile.FooUIDLabel },
		})
	})
	sampleFactory := sampleinformers.NewSharedInformerFactoryWithOptions(sample, resync,
		sampleinformers.WithTransform(reconcile.CacheFoo))
	sampleFactory.InformerFor(&samplev1alpha1.Foo{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
		return fooinformers.NewFooInformerWithOptions(client, benchNamespace, sampleinternal.InformerOptions{ResyncPeriod: resync})
	})
	// A handler that does nothing: an informer resyncs only for its handlers, and
	// ours has them.
	if _, err = kubeFactory.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{}); err != nil {
		return nil, err
	}
	_, err = sampleFactory.Samplecontroller().V1alpha1().Foos().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			if old, foo := oldObj.(*samplev1alpha1.Foo), newObj.(*samplev1alpha1.Foo); foo.Generation != old.Generation {
				changed(foo)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())
	stop = func() {
		cancel()
		kubeFactory.Shutdown()
		sampleFactory.Shutdown()
	}
	for _, result := range []cache.SyncResult{kubeFactory.WaitForCacheSyncWithContext(ctx), sampleFactory.WaitForCacheSyncWithContext(ctx)} {
		if err := result.AsError(); err != nil {
			stop()
			return nil, fmt.Errorf("the limit's informers: %w", err)
		}
	}
	return stop, nil
}

// create makes the writes for the i-th Foo, new: Deployment, Event, status.
func (l *limitRun) create(ctx context.Context, i int) error {
	foo := l.s.foos[i]
	d, err := l.kube.AppsV1().Deployments(foo.Namespace).Create(ctx, reconcile.NewDeployment(foo), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Deployment %s: %w", foo.Spec.DeploymentName, err)
	}
	l.store(i, d)
	if _, err := l.kube.EventsV1().Events(foo.Namespace).Create(ctx, createdEvent(foo, d, time.Now()), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording the creation of Deployment %s: %w", d.Name, err)
	}
	return l.writeStatus(ctx, foo, d)
}

// writeStatus writes the status our controller computes for foo whose Deployment is d.
func (l *limitRun) writeStatus(ctx context.Context, foo *samplev1alpha1.Foo, d *appsv1.Deployment) error {
	withStatus := foo.DeepCopy()
	withStatus.Status = reconcile.CalculateStatus(foo, d, nil, metav1.Now())
	if _, err := l.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).UpdateStatus(ctx, withStatus, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of Foo %s: %w", foo.Name, err)
	}
	return nil
}

// createdEvent is the Event our controller records when it has created d for foo, as
// client-go's events.EventRecorder builds it.
func createdEvent(foo *samplev1alpha1.Foo, d *appsv1.Deployment, now time.Time) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", foo.Name, now.UnixNano()), Namespace: foo.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: "sample-controller",
		ReportingInstance:   "sample-controller-bench",
		Action:              "Create",
		Reason:              reconcile.EventDeploymentCreated,
		Regarding:           objectReference(reconcile.FooGVK.GroupVersion().String(), "Foo", &foo.ObjectMeta),
		Related:             ptr.To(objectReference("apps/v1", "Deployment", &d.ObjectMeta)),
		Note:                fmt.Sprintf("Created Deployment %q", d.Name),
		Type:                corev1.EventTypeNormal,
	}
}

func objectReference(apiVersion, kind string, m *metav1.ObjectMeta) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
}

// follow queues the writes for the i-th Foo, which a change made foo.
func (l *limitRun) follow(i int, foo *samplev1alpha1.Foo) {
	l.mu.Lock()
	l.latest[i] = foo
	l.mu.Unlock()
	l.queue.Add(i)
}

// specChanged follows a change of foo's spec that the limit's Foo informer saw.
func (l *limitRun) specChanged(foo *samplev1alpha1.Foo) {
	if i, ok := l.s.fooIndex(foo.Name); ok {
		l.follow(i, foo)
	}
}

// work makes the writes for one queued Foo: the Deployment's patch, then the status.
func (l *limitRun) work(ctx context.Context) bool {
	i, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(i)
	l.mu.Lock()
	foo, d := l.latest[i], l.deployments[i]
	l.mu.Unlock()
	if d == nil { // not created: no change comes before the cold start converged
		return true
	}
	// As the controller writes it: a patch of what changed, on the version read.
	changed, _ := reconcile.UpdateDeployment(foo, d)
	deployments := l.kube.AppsV1().Deployments(foo.Namespace)
	patch, err := reconcile.DeploymentPatch(d, changed)
	var updated *appsv1.Deployment
	if err == nil {
		updated, err = deployments.Patch(ctx, d.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	if err == nil {
		l.store(i, updated)
		// A conflict means a newer patch of this Foo came in meanwhile and queued it
		// again: that status write supersedes this one, as a controller's would.
		if err = l.writeStatus(ctx, foo, updated); apierrors.IsConflict(err) {
			err = nil
		}
	}
	if err != nil && ctx.Err() == nil {
		if !l.failed.Swap(true) {
			progressf("%s: %v (the first of the limit's writes to fail)", l.s.name, err)
		}
		// Read it again, so that one failure does not make every later update conflict.
		if fresh, getErr := deployments.Get(ctx, d.Name, metav1.GetOptions{}); getErr == nil {
			l.store(i, fresh)
		}
	}
	return true
}

func (l *limitRun) store(i int, d *appsv1.Deployment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deployments[i] = d
}

func (l *limitRun) stop() {
	l.cancel()
	l.queue.ShutDown()
	l.wg.Wait()
	if l.closeIdle != nil {
		l.closeIdle()
	}
}
