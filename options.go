// The command line: the flags in four small groups (clients, serving, lease,
// controller), each validated and completed once, before anything starts.

package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/election"
	"github.com/seed-e6610ed6/sample-controller/internal/serving"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// options are the command-line flags.
type options struct {
	clients    clientOptions
	serving    serving.Endpoints
	lease      leaseOptions
	controller controllerOptions
	version    bool
}

// clientOptions say how to reach the API server.
type clientOptions struct {
	kubeconfig   string
	master       string
	kubeAPIQPS   float64
	kubeAPIBurst int
}

// leaseOptions choose the mode (one replica, one leader of several, or slots) and the
// Leases' settings.
type leaseOptions struct {
	leaderElect bool
	shardSlots  int
	election.Lease
}

// controllerOptions shape the controller itself.
type controllerOptions struct {
	namespace               string
	workers                 int
	resyncPeriod            time.Duration
	gracefulShutdownTimeout time.Duration
}

// The default concurrency. With one active replica, 32 syncs keep the API server
// busy through a cold start (at 1000 Foos, 8 left it idle part of the time:
// docs/performance.md, "Defaults the bench chose"); in sharded mode each slot held has its own queue and workers,
// so a replica of 16 slots with 32 each would send up to 512 requests at once.
const (
	defaultWorkers     = 32
	defaultSlotWorkers = 8
)

