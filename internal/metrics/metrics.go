// Package metrics collects the Prometheus metrics that client-go can report, its work
// queues', its REST clients', its leader elections' and its informers', for a
// controller to serve on /metrics.
//
// The REST client and informer series are component-base's, as kube-controller-manager
// serves them. The work queue and leader election series keep component-base's names
// but are this package's own: a sharded replica's slot queues come and go, and a queue
// that was shut down must drop its gauges (ForgetQueue); and a replica that released
// its Lease must say 0 (LeaderElectionEnded), which client-go's elector does not report.
// component-base keeps its vectors unexported, so neither can be done through them.
package metrics

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"
	// Client-go's informer metrics provider, set in its init: informer_queued_items,
	// informer_processing_latency_seconds, informer_store_resource_version.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/fifo"
	// Client-go's REST client metrics, set in its init: rest_client_requests_total,
	// rest_client_request_duration_seconds, rest_client_rate_limiter_duration_seconds,
	// the requests' and answers' sizes, retries, and the transport cache's series.
	_ "k8s.io/component-base/metrics/prometheus/restclient"

	"github.com/seed-e6610ed6/sample-controller/internal/version"
)

// Registry holds the metrics the process serves but the informers' and the REST
// clients' (see Gatherer): the Go runtime's and the process's, client-go's once
// RegisterClientGo has run, and any the controller adds.
var Registry = prometheus.NewRegistry()

// Gatherer is what the process serves on /metrics: Registry, and from component-base's
// legacy registry the informer_* series of the informers that have a name and the
// rest_client_* series (its packages clientgo/fifo and restclient are client-go's
// providers for them). Only those are taken from there: that registry has Go and
// process collectors of its own, which Registry has too.
var Gatherer prometheus.Gatherer = prometheus.Gatherers{Registry, prefixGatherer{legacyregistry.DefaultGatherer, []string{"informer_", "rest_client_"}}}

// prefixGatherer gathers the families of Gatherer whose name has one of prefixes.
type prefixGatherer struct {
	prometheus.Gatherer
	prefixes []string
}

func (g prefixGatherer) Gather() ([]*dto.MetricFamily, error) {
	families, err := g.Gatherer.Gather()
	return slices.DeleteFunc(families, func(f *dto.MetricFamily) bool {
		return !slices.ContainsFunc(g.prefixes, func(prefix string) bool { return strings.HasPrefix(f.GetName(), prefix) })
	}), err
}

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
}

var (
	registerOnce sync.Once
	queues       = newQueueMetrics()
	leaders      = newLeaderMetrics()
)

// RegisterClientGo makes client-go report its work queue and leader election metrics
// to Registry. Call it before creating queues and electors: client-go reads the
// providers when they are built. Calls after the first do nothing. (The REST client's
// and informers' providers are component-base's, set when this package is loaded.)
func RegisterClientGo() {
	registerOnce.Do(func() {
		q := queues
		Registry.MustRegister(q.depth, q.adds, q.latency, q.workDuration, q.unfinished, q.longestRunning, q.retries)
		workqueue.SetProvider(q)

		l := leaders
		Registry.MustRegister(l.status, l.slowpath)
		leaderelection.SetProvider(l)
	})
}

// RegisterBuildInfo adds sample_controller_build_info, always 1, whose labels say which
// build runs: join it to other series to see what a rollout changed.
func RegisterBuildInfo(info version.Info) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sample_controller_build_info",
		Help: "Always 1; its labels say which build of the controller is running.",
		ConstLabels: prometheus.Labels{
			"version": info.Version, "revision": info.Revision, "go_version": info.GoVersion, "platform": info.Platform,
		},
	})
	g.Set(1)
	Registry.MustRegister(g)
}

// LeaderElectionEnded reports that this process no longer holds the named lease, once
// it has released it: client-go's elector reports a lost lease, not a release.
func LeaderElectionEnded(name string) {
	leaders.status.WithLabelValues(name).Set(0)
}

// leaderMetrics implements leaderelection.MetricsProvider with the series
// kube-controller-manager exposes under the same names. The elector reports 0 as soon as
// it is created, so every replica exposes the series and "no replica leads" is
// sum(leader_election_master_status{name="..."}) == 0 rather than a missing series.
type leaderMetrics struct {
	status   *prometheus.GaugeVec
	slowpath *prometheus.CounterVec
}

func newLeaderMetrics() *leaderMetrics {
	return &leaderMetrics{
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "leader_election_master_status",
			Help: "1 while this process holds the named lease, 0 while it does not."}, []string{"name"}),
		slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leader_election_slowpath_total",
			Help: "Lease renewals that had to read the lease again because the cached copy was out of date."}, []string{"name"}),
	}
}

func (l *leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return l }

func (l *leaderMetrics) On(name string)  { l.status.WithLabelValues(name).Set(1) }
func (l *leaderMetrics) Off(name string) { l.status.WithLabelValues(name).Set(0) }
func (l *leaderMetrics) SlowpathExercised(name string) {
	l.slowpath.WithLabelValues(name).Inc()
}

// queueMetrics implements workqueue.MetricsProvider, one series per queue name.
type queueMetrics struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinished     *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
}

// queueBuckets span 10 µs to about 10 s, where queue waits and syncs fall.
var queueBuckets = prometheus.ExponentialBuckets(10e-6, 4, 11)

func newQueueMetrics() *queueMetrics {
	const subsystem = "workqueue"
	labels := []string{"name"}
	return &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: subsystem, Name: "depth",
			Help: "Current number of items waiting in the work queue."}, labels),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: subsystem, Name: "adds_total",
			Help: "Total number of items added to the work queue."}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: subsystem, Name: "queue_duration_seconds",
			Help: "How long an item waits in the work queue before a worker takes it.", Buckets: queueBuckets}, labels),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: subsystem, Name: "work_duration_seconds",
			Help: "How long a worker takes to process an item.", Buckets: queueBuckets}, labels),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: subsystem, Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress that has not been observed by work_duration_seconds yet. A large value hints at stuck workers."}, labels),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: subsystem, Name: "longest_running_processor_seconds",
			Help: "How long the longest-running worker of the queue has been processing its item."}, labels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: subsystem, Name: "retries_total",
			Help: "Total number of rate-limited re-adds (retries) to the work queue."}, labels),
	}
}

// ForgetQueue drops the gauges of the work queue name, which was shut down and whose
// workers have returned: a queue shut down with items in it would otherwise report
// them for good, and a new queue of the same name would count on from there. The
// counters and histograms stay, cumulative across the queue's lives.
func ForgetQueue(name string) {
	queues.depth.DeleteLabelValues(name)
	queues.unfinished.DeleteLabelValues(name)
	queues.longestRunning.DeleteLabelValues(name)
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.workDuration.WithLabelValues(name)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longestRunning.WithLabelValues(name)
}
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}
