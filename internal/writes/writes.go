// Package writes remembers, for each Foo, what the controller did or learned that its
// informer caches do not show yet: its own last writes, so that it neither decides on
// a cache older than them (KEP-5647, staleness mitigation) nor requeues on their
// echoes; the refusal it last reported; and that the API server said the Foo is gone.
// It is one record per Foo, by name and UID, forgotten in one call when the Foo goes.
package writes

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
)

// The resources whose writes a Tracker tracks, as CaughtUp names them.
const (
	Foos        = "foos"
	Deployments = "deployments"
)

// ResourceVersionReader is what Tracker needs of an informer's store: the
// resourceVersion of the newest event or list it has applied. client-go's stores
// provide it while the AtomicFIFO feature is on (beta and on by default since 1.36)
// and return "" otherwise.
type ResourceVersionReader interface {
	LastStoreSyncResourceVersion() string
}

// Tracker remembers, for each Foo, the resourceVersions of the controller's own
// last writes for it: the Foo's status and its Deployment. It answers two questions.
//
// Has the cache caught up with those writes (KEP-5647, staleness mitigation)? A sync
// that read a Foo or a Deployment older than what the controller itself last wrote
// would decide on state it knows to be stale: it would write again what it already
// wrote, or update a Deployment from an old copy and fail on a conflict. Such a sync is
// skipped, and the informer event that brings the write in wakes the Foo.
//
// Is an event the echo of the controller's own write, of the Foo's status or of its
// Deployment? That echo carries nothing the sync that wrote it did not know; requeuing
// on it would sync the Foo once more for nothing and undo its backoff. The API server
// sends the answer to a write and its watch event independently, so the echo can
// reach the informer's handlers before the sync that wrote has read the answer and
// recorded the write: the events Observed is given for a Foo are held while a sync of
// it runs, and sorted when it ends.
type Tracker struct {
	foos        ResourceVersionReader
	deployments ResourceVersionReader

	mu     sync.Mutex
	writes map[cache.ObjectName]*fooWrites
}

// fooWrites is what Tracker holds for one Foo.
type fooWrites struct {
	uid types.UID
	// statusEcho and deploymentEcho are the resourceVersions of the last write of the
	// Foo's status and of its Deployment, until the event of that write, or of a
	// later change, comes, or a sync finds the cache holding it.
	statusEcho, deploymentEcho string
	// foo and deployment are the newest resourceVersions written to each resource,
	// until the cache has caught up with them.
	foo, deployment string
	// waiting is set when a sync was skipped: the next event for the Foo wakes it.
	waiting bool
	// syncing is set while a sync of the Foo runs; held are the events that came
	// meanwhile, sorted when it ends.
	syncing bool
	held    []event
	// refusal is the cause of the last refusal of the Foo's Deployment write that the
	// controller reported, until a write goes through: one report per cause, not one
	// per try.
	refusal string
	// gone is set when the API server answered that the Foo is gone (a status write
	// or a read found none, or another Foo under its name) while the cache still has
	// it: a sync on the cache would create a Deployment for a Foo that no longer
	// exists. The informer's delete event, which forgets the record, ends it.
	gone bool
}

// event is an informer event held while a sync runs.
type event struct{ resource, rv string }

// NewTracker returns a Tracker that reads how far the caches have come from foos and
// deployments.
func NewTracker(foos, deployments ResourceVersionReader) *Tracker {
	return &Tracker{foos: foos, deployments: deployments, writes: map[cache.ObjectName]*fooWrites{}}
}

// record returns the entry of the Foo named key with UID uid, replacing one left by an
// earlier Foo of the same name. The caller holds mu.
func (w *Tracker) record(key cache.ObjectName, uid types.UID) *fooWrites {
	r := w.writes[key]
	if r == nil || r.uid != uid {
		r = &fooWrites{uid: uid}
		w.writes[key] = r
	}
	return r
}