func (o *options) addFlags(fs *flag.FlagSet) {
	c, s, l, ctl := &o.clients, &o.serving, &o.lease, &o.controller
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. When empty, $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration are tried, as kubectl does.")
	fs.StringVar(&c.master, "master", "", "Address of the Kubernetes API server. Overrides the server in the kubeconfig.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 0, "Client-side limit of requests per second to the API server. 0 or less turns client-side throttling off and leaves flow control to the API server's priority and fairness.")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 0, "Client-side burst of requests to the API server, with --kube-api-qps above 0. 0 means twice --kube-api-qps.")

	fs.StringVar(&ctl.namespace, "namespace", "", "Only watch Foos and Deployments in this namespace. Empty watches all namespaces.")
	fs.IntVar(&ctl.workers, "workers", 0, fmt.Sprintf("Number of Foos synced in parallel: by the replica, or in sharded mode by each slot it holds. 0 means %d, or %d per slot in sharded mode.", defaultWorkers, defaultSlotWorkers))
	fs.DurationVar(&ctl.resyncPeriod, "resync-period", 10*time.Hour, "How often the informers replay their caches. Replays of unchanged objects are dropped, so this only costs CPU. 0 turns it off.")
	fs.DurationVar(&ctl.gracefulShutdownTimeout, "graceful-shutdown-timeout", defaultShutdownTimeout, "On SIGTERM or SIGINT, how long in-flight syncs may take to finish before they are cancelled.")

	fs.StringVar(&s.MetricsBindAddress, "metrics-bind-address", ":8443", "Address to serve Prometheus metrics on, at /metrics. 0 turns it off.")
	fs.BoolVar(&s.MetricsSecure, "metrics-secure", true, "Serve the metrics address over HTTPS, to callers whose bearer token the API server authenticates (TokenReview) and who may get the path (SubjectAccessReview). false serves plain HTTP to anyone, for local runs.")
	s.Secure = serving.NewOptions(controllerAgentName)
	s.Secure.AddFlags(fs)
	fs.StringVar(&s.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address to serve /healthz and /readyz on, over plain HTTP and to anyone. 0 turns it off.")
	fs.BoolVar(&s.Profiling, "profiling", false, "Serve Go's pprof profiles at /debug/pprof/ on the metrics address; with --metrics-secure, to callers who may get /debug/pprof/*.")

	fs.BoolVar(&o.version, "version", false, "Print the version, the commit and the Go version of this build, and exit.")
	fs.BoolVar(&l.leaderElect, "leader-elect", false, "Run workers only while holding a Lease, so that several replicas can run with one active.")
	fs.IntVar(&l.shardSlots, "shard-slots", 0, "Sharded mode (alpha), instead of --leader-elect: divide the Foos into this many slots by the hash of their UID, and let every replica act on its share, each slot only while the replica holds the slot's Lease. The Leases use the --leader-elect-* name, namespace and timings. 0 turns it off.")
	fs.StringVar(&l.Namespace, "leader-elect-resource-namespace", "", "Namespace of the Lease. Empty means the controller's own: the in-cluster namespace, or the kubeconfig context's. The Role of artifacts/deploy grants Leases in its own namespace only.")
	fs.StringVar(&l.Namespace, "leader-elect-namespace", "", "Deprecated: use --leader-elect-resource-namespace, as Kubernetes components name it.")
	fs.StringVar(&l.Name, "leader-elect-resource-name", "sample-controller", "Name of the Lease the replicas compete for.")
	fs.DurationVar(&l.Duration, "leader-elect-lease-duration", 15*time.Second, "How long a Lease lasts without renewal before another replica may take it.")
	fs.DurationVar(&l.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its Lease before giving up leadership.")
	fs.DurationVar(&l.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the Lease.")
}

// validate checks the flags that need no cluster.
func (o *options) validate() error {
	if o.controller.workers < 0 {
		return fmt.Errorf("--workers must be 0 (the default) or more, got %d", o.controller.workers)
	}
	if o.lease.shardSlots < 0 || o.lease.shardSlots > slots.MaxSlots {
		return fmt.Errorf("--shard-slots must be between 0 (off) and %d, got %d", slots.MaxSlots, o.lease.shardSlots)
	}
	if d := o.lease.Duration; d > election.MaxLeaseDuration {
		return fmt.Errorf("--leader-elect-lease-duration must be at most %v, got %v: replicas count no longer duration, whatever a Lease says", election.MaxLeaseDuration, d)
	}
	if o.lease.shardSlots > 0 && o.lease.leaderElect {
		return errors.New("--shard-slots and --leader-elect exclude each other: sharded replicas all work, each on its slots")
	}
	if o.serving.MetricsSecure {
		return o.serving.Secure.Validate()
	}
	return nil
}

// complete fills in the defaults that depend on other flags, on the cluster (the
// namespace this process runs in) or on the process (its identity in Leases), and
// warns of settings that work badly together.
func (o *options) complete(logger klog.Logger, namespace string) error {
	o.controller.workers = workers(o.controller.workers, o.lease.shardSlots)
	if !o.lease.elected() {
		return nil
	}
	if o.lease.Namespace == "" {
		o.lease.Namespace = namespace
	}
	identity, err := election.Identity()
	if err != nil {
		return err
	}
	o.lease.Identity = identity
	// client-go gives a Lease up after failing to renew it for the renew deadline, a
	// retry period after its last renewal at most; the tenure, which holds every write
	// back, ends a margin before the Lease would expire. When the tenure ends first,
	// writes stop while the replica still believes it leads: safe, but idle.
	l := o.lease.Lease
	if usable, need := l.Duration-tenure.Margin(l.Duration), l.RenewDeadline+l.RetryPeriod; need > usable {
		logger.Info("The renew deadline plus the retry period exceeds the usable part of the lease duration: a replica that cannot renew stops writing before it gives the Lease up, and works on nothing meanwhile",
			"leaseDuration", l.Duration, "usable", usable, "renewDeadline", l.RenewDeadline, "retryPeriod", l.RetryPeriod)
	}
	return nil
}

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

// eventsInFlight bounds the Event writes of a queue's workers in flight at once: a
// quarter of the workers, at least one. An Event reports a sync's work and should not
// hold it up: at a cold start every sync records one, and unbounded they would
// compete with the Deployment and status writes of the syncs still running.
func eventsInFlight(workers int) int {
	return max(1, workers/4)
}

// elected tells whether every write needs a valid tenure of a Lease: with leader
// election or slots.
func (l *leaseOptions) elected() bool { return l.leaderElect || l.shardSlots > 0 }

// config is the part of a controller's Config that the flags decide.
func (c controllerOptions) config(cl *clients) Config {
	return Config{
		KubeClient: cl.kube, SampleClient: cl.sample,
		Namespace: c.namespace, ResyncPeriod: c.resyncPeriod, ShutdownTimeout: c.gracefulShutdownTimeout,
	}
}
