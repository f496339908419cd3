// Package writes holds the controller's expectations of its informer caches, one
// record per Foo, by name and UID, forgotten in one call when the Foo goes: the
// resourceVersions its caches must reach before the Foo syncs (the controller's own
// last writes, so that it neither decides on a cache older than them, KEP-5647's
// staleness mitigation, nor syncs again on their echoes; and versions the API server
// showed it newer than the cache), the Foo's deletion once the API server said it is
// gone, the refusal last reported to the Foo's author, and the Deployment created for
// it that its status does not record yet.
package writes

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// The resources whose versions a Tracker expects, as Begin names them.
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

// Tracker holds, for each Foo, what the controller expects its caches to show before
// the Foo syncs, in the manner of kube-controller-manager's expectations: a sync
// begins only once they are met (Begin), and the informer event that meets them
// enqueues the Foo (Observe).
//
// The controller's own writes are expected with their echoes (ExpectWrite). A sync
// that read a Foo or a Deployment older than what the controller itself last wrote
// would decide on state it knows to be stale: it would write again what it already
// wrote, or update a Deployment from an old copy and fail on a conflict. And the echo
// of a write carries nothing the sync that wrote it did not know: enqueuing the Foo on
// it would sync it once more for nothing and undo its backoff, so it enqueues the Foo
// only when a sync waits for it. The API server sends the answer to a write and its
// watch event independently, so the echo can reach the informer's handlers before the
// sync that wrote has read the answer and recorded the write: the events of a Foo are
// deferred while a sync of it runs, and sorted when it ends (End).
type Tracker struct {
	foos        ResourceVersionReader
	deployments ResourceVersionReader
	enqueue     func(cache.ObjectName)

	mu     sync.Mutex
	writes map[cache.ObjectName]*fooWrites
}

// fooWrites is what Tracker holds for one Foo.
type fooWrites struct {
	uid types.UID
	// foo and deployment are the newest resourceVersions expected of each cache, until
	// the cache holds them.
	foo, deployment string
	// statusEcho and deploymentEcho are the resourceVersions of the controller's last
	// write of the Foo's status and of its Deployment, until the event of that write,
	// or of a later change, comes, or a sync finds the cache holding it.
	statusEcho, deploymentEcho string
	// waiting is set when a sync did not begin: the next event for the Foo enqueues it.
	waiting bool
	// syncing is set while a sync of the Foo runs; deferred are the events that came
	// meanwhile, sorted when it ends.
	syncing  bool
	deferred []event
	// refusal is the cause of the last refusal of the Foo's Deployment write that the
	// controller reported, until a write goes through: one report per cause, not one
	// per try.
	refusal string
	// gone is set when the API server answered that the Foo is gone (a status write
	// or a read found none, or another Foo under its name) while the cache still has
	// it: a sync on the cache would create a Deployment for a Foo that no longer
	// exists. The informer's delete event, which forgets the record, ends it.
	gone bool
	// created are the Deployments the controller created for the Foo, one per name,
	// until a sync records them in the Foo's status (status.deployments): the status
	// write can come later than the create (Created).
	created []samplev1alpha1.CreatedDeployment
}

// event is an informer event deferred while a sync runs.
type event struct{ resource, rv string }

