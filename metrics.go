// The controller's own Prometheus metrics: its syncs, its stale-cache skips, the writes
// its tenure held back, the Events it dropped, its slots, and the Foos it knows by
// readiness. client-go's (work queues, REST clients, informers, leader election) come
// from internal/metrics.

package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/seed-e6610ed6/sample-controller/internal/eventrecording"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// The controller's own metrics. client-go's, for the work queue and the REST
// client, come from internal/metrics.
var (
	syncsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sample_controller_syncs_total",
		Help: "Foo syncs by result: success, conflict (the cache was stale; retried), error (retried with backoff), rejected (the API server refused the Deployment write; reported on the Foo and retried with backoff), held_back (a write was held back: this replica's tenure of the Lease was not valid; see sample_controller_writes_held_back_total), fenced (the API server's fencing policy refused a write: another replica holds the Lease), or stale (skipped until the cache catches up; see sample_controller_stale_cache_skips_total).",
	}, []string{"result"})

	staleSkipsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sample_controller_stale_cache_skips_total",
		Help: "Foo syncs skipped because an informer cache (resource: foos or deployments) did not yet hold the controller's own last write for the Foo or a newer version the API server showed it, or (foos) held a Foo the API server no longer has; the event that brings the change in requeues the Foo.",
	}, []string{"resource"})

	writesHeldBack = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sample_controller_writes_held_back_total",
		Help: "Writes (Deployments, Foo status, Events) not sent because this replica's tenure of its Lease, or of the slot's, was not valid by its own clock, by reason: expired (the tenure ended or lapsed: the Lease was lost, or not renewed in time), stalled (the tenure was valid when the write was let through and over at a read of its body to send it: the process stalled in between, or the Lease was lost meanwhile; the body never arrived whole) or none (a write outside any tenure where every write needs one: a bug).",
	}, []string{"reason"})

	eventsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sample_controller_events_dropped_total",
		Help: "Events recorded and never written, by reason: tenure_over (held back at the end of this replica's tenure of its Lease, or of the slot's, or still waiting at shutdown once it ended: they belong to the syncs of that tenure) shutdown (the wait of 5 s for them at shutdown ended first, the tenure still valid) backlog (100000 Events were waiting for their turn to be written already, and its namespace's queue was the longest, or it was the newest of the longest queue, making room for another namespace's), unreachable (its write did not reach the API server in 12 tries, 10 s apart), refused (the API server refused it) or interrupted (the shutdown's wait ended while its write was unanswered: the API server may have written it).",
	}, []string{"reason"})

	cachesBehindTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sample_controller_leader_caches_behind_total",
		Help: "Objects (resource: foos or deployments) that the caches held older than the API server, or did not hold, or (foos) held though the API server no longer had them, when this replica became the leader; their Foos waited for the caches to catch up before any write.",
	}, []string{"resource"})

	catchUpSeconds = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sample_controller_leader_catch_up_seconds",
		Help: "How long the check of the caches against the API server took the last time this replica became the leader (its caches synced, then a list of the Foos' and the Deployments' metadata); no sync started before it ended.",
	})

	syncDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sample_controller_sync_duration_seconds",
		Help:    "How long one Foo sync takes, API requests included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
)

// The sharded mode's metrics.
var (
	slotCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sample_controller_slots",
		Help: "Slots the Foos are divided into (--shard-slots); 0 when not sharded.",
	})
	slotsHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sample_controller_slots_held",
		Help: "Slots whose Lease this replica holds and whose Foos it acts on, their caches synced (sharded mode).",
	})
	slotAcquisitions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sample_controller_slot_acquisitions_total",
		Help: "Times this replica took a slot over and started acting on it (sharded mode).",
	})
	slotUnheld = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "sample_controller_slot_unheld_seconds",
		Help: "When this replica took a slot over, how long the slot had gone without a holder, at most: since another replica last renewed or released the slot's Lease, as this replica saw it (sharded mode).",
		// From a hand-over (one retry period) to a dead holder's Lease expiring.
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
	})
)

