// Command sample-controller keeps a Deployment for every Foo
// (samplecontroller.k8s.io/v1alpha1) and reports its progress in the Foo's status.
//
// This file is the wiring: the flags (options.go), the clients (clients.go), the
// servers, and then one of the modes: one replica or the leader of several (leader.go),
// or slots shared by several (sharded.go). The controller itself is in controller.go.
// `sample-controller check` is the chart's test instead (check.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/metrics"
	"github.com/seed-e6610ed6/sample-controller/internal/version"
	samplescheme "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/scheme"
)

func init() {
	// Events name the Foo they are about; the recorder looks its kind up here.
	utilruntime.Must(samplescheme.AddToScheme(scheme.Scheme))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == checkCommand {
		if err := runCheck(signalContext(), os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "sample-controller %s: %v\n", checkCommand, err)
			os.Exit(1)
		}
		return
	}
	var opts options
	opts.addFlags(flag.CommandLine)
	// Logging as Kubernetes components configure it: -v, --vmodule, --logging-format
	// (text or json) and its options, without klog's file flags, which they dropped.
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logging, flag.CommandLine)
	flag.Parse()
	if err := noArguments(flag.CommandLine); err != nil {
		fmt.Fprintf(os.Stderr, "sample-controller: %v\n", err)
		os.Exit(2)
	}
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
	limit, err := applyMemoryLimit(os.Getenv)
	if err != nil {
		logger.Error(err, "MEMORY_LIMIT is not a number of bytes: the Go runtime keeps no soft memory limit")
	}
	logger.Info("Garbage collection", "GOGC", gogc, "softMemoryLimit", limit)
	if err := run(ctx, &opts); err != nil {
		logger.Error(err, "sample-controller failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// noArguments refuses what is left of the command line once fs parsed it: the flag
// package stops at the first argument that is not a flag (the value of a boolean flag
// given apart, as in --profiling true), and would ignore every flag after it.
func noArguments(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: a flag's value goes after = (--profiling=true); the flags after it were not read", fs.Arg(0))
	}
	return nil
}

// defaultGOGC is the garbage collector's target when the environment sets no GOGC:
// the heap may grow by this percentage of what was live after a collection before the
// next one starts. Nearly all of what is live here is the informers' caches, which
// live as long as the process, so Go's default of 100 lets the process hold about as
// much garbage as cache. 50 holds half that, for collections twice as frequent
// (docs/performance.md, "Defaults the bench chose").
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

// memoryLimitShare is the share of the container's memory limit that the Go runtime
// keeps to (its soft limit, GOMEMLIMIT): the garbage collector works harder as the
// memory it manages nears it, and the rest of the limit is for what it does not manage
// (the binary, the kernel's accounting of the process), so that the collector acts
// before the kernel kills the container. The common choice; at 100% it acts too late.
const memoryLimitShare = 0.9

// applyMemoryLimit sets the runtime's soft memory limit to memoryLimitShare of
// MEMORY_LIMIT, the container's memory limit in bytes (the Deployment sets it from the
// downward API, which cannot scale it), unless the environment (read with getenv) sets
// GOMEMLIMIT, which the runtime has applied. It returns the limit in force: math.MaxInt64
// when there is none.
func applyMemoryLimit(getenv func(string) string) (int64, error) {
	current := debug.SetMemoryLimit(-1)
	value := getenv("MEMORY_LIMIT")
	if getenv("GOMEMLIMIT") != "" || value == "" {
		return current, nil
	}
	limit, err := strconv.ParseInt(value, 10, 64)
	if err != nil || limit <= 0 {
		return current, fmt.Errorf("MEMORY_LIMIT=%q: want a positive number of bytes", value)
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// run checks the flags, connects to the cluster and runs the controller, in the mode
// the flags choose, until ctx is cancelled.
func run(ctx context.Context, opts *options) error {
	logger := klog.FromContext(ctx)
	if err := opts.validate(); err != nil {
		return err
	}
	build := version.Get()
	logger.Info("Starting sample-controller", "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion)
	// client-go picks its metrics providers when clients and queues are built.
	metrics.RegisterClientGo()
	metrics.RegisterBuildInfo(build)
	// The slot gauges are served in single-leader mode too, both 0, so that one alert
	// covers both modes.
	metrics.Registry.MustRegister(syncsTotal, staleSkipsTotal, cachesBehindTotal, catchUpSeconds, writesHeldBack, eventsDropped, syncDuration, slotCount, slotsHeld)
	slotCount.Set(float64(opts.lease.shardSlots))

	cfg, namespace, err := opts.clients.restConfig()
	if err != nil {
		return fmt.Errorf("loading the client configuration: %w", err)
	}
	if err := opts.complete(logger, namespace); err != nil {
		return err
	}
	clients, err := newClients(ctx, cfg, opts.lease.elected(), opts.lease.Identity)
	if err != nil {
		return err
	}
	if opts.lease.shardSlots > 0 {
		return runSharded(ctx, clients, opts.serving, opts.controller, opts.lease.Lease, opts.lease.shardSlots)
	}
	return runReplica(ctx, clients, opts.serving, opts.controller, opts.lease)
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