// WroteStatus records the controller's status write of a Foo, at resourceVersion rv.
func (w *Tracker) WroteStatus(key cache.ObjectName, uid types.UID, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.record(key, uid)
	r.foo = newer(r.foo, rv)
	r.statusEcho = rv
}

// WroteDeployment records a write of the Foo's Deployment, at resourceVersion rv.
func (w *Tracker) WroteDeployment(key cache.ObjectName, uid types.UID, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.record(key, uid)
	r.deployment = newer(r.deployment, rv)
	r.deploymentEcho = rv
}

// Expect records that the API server holds the Foo named key with UID uid, or (for
// resource Deployments) a Deployment it controls, at resourceVersion rv, newer than
// the cache: until the cache of resource holds rv, syncs of the Foo are skipped as for
// the controller's own writes, and the event that brings rv in wakes the Foo.
func (w *Tracker) Expect(resource string, key cache.ObjectName, uid types.UID, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.record(key, uid)
	if resource == Deployments {
		r.deployment = newer(r.deployment, rv)
	} else {
		r.foo = newer(r.foo, rv)
	}
	r.waiting = true
}

// CaughtUp tells whether the caches hold the controller's last writes for the Foo
// named key with UID uid, as the cache has it. When they do not, it returns the
// resource that is behind and marks the Foo as waiting: the event that brings the
// write in must enqueue it (see Observed). The writes of an earlier Foo of the same
// name are forgotten: it is gone, since the cache, which only moves forward, holds
// another under its name, and the events of its writes would not wake this one.
func (w *Tracker) CaughtUp(key cache.ObjectName, uid types.UID) (behind string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	if r != nil && r.uid != uid {
		delete(w.writes, key)
		r = nil
	}
	if r == nil {
		return "", true
	}
	if r.foo != "" && !reached(w.foos, r.foo) {
		r.waiting = true
		return Foos, false
	}
	r.foo = ""
	if r.deployment != "" && !reached(w.deployments, r.deployment) {
		r.waiting = true
		return Deployments, false
	}
	r.deployment = ""
	r.waiting = false
	// An echo the cache holds has been applied: its event was handled, or is on its
	// way to the handlers. It may never match: a write that changed nothing brings no
	// event. Awaiting it longer could keep the entry for ever; at worst, the event on
	// its way syncs the Foo once more.
	if r.statusEcho != "" && reached(w.foos, r.statusEcho) {
		r.statusEcho = ""
	}
	if r.deploymentEcho != "" && reached(w.deployments, r.deploymentEcho) {
		r.deploymentEcho = ""
	}
	w.dropIfEmpty(key, r)
	return "", true
}

// Syncing marks the start of a sync of the Foo named key with UID uid, once it has
// passed CaughtUp: until Synced, the Foo's events are held.
func (w *Tracker) Syncing(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(key, uid).syncing = true
}

// Synced marks the end of the sync that Syncing started. It sorts the events held
// meanwhile, and tells whether the Foo must be synced again: one of them was not the
// echo of the controller's own last write.
func (w *Tracker) Synced(key cache.ObjectName, uid types.UID) (again bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	if r == nil || r.uid != uid {
		return false
	}
	if !r.syncing {
		// Forgotten meanwhile, for the Foo was deleted, and made again by what the
		// sync recorded after that (a write, a refusal, the Foo gone): no event of the
		// Foo will come to clear it.
		delete(w.writes, key)
		return false
	}
	r.syncing = false
	for _, e := range r.held {
		if !w.pass(r, e.resource, e.rv) {
			again = true
		}
	}
	r.held = nil
	w.dropIfEmpty(key, r)
	return again
}

// Observed is called for each event of resource (Foos or Deployments) that concerns
// the Foo named key with UID uid, the Foo itself or the Deployment it controls, after
// the informer's cache holds it at resourceVersion rv. It tells whether the event must
// enqueue the Foo: it is not the echo of the controller's own last write of that
// resource for the Foo, or a sync skipped for a stale cache waits for it. An event
// that comes while a sync of the Foo runs is held, and Synced decides on it.
//
// An event of a later change passes the echo, which may never come: a watch that
// broke and relisted reports only the newest state.
func (w *Tracker) Observed(resource string, key cache.ObjectName, uid types.UID, rv string) (enqueue bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	if r == nil || r.uid != uid {
		return true
	}
	if r.syncing {
		r.held = append(r.held, event{resource: resource, rv: rv})
		return false
	}
	own := w.pass(r, resource, rv)
	wake := r.waiting
	r.waiting = false
	w.dropIfEmpty(key, r)
	return !own || wake
}