// Results of a sync, the values of the result label.
const (
	syncSuccess  = "success"
	syncConflict = "conflict"
	syncError    = "error"
	// syncRejected: the API server refused the Deployment write, which the Foo
	// reports. Usually the Foo's author or a policy has to act, not the operator.
	syncRejected = "rejected"
	// syncStale: skipped, the cache was older than what the controller expects of it
	// (writes.Tracker): its own last write, a version it read, the Foo's deletion.
	syncStale = "stale"
	// syncHeldBack: a write of the sync was held back, the replica's tenure of the
	// Lease being over; the Foo is retried with backoff, by whichever replica holds it.
	syncHeldBack = "held_back"
	// syncFenced: the API server's fencing policy refused a write of the sync: the
	// Lease names another replica (or, when it lasts, the policy cannot match this one).
	syncFenced = "fenced"
	// syncDeferred: the sync created the Foo's Deployment and left the status write
	// for its turn behind the Foos queued (Deployments first).
	syncDeferred = "deferred"
)

func init() {
	// Every series exists from the start, so rates work from the first scrape.
	for _, result := range []string{syncSuccess, syncConflict, syncError, syncRejected, syncStale, syncHeldBack, syncFenced, syncDeferred} {
		syncsTotal.WithLabelValues(result)
	}
	for _, resource := range []string{writes.Foos, writes.Deployments} {
		staleSkipsTotal.WithLabelValues(resource)
		cachesBehindTotal.WithLabelValues(resource)
	}
	for _, reason := range []string{tenure.ReasonExpired, tenure.ReasonStalled, tenure.ReasonNone} {
		writesHeldBack.WithLabelValues(reason)
	}
	for _, reason := range []string{eventrecording.DroppedTenureOver, eventrecording.DroppedShutdown, eventrecording.DroppedBacklog, eventrecording.DroppedUnreachable, eventrecording.DroppedRefused, eventrecording.DroppedInterrupted} {
		eventsDropped.WithLabelValues(reason)
	}
}

// fooReadyCollector reports how many Foos there are by the status of their Ready
// condition, counted from the informer caches when Prometheus scrapes.
type fooReadyCollector struct {
	// foos lists the cached Foos, and tells whether the caches have synced: a partial
	// cache would report numbers that are simply wrong.
	foos func() ([]*samplev1alpha1.Foo, bool)
	desc *prometheus.Desc
}

func newFooReadyCollector(foos func() ([]*samplev1alpha1.Foo, bool)) *fooReadyCollector {
	return &fooReadyCollector{
		foos: foos,
		desc: prometheus.NewDesc("sample_controller_foos",
			"Foos known to the controller (in sharded mode, in the slots this replica acts on) by the status of their Ready condition (Unknown when it is not set yet).",
			[]string{"ready"}, nil),
	}
}

func (c *fooReadyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *fooReadyCollector) Collect(ch chan<- prometheus.Metric) {
	foos, synced := c.foos()
	if !synced {
		return
	}
	counts := map[string]int{"True": 0, "False": 0, "Unknown": 0}
	for _, foo := range foos {
		status := "Unknown"
		if ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady); ready != nil {
			status = string(ready.Status)
		}
		counts[status]++
	}
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), status)
	}
}

// cachedObjectsCollector reports the objects in the caches of the slots this replica
// acts on: with the apiserver filtering, about 1/N of all with N replicas.
type cachedObjectsCollector struct {
	controllers *sync.Map
	desc        *prometheus.Desc
}

func newCachedObjectsCollector(controllers *sync.Map) *cachedObjectsCollector {
	return &cachedObjectsCollector{
		controllers: controllers,
		desc: prometheus.NewDesc("sample_controller_cached_objects",
			"Objects in the informer caches of the slots this replica acts on (sharded mode), by resource.",
			[]string{"resource"}, nil),
	}
}

func (c *cachedObjectsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cachedObjectsCollector) Collect(ch chan<- prometheus.Metric) {
	var foos, deployments int
	c.controllers.Range(func(_, v any) bool {
		f, d := v.(*Controller).cachedCounts()
		foos, deployments = foos+f, deployments+d
		return true
	})
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(foos), writes.Foos)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(deployments), writes.Deployments)
}

// dropEvent counts an Event recorded and never written.
func dropEvent(reason string) { eventsDropped.WithLabelValues(reason).Inc() }

// cachedCounts counts the objects in the controller's caches, by resource.
func (c *Controller) cachedCounts() (foos, deployments int) {
	return len(c.foosIndexer.ListKeys()), len(c.deploymentsIndexer.ListKeys())
}

// cachedFoos lists the Foos in the cache, once it has synced.
func (c *Controller) cachedFoos() ([]*samplev1alpha1.Foo, bool) {
	if !c.HasSynced() {
		return nil, false
	}
	foos, err := c.foosLister.List(labels.Everything())
	return foos, err == nil
}