// NewTracker returns a Tracker that reads how far the caches have come from foos and
// deployments, and enqueues a Foo, by name, with enqueue.
func NewTracker(foos, deployments ResourceVersionReader, enqueue func(cache.ObjectName)) *Tracker {
	return &Tracker{foos: foos, deployments: deployments, enqueue: enqueue, writes: map[cache.ObjectName]*fooWrites{}}
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

// of returns r's expected version, last write and store for resource.
func (w *Tracker) of(r *fooWrites, resource string) (expected, echo *string, store ResourceVersionReader) {
	if resource == Deployments {
		return &r.deployment, &r.deploymentEcho, w.deployments
	}
	return &r.foo, &r.statusEcho, w.foos
}

// ExpectWrite records the controller's own write of resource for the Foo named key
// with UID uid (its status, or its Deployment) at resourceVersion rv: the Foo syncs
// only once the cache of resource holds rv, and the event of rv, the write's echo,
// enqueues it only if a sync waits for it.
func (w *Tracker) ExpectWrite(resource string, key cache.ObjectName, uid types.UID, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	expected, echo, _ := w.of(w.record(key, uid), resource)
	*expected = newer(*expected, rv)
	*echo = rv
}

// Expect records that the API server holds the Foo named key with UID uid, or (for
// resource Deployments) a Deployment it controls, at resourceVersion rv, newer than
// the cache: the Foo syncs only once the cache of resource holds rv, and the event
// that brings rv in enqueues it.
func (w *Tracker) Expect(resource string, key cache.ObjectName, uid types.UID, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.record(key, uid)
	expected, _, _ := w.of(r, resource)
	*expected = newer(*expected, rv)
	r.waiting = true
}

// ExpectDeletion records that the API server said the Foo named key with UID uid is
// gone: it does not sync until its deletion reaches the cache, and Forget.
func (w *Tracker) ExpectDeletion(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(key, uid).gone = true
}

// Begin begins a sync of the Foo named key with UID uid, as the cache has it, if the
// caches meet what is expected of them; until End, the Foo's events are deferred. If they
// do not, no sync begins: it returns the resource that is behind, and the event that
// brings it in enqueues the Foo. The expectations of an earlier Foo of the same name
// are dropped: it is gone, since the cache, which only moves forward, holds another
// under its name, and the events of its writes would not enqueue this one.
func (w *Tracker) Begin(key cache.ObjectName, uid types.UID) (behind string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	if r == nil || r.uid != uid {
		w.writes[key] = &fooWrites{uid: uid, syncing: true}
		return "", true
	}
	switch {
	case r.gone:
		// Its deletion event, which is on its way, forgets the record.
		return Foos, false
	case r.foo != "" && !reached(w.foos, r.foo):
		r.waiting = true
		return Foos, false
	case r.deployment != "" && !reached(w.deployments, r.deployment):
		r.waiting = true
		return Deployments, false
	}
	r.foo, r.deployment, r.waiting = "", "", false
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
	r.syncing = true
	return "", true
}

// End ends the sync that Begin began. It sorts the events deferred meanwhile, and
// enqueues the Foo if one of them was not the echo of the controller's own last write.
func (w *Tracker) End(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	again := false
	if r := w.writes[key]; r != nil && r.uid == uid {
		if r.syncing {
			r.syncing = false
			for _, e := range r.deferred {
				if !w.pass(r, e.resource, e.rv) {
					again = true
				}
			}
			r.deferred = nil
			w.dropIfEmpty(key, r)
		} else {
			// Forgotten meanwhile, for the Foo was deleted, and made again by what the
			// sync recorded after that (a write, a refusal, the Foo gone): no event of
			// the Foo will come to clear it.
			delete(w.writes, key)
		}
	}
	w.mu.Unlock()
	if again {
		w.enqueue(key)
	}
}

// Observe is given each informer event of resource (Foos or Deployments) that
// concerns the Foo named key with UID uid, the Foo itself or the Deployment it
// controls, once the informer's cache holds it at resourceVersion rv. It enqueues the
// Foo unless the event is the echo of the controller's own last write of that
// resource for the Foo and no sync waits for it. An event that comes while a sync of
// the Foo runs is deferred, and End decides on it.
//
// An event of a later change passes the echo, which may never come: a watch that
// broke and relisted reports only the newest state.
func (w *Tracker) Observe(resource string, key cache.ObjectName, uid types.UID, rv string) {
	w.mu.Lock()
	enqueue := true
	if r := w.writes[key]; r != nil && r.uid == uid {
		if r.syncing {
			r.deferred = append(r.deferred, event{resource: resource, rv: rv})
			enqueue = false
		} else {
			own := w.pass(r, resource, rv)
			enqueue = !own || r.waiting
			r.waiting = false
			w.dropIfEmpty(key, r)
		}
	}
	w.mu.Unlock()
	if enqueue {
		w.enqueue(key)
	}
}

// pass applies an event of resource at rv, which the cache holds, to r, and tells
// whether it is the echo of the last write of that resource, or for the Foo, of a
// state before it. The caller holds mu.
func (w *Tracker) pass(r *fooWrites, resource, rv string) (own bool) {
	expected, echo, store := w.of(r, resource)
	switch {
	case *echo == "":
	case *echo == rv:
		own = true
		*echo = ""
	case later(rv, *echo):
		*echo = ""
	case resource == Foos && later(*echo, rv):
		// Older than the last status write, which was conditional on the Foo that
		// its sync had read or written before (a sync can write the status twice):
		// nothing that sync did not know. A status write that lost to a new spec is
		// given up, not recorded. Not so for Deployments: the Foo's Deployments are
		// several objects.
		own = true
	}
	// The cache holds this event: if it holds what was expected, the next sync need
	// not check.
	if *expected != "" && reached(store, *expected) {
		*expected = ""
	}
	return own
}

// Report records that the controller reported the refusal of the Foo's Deployment
// write for cause, or with an empty cause that a write went through, and returns
// whether the cause differs from the last one reported: a refusal is told once per
// cause, not once per try, and again after a write went through.
func (w *Tracker) Report(key cache.ObjectName, uid types.UID, cause string) (changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cause == "" {
		if r := w.writes[key]; r != nil && r.uid == uid {
			changed = r.refusal != ""
			r.refusal = ""
			w.dropIfEmpty(key, r)
		}
		return changed
	}
	r := w.record(key, uid)
	changed = r.refusal != cause
	r.refusal = cause
	return changed
}

// Created records that the controller created the Deployment d for the Foo named key
// with UID uid. The Foo's status records it once a sync writes it, which may come after
// other Foos' creates (the controller puts the Deployments first): until Recorded,
// Unrecorded tells the syncs in between what the status lacks, so that they neither
// ask the API server whose Deployment it is nor lose it when the Foo's deploymentName
// changes first.
func (w *Tracker) Created(key cache.ObjectName, uid types.UID, d samplev1alpha1.CreatedDeployment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.record(key, uid)
	r.created = slices.DeleteFunc(r.created, func(c samplev1alpha1.CreatedDeployment) bool { return c.Name == d.Name })
	r.created = append(r.created, d)
}

// Unrecorded returns the Deployments that the controller created for the Foo named key
// with UID uid and that its status does not record yet.
func (w *Tracker) Unrecorded(key cache.ObjectName, uid types.UID) []samplev1alpha1.CreatedDeployment {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.writes[key]; r != nil && r.uid == uid {
		return slices.Clone(r.created)
	}
	return nil
}

// AnyUnrecorded tells whether the controller created a Deployment for a Foo named key,
// of any UID, that the Foo's status does not record yet.
func (w *Tracker) AnyUnrecorded(key cache.ObjectName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	return r != nil && len(r.created) > 0
}

// Recorded records that a status write of the Foo carried every record its sync knew,
// and returns the Deployments created for it that this recorded: once each. None for a
// Foo the API server said is gone.
func (w *Tracker) Recorded(key cache.ObjectName, uid types.UID) []samplev1alpha1.CreatedDeployment {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.writes[key]
	if r == nil || r.uid != uid {
		return nil
	}
	recorded := r.created
	if r.gone {
		recorded = nil
	}
	r.created = nil
	w.dropIfEmpty(key, r)
	return recorded
}

// Forget drops the record of a Foo that is gone; an empty uid matches any.
func (w *Tracker) Forget(key cache.ObjectName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.writes[key]; r != nil && (uid == "" || r.uid == uid) {
		delete(w.writes, key)
	}
}

// Len is how many Foos have a record.
func (w *Tracker) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

// dropIfEmpty deletes a record that holds nothing more. The caller holds mu.
func (w *Tracker) dropIfEmpty(key cache.ObjectName, r *fooWrites) {
	if r.statusEcho == "" && r.deploymentEcho == "" && r.foo == "" && r.deployment == "" && !r.waiting && !r.syncing &&
		r.refusal == "" && !r.gone && len(r.created) == 0 {
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