// pass applies an event of resource at rv, which the cache holds, to r, and tells
// whether it is the echo of the last write of that resource. The caller holds mu.
func (w *Tracker) pass(r *fooWrites, resource, rv string) (own bool) {
	echo, written, store := &r.statusEcho, &r.foo, w.foos
	if resource == Deployments {
		echo, written, store = &r.deploymentEcho, &r.deployment, w.deployments
	}
	switch {
	case *echo == "":
	case *echo == rv:
		own = true
		*echo = ""
	case later(rv, *echo):
		*echo = ""
	}
	// The cache holds this event: if it holds the write, the next sync need not check.
	if *written != "" && reached(store, *written) {
		*written = ""
	}
	return own
}

// Wake is called whenever an informer event enqueues the Foo named key, after the
// cache holds that event. It clears the Foo's waiting mark: the sync the event causes
// checks again.
func (w *Tracker) Wake(key cache.ObjectName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.writes[key]; r != nil {
		r.waiting = false
		w.dropIfEmpty(key, r)
	}
}

// Refused records that the controller reported the refusal of the Foo's Deployment
// write for cause, and tells whether the last report, if any, gave another cause.
func (w *Tracker) Refused(key cache.ObjectName, uid types.UID, cause string) (newCause bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.record(key, uid)
	newCause = r.refusal != cause
	r.refusal = cause
	return newCause
}

// Accepted records that the Foo's Deployment write went through: the next refusal is
// reported again.
func (w *Tracker) Accepted(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.writes[key]; r != nil && r.uid == uid {
		r.refusal = ""
		w.dropIfEmpty(key, r)
	}
}

// Gone records that the API server said the Foo is gone, until its deletion reaches
// the cache and Forget.
func (w *Tracker) Gone(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(key, uid).gone = true
}

// IsGone tells whether the API server said the Foo is gone.
func (w *Tracker) IsGone(key cache.ObjectName, uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	return r != nil && r.uid == uid && r.gone
}

// Forget drops the record of a Foo that is gone; an empty uid matches any.
func (w *Tracker) Forget(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.writes[key]; r != nil && (uid == "" || r.uid == uid) {
		delete(w.writes, key)
	}
}

// Len is how many Foos have an entry.
func (w *Tracker) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

// dropIfEmpty deletes an entry that holds nothing more. The caller holds mu.
func (w *Tracker) dropIfEmpty(key cache.ObjectName, r *fooWrites) {
	if r.statusEcho == "" && r.deploymentEcho == "" && r.foo == "" && r.deployment == "" && !r.waiting && !r.syncing &&
		r.refusal == "" && !r.gone {
		delete(w.writes, key)
	}
}

// reached tells whether store has applied resourceVersion rv. A store that cannot tell
// (the AtomicFIFO feature is off) or a resourceVersion that does not compare (not from
// a real API server) counts as reached: mitigation then stands aside, never blocks.
func reached(store ResourceVersionReader, rv string) bool {
	read := store.LastStoreSyncResourceVersion()
	if read == "" {
		return true
	}
	cmp, err := resourceversion.CompareResourceVersion(rv, read)
	return err != nil || cmp <= 0
}

// later tells whether resourceVersion a is newer than b; false when they do not compare.
func later(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && cmp > 0
}

// newer returns the newer of two resourceVersions, b when they do not compare.
func newer(a, b string) string {
	if a == "" {
		return b
	}
	if cmp, err := resourceversion.CompareResourceVersion(a, b); err == nil && cmp > 0 {
		return a
	}
	return b
}
