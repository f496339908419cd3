// Command sample-controller keeps a Deployment for every Foo
// (samplecontroller.k8s.io/v1alpha1) and reports its progress in the Foo's status.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/outage"
	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/serving"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/version"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	samplescheme "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/scheme"
	sampleinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions"
)

func init() {
	// Events name the Foo they are about; the recorder looks its kind up here.
	utilruntime.Must(samplescheme.AddToScheme(scheme.Scheme))
}

// options are the command-line flags.
type options struct {
	kubeconfig   string
	master       string
	namespace    string
	workers      int
	kubeAPIQPS   float64
	kubeAPIBurst int
	resyncPeriod time.Duration

	gracefulShutdownTimeout time.Duration
	metricsBindAddress      string
	metricsSecure           bool
	secureServing           *serving.Options
	healthProbeBindAddress  string
	profiling               bool

	version bool

	leaderElect              bool
	shardSlots               int
	leaderElectNamespace     string
	leaderElectName          string
	leaderElectLeaseDuration time.Duration
	leaderElectRenewDeadline time.Duration
	leaderElectRetryPeriod   time.Duration
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. When empty, $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration are tried, as kubectl does.")
	fs.StringVar(&o.master, "master", "", "Address of the Kubernetes API server. Overrides the server in the kubeconfig.")
	fs.StringVar(&o.namespace, "namespace", "", "Only watch Foos and Deployments in this namespace. Empty watches all namespaces.")
	fs.IntVar(&o.workers, "workers", 0, fmt.Sprintf("Number of Foos synced in parallel: by the replica, or in sharded mode by each slot it holds. 0 means %d, or %d per slot in sharded mode.", defaultWorkers, defaultSlotWorkers))
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 0, "Client-side limit of requests per second to the API server. 0 or less turns client-side throttling off and leaves flow control to the API server's priority and fairness.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 0, "Client-side burst of requests to the API server, with --kube-api-qps above 0. 0 means twice --kube-api-qps.")
	fs.DurationVar(&o.resyncPeriod, "resync-period", 10*time.Hour, "How often the informers replay their caches. Replays of unchanged objects are dropped, so this only costs CPU. 0 turns it off.")
	fs.DurationVar(&o.gracefulShutdownTimeout, "graceful-shutdown-timeout", defaultShutdownTimeout, "On SIGTERM or SIGINT, how long in-flight syncs may take to finish before they are cancelled.")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", ":8443", "Address to serve Prometheus metrics on, at /metrics. 0 turns it off.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve the metrics address over HTTPS, to callers whose bearer token the API server authenticates (TokenReview) and who may get the path (SubjectAccessReview). false serves plain HTTP to anyone, for local runs.")
	o.secureServing = serving.NewOptions(controllerAgentName)
	o.secureServing.AddFlags(fs)
	fs.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", ":8081", "Address to serve /healthz and /readyz on, over plain HTTP and to anyone. 0 turns it off.")
	fs.BoolVar(&o.profiling, "profiling", false, "Serve Go's pprof profiles at /debug/pprof/ on the metrics address; with --metrics-secure, to callers who may get /debug/pprof/*.")
	fs.BoolVar(&o.version, "version", false, "Print the version, the commit and the Go version of this build, and exit.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Run workers only while holding a Lease, so that several replicas can run with one active.")
	fs.IntVar(&o.shardSlots, "shard-slots", 0, "Sharded mode (alpha), instead of --leader-elect: divide the Foos into this many slots by the hash of their UID, and let every replica act on its share, each slot only while the replica holds the slot's Lease. The Leases use the --leader-elect-* name, namespace and timings. 0 turns it off.")
	fs.StringVar(&o.leaderElectNamespace, "leader-elect-resource-namespace", "", "Namespace of the Lease. Empty means the controller's own: the in-cluster namespace, or the kubeconfig context's. The Role of artifacts/deploy grants Leases in its own namespace only.")
	fs.StringVar(&o.leaderElectNamespace, "leader-elect-namespace", "", "Deprecated: use --leader-elect-resource-namespace, as Kubernetes components name it.")
	fs.StringVar(&o.leaderElectName, "leader-elect-resource-name", "sample-controller", "Name of the Lease the replicas compete for.")
	fs.DurationVar(&o.leaderElectLeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a Lease lasts without renewal before another replica may take it.")
	fs.DurationVar(&o.leaderElectRenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its Lease before giving up leadership.")
	fs.DurationVar(&o.leaderElectRetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the Lease.")
}

func main() {
	var opts options
	opts.addFlags(flag.CommandLine)
	// Logging as Kubernetes components configure it: -v, --vmodule, --logging-format
	// (text or json) and its options, without klog's file flags, which they dropped.
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logging, flag.CommandLine)
	flag.Parse()
	if opts.version {
		fmt.Println(version.Get())
		return
	}
	if err := logsapi.ValidateAndApply(logging, nil); err != nil {
		fmt.Fprintf(os.Stderr, "sample-controller: %v\n", err)
		os.Exit(2)
	}

	gogc, ignored := applyGOGC(os.Getenv)

	ctx := signalContext()
	logger := klog.FromContext(ctx)
	if ignored != "" {
		logger.Info("GOGC in the environment is neither a number nor off, which the Go runtime ignores: the controller's own target applies", "GOGC", ignored, "target", gogc)
	}
	logger.V(1).Info("Garbage collection", "GOGC", gogc)
	if err := run(ctx, opts); err != nil {
		logger.Error(err, "sample-controller failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// defaultGOGC is the garbage collector's target when the environment sets no GOGC:
// the heap may grow by this percentage of what was live after a collection before the
// next one starts. Nearly all of what is live here is the informers' caches, which
// live as long as the process, so Go's default of 100 lets the process hold about as
// much garbage as cache. 50 holds half that, for collections twice as frequent
// (docs/performance.md measures the two against each other at 10000 Foos).
const defaultGOGC = 50

// applyGOGC sets the garbage collector's target to defaultGOGC unless the environment
// (read with getenv) sets a GOGC that the Go runtime has then applied, and returns the
// target in force. The runtime takes "off" or an integer and ignores anything else,
// an empty value included, as if GOGC were unset; so does applyGOGC, which then also
// returns the value it ignored, for the log.
func applyGOGC(getenv func(string) string) (target, ignored string) {
	value := getenv("GOGC")
	if _, err := strconv.ParseInt(value, 10, 32); err == nil || value == "off" {
		return value, ""
	}
	debug.SetGCPercent(defaultGOGC)
	return strconv.Itoa(defaultGOGC), value
}

// The default concurrency. With one active replica, 32 syncs keep the API server
// busy through a cold start (at 1000 Foos, 8 left it idle part of the time: see
// docs/performance.md); in sharded mode each slot held has its own queue and workers,
// so a replica of 16 slots with 32 each would send up to 512 requests at once.
const (
	defaultWorkers     = 32
	defaultSlotWorkers = 8
)

// workers is the number of workers per queue: the --workers given, or the default
// for the mode.
func workers(flag, shardSlots int) int {
	switch {
	case flag > 0:
		return flag
	case shardSlots > 0:
		return defaultSlotWorkers
	default:
		return defaultWorkers
	}
}

// run connects to the cluster and runs the controller until ctx is cancelled.
func run(ctx context.Context, opts options) error {
	logger := klog.FromContext(ctx)
	if opts.workers < 0 {
		return fmt.Errorf("--workers must be 0 (the default) or more, got %d", opts.workers)
	}
	opts.workers = workers(opts.workers, opts.shardSlots)
	if opts.shardSlots < 0 || opts.shardSlots > slots.MaxSlots {
		return fmt.Errorf("--shard-slots must be between 0 (off) and %d, got %d", slots.MaxSlots, opts.shardSlots)
	}
	if opts.shardSlots > 0 && opts.leaderElect {
		return errors.New("--shard-slots and --leader-elect exclude each other: sharded replicas all work, each on its slots")
	}
	if opts.metricsSecure {
		if err := opts.secureServing.Validate(); err != nil {
			return err
		}
	}
	// With leader election or shards, every write needs a valid tenure of a Lease.
	elected := opts.leaderElect || opts.shardSlots > 0
	if elected {
		// client-go gives a Lease up after failing to renew it for the renew deadline,
		// a retry period after its last renewal at most; the tenure, which holds every
		// write back, ends a margin before the Lease would expire. When the tenure ends
		// first, writes stop while the replica still believes it leads: safe, but idle.
		usable := opts.leaderElectLeaseDuration - tenure.Margin(opts.leaderElectLeaseDuration)
		if need := opts.leaderElectRenewDeadline + opts.leaderElectRetryPeriod; need > usable {
			logger.Info("The renew deadline plus the retry period exceeds the usable part of the lease duration: a replica that cannot renew stops writing before it gives the Lease up, and works on nothing meanwhile",
				"leaseDuration", opts.leaderElectLeaseDuration, "usable", usable, "renewDeadline", opts.leaderElectRenewDeadline, "retryPeriod", opts.leaderElectRetryPeriod)
		}
	}
	build := version.Get()
	logger.Info("Starting sample-controller", "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion)
	// client-go picks its metrics providers when clients and queues are built.
	metrics.RegisterClientGo()
	metrics.RegisterBuildInfo(build)

	cfg, namespace, err := restConfig(opts)
	if err != nil {
		return fmt.Errorf("loading the client configuration: %w", err)
	}
	if opts.leaderElectNamespace == "" {
		opts.leaderElectNamespace = namespace
	}
	// While the API server cannot be reached, every client's requests wait for it,
	// instead of failing into client-go's reflector backoff, which grows to a minute
	// and would keep the informers asleep long after the server is back.
	var wentDown time.Time
	hold, err := outage.New(ctx, cfg, outage.DefaultInterval, func(down bool) {
		if down {
			wentDown = time.Now()
			logger.Info("The API server cannot be reached: requests wait until it answers", "server", cfg.Host)
			return
		}
		logger.Info("The API server answers again", "server", cfg.Host, "after", time.Since(wentDown).Round(time.Millisecond))
	})
	if err != nil {
		return err
	}
	// Every write of the controller, Events included, passes the gate. With leader
	// election or shards, only inside a valid tenure.
	gate := &tenure.Gate{
		Required: elected,
		HeldBack: func(reason string) { writesHeldBack.WithLabelValues(reason).Inc() },
	}
	leaseCfg, kubeCfg, fooCfg := clientConfigs(cfg, gate, hold)
	leaseClient, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return fmt.Errorf("building the Lease client: %w", err)
	}
	kubeClient, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	sampleClient, err := clientset.NewForConfig(fooCfg)
	if err != nil {
		return fmt.Errorf("building the Foo client: %w", err)
	}

	// The slot gauges are served in single-leader mode too, both 0, so that one alert
	// covers both modes.
	metrics.Registry.MustRegister(syncsTotal, staleSkipsTotal, writesHeldBack, syncDuration, slotCount, slotsHeld)
	slotCount.Set(float64(opts.shardSlots))
	if opts.shardSlots > 0 {
		identity, err := election.Identity()
		if err != nil {
			return err
		}
		membership := slots.NewMembership(leaseClient, opts.leaderElectNamespace, opts.leaderElectName, identity, opts.shardSlots, opts.leaderElectLeaseDuration, clock.RealClock{})
		// Ready once the replica knows the others; each slot's caches sync before its
		// workers start.
		servers, err := startServers(ctx, opts, cfg, membership.HasSynced, nil)
		if err != nil {
			return err
		}
		defer servers.Shutdown(logger)
		// Each slot records its Events in its own tenure.
		return runSharded(ctx, opts, leaseClient, kubeClient, sampleClient, identity, membership)
	}

	// With leader election, the Lease's tenure; without, none.
	var leading *tenure.Tenure
	if opts.leaderElect {
		leading = tenure.New(clock.RealClock{})
	}
	eventRecording, err := eventrecording.Start(ctx, kubeClient.EventsV1(), controllerAgentName, leading)
	if err != nil {
		return err
	}
	// Runs once the workers have stopped: the Events of the last syncs are written
	// before the process exits (as a leader, before it releases the Lease).
	defer eventRecording.Shutdown(ctx, eventrecording.FlushTimeout)

	kubeFactory, sampleFactory, releaseNames := newInformerFactories(kubeClient, sampleClient, opts.namespace, opts.resyncPeriod, nil, controllerAgentName)
	defer releaseNames()
	fooInformer := sampleFactory.Samplecontroller().V1alpha1().Foos()
	controller, err := NewController(ctx, Config{
		KubeClient: kubeClient, SampleClient: sampleClient,
		Deployments: kubeFactory.Apps().V1().Deployments(), Foos: fooInformer,
		Recorder: eventRecording.Recorder(), ShutdownTimeout: opts.gracefulShutdownTimeout,
	})
	if err != nil {
		return err
	}
	metrics.Registry.MustRegister(newFooReadyCollector(controller.cachedFoos))

	// Leader election reports a leader that cannot renew its Lease as unhealthy, so
	// that the kubelet restarts it.
	var watchdog *leaderelection.HealthzAdaptor
	if opts.leaderElect {
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	servers, err := startServers(ctx, opts, cfg, controller.HasSynced, watchdog)
	if err != nil {
		return err
	}
	defer servers.Shutdown(logger)

	// The caches fill on every replica, leader or not, so that a new leader starts
	// from a warm cache. Shutdown waits for the informers' goroutines; it runs after
	// the workers stop.
	defer sampleFactory.Shutdown()
	defer kubeFactory.Shutdown()
	kubeFactory.Start(ctx.Done())
	sampleFactory.Start(ctx.Done())

	runController := func(ctx context.Context) error {
		err := controller.Run(ctx, opts.workers)
		eventRecording.Shutdown(ctx, eventrecording.FlushTimeout)
		return err
	}
	if !opts.leaderElect {
		return runController(ctx)
	}
	return runAsLeader(ctx, leaseClient, opts, leading, watchdog, runController)
}

// newInformerFactories builds the informer factories the controller reads from,
// watching one namespace, or all when namespace is empty.
//
// The Deployment informer lists and watches only Deployments that carry the
// controller's label, so its memory does not grow with the other Deployments in the
// cluster. Both drop managedFields from cached objects: the controller never reads
// them, and they are often the largest part of an object.
//
// name, unless empty, names the informers in client-go's informer metrics
// (informer_queued_items, informer_store_resource_version: how far behind each cache
// is), as name-deployments and name-foos; release gives the names back once the
// factories have shut down, for a slot that comes back.
func newInformerFactories(kubeClient kubernetes.Interface, sampleClient clientset.Interface, namespace string, resync time.Duration, scope *informerScope, name string) (_ kubeinformers.SharedInformerFactory, _ sampleinformers.SharedInformerFactory, release func()) {
	kubeName, sampleName := reserveInformerName(name, "deployments"), reserveInformerName(name, "foos")
	release = func() {
		kubeName.Release()
		sampleName.Release()
	}
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, resync,
		kubeinformers.WithInformerName(kubeName),
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
		sampleinformers.WithInformerName(sampleName),
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
			return newScopedFooInformer(client, namespace, resync, scope, sampleName)
		})
	}
	return kubeFactory, sampleFactory, release
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

// dropManagedFields is an informer transform that clears metadata.managedFields.
// An update sent without managedFields leaves the stored ones unchanged.
func dropManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// startServers listens on the metrics and probe addresses, so that a taken port fails
// the start, and serves in the background until shutdown.
//
//   - /metrics: Prometheus metrics. With --metrics-secure, over HTTPS to callers that
//     the API server of cfg (or of the --authentication-kubeconfig and
//     --authorization-kubeconfig) authenticates and authorizes.
//   - /healthz: liveness. Fails when this replica leads but has not renewed its Lease
//     in time, so that the kubelet restarts a stuck leader.
//   - /readyz: readiness. Fails until the informer caches have synced.
//   - /debug/pprof/: Go's profiles, on the metrics address, with --profiling only.
//
// The probes stay plain HTTP without authentication: the kubelet has no token to send.
func startServers(ctx context.Context, opts options, cfg *rest.Config, synced func() bool, watchdog *leaderelection.HealthzAdaptor) (serving.Servers, error) {
	var servers serving.Servers
	if opts.metricsBindAddress != "0" {
		handler := serving.MetricsHandler(opts.profiling)
		var tlsConfig *tls.Config
		if opts.metricsSecure {
			secure, err := opts.secureServing.New(ctx, opts.metricsBindAddress, cfg)
			if err != nil {
				return nil, fmt.Errorf("configuring secure serving of metrics: %w", err)
			}
			handler, tlsConfig = secure.Handler(handler), secure.TLSConfig
		}
		srv, err := serving.Serve(ctx, "metrics", opts.metricsBindAddress, handler, tlsConfig)
		if err != nil {
			return nil, err
		}
		servers = append(servers, srv)
	}
	if opts.healthProbeBindAddress != "0" {
		var healthz func(*http.Request) error
		if watchdog != nil {
			healthz = watchdog.Check
		}
		srv, err := serving.Serve(ctx, "health probes", opts.healthProbeBindAddress, serving.ProbesHandler(synced, healthz), nil)
		if err != nil {
			servers.Shutdown(klog.FromContext(ctx))
			return nil, err
		}
		servers = append(servers, srv)
	}
	return servers, nil
}

// runAsLeader runs run only while this process holds the Lease, until ctx is
// cancelled (election.Run): on cancellation run stops first and the Lease is released
// after; a process that loses the Lease while it works, also while its last syncs
// finish after being asked to stop, exits at once and does not release it, so that a
// standby never starts while this process still works. run's writes are held to the
// tenure held, which the election keeps from its Lease writes and reads.
func runAsLeader(ctx context.Context, kubeClient kubernetes.Interface, opts options, held *tenure.Tenure, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	identity, err := election.Identity()
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: opts.leaderElectName, Namespace: opts.leaderElectNamespace},
		Client:     kubeClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	logger.Info("Waiting to become the leader", "lease", klog.KRef(opts.leaderElectNamespace, opts.leaderElectName), "identity", identity)
	result := election.Run(ctx, election.Config{
		Lock:          lock,
		Name:          opts.leaderElectName,
		LeaseDuration: opts.leaderElectLeaseDuration,
		RenewDeadline: opts.leaderElectRenewDeadline,
		RetryPeriod:   opts.leaderElectRetryPeriod,
		WatchDog:      watchdog,
		Tenure:        held,
		OnLost: func() {
			logger.Error(nil, "Lost the lease; exiting so that two leaders never act at once", "identity", identity)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		},
		OnNewLeader: func(current string) {
			if current != identity {
				logger.Info("Another replica leads", "leader", current)
			}
		},
	}, func(ctx context.Context) error {
		logger.Info("Became the leader", "identity", identity)
		return run(ctx)
	})
	if !result.Worked {
		return result.Err
	}
	if result.ReleaseErr != nil {
		logger.Error(result.ReleaseErr, "Releasing the lease; another replica takes over once it expires", "identity", identity)
	} else {
		logger.Info("Released the lease", "identity", identity)
	}
	metrics.LeaderElectionEnded(opts.leaderElectName)
	return result.Err
}

// clientConfigs derives from cfg the configurations of the Lease client and of the
// clients of everything else, built-in types and Foos.
//
// The Leases are written by a client of their own: the elections keep the tenures
// that every other write is held to, at the gate. The hold is outside the gate: a
// write that waited for the API server is checked against its tenure, and given the
// server-side timeout of what is left of it, when it is sent, not before it waited.
func clientConfigs(cfg *rest.Config, gate *tenure.Gate, hold *outage.Hold) (leases, kube, foos *rest.Config) {
	// Built-in types travel as protobuf, which costs the API server and this process
	// less to encode and decode than JSON. Foos are custom resources: JSON only.
	kube = rest.CopyConfig(cfg)
	kube.ContentType = runtime.ContentTypeProtobuf
	kube.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	leases = rest.CopyConfig(kube)
	leases.Wrap(hold.Wrap)
	kube.Wrap(gate.Wrap)
	kube.Wrap(hold.Wrap)
	foos = rest.CopyConfig(cfg)
	foos.Wrap(gate.Wrap)
	foos.Wrap(hold.Wrap)
	return leases, kube, foos
}

// restConfig loads the client configuration the way kubectl does, applies the
// client-side rate limits, and returns it with the namespace the controller runs in.
func restConfig(opts options) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	overrides.ClusterInfo.Server = opts.master
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	// The context's namespace, or in a Pod its own.
	namespace, _, err := loader.Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = controllerAgentName
	if opts.kubeAPIQPS > 0 {
		cfg.QPS = float32(opts.kubeAPIQPS)
		cfg.Burst = opts.kubeAPIBurst
		if cfg.Burst <= 0 {
			// At least 1: client-go refuses a limiter with no burst, which twice a
			// QPS below 0.5 would round down to.
			cfg.Burst = max(1, int(math.Ceil(2*opts.kubeAPIQPS)))
		}
	} else {
		// A negative QPS makes client-go build no rate limiter at all.
		cfg.QPS = -1
	}
	return cfg, namespace, nil
}

// signalContext returns a context cancelled by the first SIGINT or SIGTERM. A second
// signal exits at once.
func signalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		cancel()
		<-signals
		os.Exit(1)
	}()
	return ctx
}
