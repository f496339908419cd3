package writes

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// storeAt is a store that has applied everything up to its resourceVersion.
type storeAt struct{ rv string }

func (s *storeAt) LastStoreSyncResourceVersion() string { return s.rv }

// tracked is a Tracker whose enqueues a test reads back.
type tracked struct {
	*Tracker
	enqueued int
}

func newTracked(foos, deployments *storeAt) *tracked {
	tr := &tracked{}
	tr.Tracker = NewTracker(foos, deployments, func(cache.ObjectName) { tr.enqueued++ })
	return tr
}

// observed gives the tracker an event, and tells whether it enqueued the Foo.
func (tr *tracked) observed(resource string, key cache.ObjectName, uid types.UID, rv string) bool {
	before := tr.enqueued
	tr.Observe(resource, key, uid, rv)
	return tr.enqueued > before
}

// synced ends a sync, and tells whether it enqueued the Foo.
func (tr *tracked) synced(key cache.ObjectName, uid types.UID) bool {
	before := tr.enqueued
	tr.End(key, uid)
	return tr.enqueued > before
}

// caughtUp begins a sync and, if it began, ends it: whether the caches met what was
// expected of them, and if not which is behind.
func (tr *tracked) caughtUp(key cache.ObjectName, uid types.UID) (string, bool) {
	behind, ok := tr.Begin(key, uid)
	if ok {
		tr.End(key, uid)
	}
	return behind, ok
}

func TestWriteTracker(t *testing.T) {
	web := cache.ObjectName{Namespace: "default", Name: "web"}

	t.Run("a Foo the controller never wrote for is caught up", func(t *testing.T) {
		w := newTracked(&storeAt{"5"}, &storeAt{"5"})
		if _, ok := w.caughtUp(web, "uid-1"); !ok {
			t.Error("caughtUp = false, want true")
		}
	})

	t.Run("waits for each resource until its store reaches the write", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		w.ExpectWrite(Foos, web, "uid-1", "12")
		if behind, ok := w.caughtUp(web, "uid-1"); ok || behind != Foos {
			t.Errorf("caughtUp = %q, %v; want foos, false", behind, ok)
		}
		foos.rv = "12"
		if behind, ok := w.caughtUp(web, "uid-1"); ok || behind != Deployments {
			t.Errorf("caughtUp = %q, %v; want deployments, false", behind, ok)
		}
		// A store past the write, as after events for other objects, has it too.
		deployments.rv = "20"
		if behind, ok := w.caughtUp(web, "uid-1"); !ok {
			t.Errorf("caughtUp = %q, false; want true", behind)
		}
		// A sync that found both writes in the caches awaits their echoes no more.
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("keeps the newest write of a resource", func(t *testing.T) {
		deployments := &storeAt{"12"}
		w := newTracked(&storeAt{"1"}, deployments)
		w.ExpectWrite(Deployments, web, "uid-1", "13")
		w.ExpectWrite(Deployments, web, "uid-1", "9") // an answer that arrived late
		if _, ok := w.caughtUp(web, "uid-1"); ok {
			t.Error("caughtUp = true before the store reached 13")
		}
	})

	t.Run("the echo of the status write wakes a skipped sync", func(t *testing.T) {
		foos := &storeAt{"10"}
		w := newTracked(foos, &storeAt{"10"})
		w.ExpectWrite(Foos, web, "uid-1", "12")
		if _, ok := w.caughtUp(web, "uid-1"); ok {
			t.Fatal("caughtUp = true before the echo")
		}
		foos.rv = "12"
		if !w.observed(Foos, web, "uid-1", "12") {
			t.Error("observed(awaited echo) = false, want true: the skipped sync must run")
		}
	})

	t.Run("an echo without a skipped sync wakes nothing", func(t *testing.T) {
		foos := &storeAt{"11"}
		w := newTracked(foos, &storeAt{"11"})
		w.ExpectWrite(Foos, web, "uid-1", "12")
		foos.rv = "12"
		if w.observed(Foos, web, "uid-1", "12") {
			t.Error("observed(own echo) = true, want false: the controller's own")
		}
		// Someone else's change is not the controller's write.
		if !w.observed(Foos, web, "uid-1", "13") {
			t.Error("observed(another write) = false, want true: not the controller's own")
		}
	})

	t.Run("the echo of the Deployment write wakes a skipped sync", func(t *testing.T) {
		deployments := &storeAt{"10"}
		w := newTracked(&storeAt{"10"}, deployments)
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		if behind, ok := w.caughtUp(web, "uid-1"); ok || behind != Deployments {
			t.Fatalf("caughtUp = %q, %v before the echo; want deployments, false", behind, ok)
		}
		deployments.rv = "11"
		if !w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(awaited echo) = false, want true: the skipped sync must run")
		}
		// The Foo's own events are not the Deployment's.
		w.ExpectWrite(Deployments, web, "uid-1", "13")
		if !w.observed(Foos, web, "uid-1", "13") {
			t.Error("observed(a Foo event at the Deployment write's version) = false, want true: not the controller's own")
		}
	})

	// With no sync after them, the echoes alone must leave nothing behind: at a cold
	// start no other event may ever come for the Foo.
	t.Run("echoes without a sync after them leave no entry", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		w.ExpectWrite(Foos, web, "uid-1", "12")
		foos.rv, deployments.rv = "12", "11"
		if w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(Deployment echo) = true, want false: the controller's own")
		}
		if w.observed(Foos, web, "uid-1", "12") {
			t.Error("observed(status echo) = true, want false: the controller's own")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	// A watch that broke and relisted reports only the newest state: the echo of the
	// write never comes, and the entry must not wait for it for ever.
	t.Run("an event of a later change passes an echo that never came", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		w.ExpectWrite(Foos, web, "uid-1", "12")
		foos.rv, deployments.rv = "14", "15"
		if !w.observed(Deployments, web, "uid-1", "15") {
			t.Error("observed(later Deployment change) = false, want true: not the controller's own")
		}
		if !w.observed(Foos, web, "uid-1", "14") {
			t.Error("observed(later Foo change) = false, want true: not the controller's own")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("an event older than the write leaves its echo to come", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.ExpectWrite(Deployments, web, "uid-1", "13")
		if !w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(older change) = false, want true: not the controller's own")
		}
		if w.observed(Deployments, web, "uid-1", "13") {
			t.Error("observed(echo after an older change) = true, want false: the controller's own")
		}
	})

	// The informer applies a write's event to its cache, then hands it to the
	// handlers; the writer may record the write before, between or after the two.
	t.Run("an echo applied before the write was recorded is still the controller's own", func(t *testing.T) {
		deployments := &storeAt{"10"}
		w := newTracked(&storeAt{"10"}, deployments)
		deployments.rv = "11"
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		if w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(echo applied before the record) = true, want false: the controller's own")
		}
	})

	t.Run("an echo handled before the write was recorded does not outlive the next sync", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		foos.rv, deployments.rv = "12", "11"
		if !w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(event before any record) = false, want true: not the controller's own")
		}
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		w.ExpectWrite(Foos, web, "uid-1", "12")
		// The handler that saw the event enqueued the Foo: its sync comes next.
		if _, ok := w.caughtUp(web, "uid-1"); !ok {
			t.Error("caughtUp = false, want true")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left after a sync, want 0", n)
		}
	})

	t.Run("versions that do not compare leave the echo to come", func(t *testing.T) {
		w := newTracked(&storeAt{""}, &storeAt{""})
		w.ExpectWrite(Foos, web, "uid-1", "a")
		if !w.observed(Foos, web, "uid-1", "b") {
			t.Error("observed(another version) = false, want true: not the controller's own")
		}
		if w.observed(Foos, web, "uid-1", "a") {
			t.Error("observed(echo) = true, want false: the controller's own")
		}
	})

	t.Run("the echo of a sync's first status write, after its second, is its own", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		w.Begin(web, "uid-1")
		w.ExpectWrite(Foos, web, "uid-1", "11") // the record of the Deployment being created
		w.ExpectWrite(Deployments, web, "uid-1", "12")
		w.ExpectWrite(Foos, web, "uid-1", "13") // the status that records it
		if w.synced(web, "uid-1") {
			t.Error("synced = true, want false: nothing happened but the sync's writes")
		}
		foos.rv, deployments.rv = "13", "12"
		for _, e := range []struct {
			resource, rv string
		}{{Foos, "11"}, {Deployments, "12"}, {Foos, "13"}} {
			if w.observed(e.resource, web, "uid-1", e.rv) {
				t.Errorf("observed(%s at %s) = true, want false: the sync's own", e.resource, e.rv)
			}
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	// The API server sends the answer to a write and its watch event independently:
	// the handler can see the echo before the sync has recorded the write.
	t.Run("echoes that come during the sync that wrote are its own", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		w.Begin(web, "uid-1")
		deployments.rv = "11"
		if w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(Deployment echo before the record) = true, want it held")
		}
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		foos.rv = "12"
		if w.observed(Foos, web, "uid-1", "12") {
			t.Error("observed(status echo before the record) = true, want it held")
		}
		w.ExpectWrite(Foos, web, "uid-1", "12")
		if w.synced(web, "uid-1") {
			t.Error("synced = true, want false: every held event was the sync's own echo")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("another change held during a sync brings the Foo back", func(t *testing.T) {
		foos, deployments := &storeAt{"10"}, &storeAt{"10"}
		w := newTracked(foos, deployments)
		w.Begin(web, "uid-1")
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		foos.rv = "12" // someone changed the Foo's spec: the status write gives up
		if w.observed(Foos, web, "uid-1", "12") {
			t.Error("observed(spec change during a sync) = true, want it held")
		}
		if !w.synced(web, "uid-1") {
			t.Error("synced = false, want true: the spec change must be synced")
		}
		// Events after the sync are sorted at once.
		deployments.rv = "11"
		if w.observed(Deployments, web, "uid-1", "11") {
			t.Error("observed(echo after the sync) = true, want false")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("a sync whose Foo was deleted after it wrote leaves no entry", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Begin(web, "uid-1")
		w.Forget(web, "uid-1")
		w.ExpectWrite(Foos, web, "uid-1", "11") // its echo will find no Foo in the cache
		if w.synced(web, "uid-1") {
			t.Error("synced = true for a Foo that is gone, want false")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("the end of a sync of an earlier Foo of the same name ends no other's", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Begin(web, "uid-2")
		if w.synced(web, "uid-1") {
			t.Error("synced(uid-1) = true, want false")
		}
		if w.observed(Foos, web, "uid-2", "11") {
			t.Error("observed(uid-2's event after uid-1's sync ended) = true, want it held for uid-2's sync")
		}
		if !w.synced(web, "uid-2") {
			t.Error("synced(uid-2) = false, want true: its held event is someone else's change")
		}
	})

	t.Run("a sync whose Foo was deleted meanwhile ends with nothing to do", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Begin(web, "uid-1")
		w.observed(Foos, web, "uid-1", "11")
		w.Forget(web, "uid-1")
		if w.synced(web, "uid-1") {
			t.Error("synced = true for a Foo that is gone, want false")
		}
		w.Begin(web, "uid-2") // created again under the same name
		if !w.observed(Foos, web, "uid-1", "12") {
			t.Error("observed(the first Foo's event during the second's sync) = false, want true")
		}
		if w.synced(web, "uid-1") {
			t.Error("synced(the first Foo) = true, want false")
		}
		if w.synced(web, "uid-2") {
			t.Error("synced(the second Foo, nothing held) = true, want false")
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries left, want 0", n)
		}
	})

	t.Run("a Foo recreated under the same name starts afresh", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.ExpectWrite(Foos, web, "uid-1", "12")
		if !w.observed(Foos, web, "uid-2", "12") {
			t.Error("observed(other UID) = false, want true: not the controller's own")
		}
		w.Forget(web, "uid-2") // the delete of another Foo leaves this one's entry
		if n := w.Len(); n != 1 {
			t.Errorf("%d entries after forgetting another UID, want 1", n)
		}
		w.ExpectWrite(Deployments, web, "uid-2", "13")
		if !w.observed(Foos, web, "uid-1", "12") {
			t.Error("the entry of uid-1 survived a write for uid-2")
		}
		w.Forget(web, "")
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries after forget, want 0", n)
		}
	})

	// The informer relisted after the Foo was deleted and created again: no delete
	// event forgot the first Foo's writes, and the events of those writes enqueue the
	// first Foo, not this one.
	t.Run("a sync of a Foo recreated under the same name waits for none of its predecessor's writes", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.ExpectWrite(Deployments, web, "uid-1", "11")
		w.ExpectWrite(Foos, web, "uid-1", "12")
		if behind, ok := w.caughtUp(web, "uid-2"); !ok {
			t.Errorf("caughtUp(uid-2) = %q, false; want true", behind)
		}
		if n := w.Len(); n != 0 {
			t.Errorf("%d entries after a sync of uid-2, want 0", n)
		}
	})

	t.Run("stands aside when the store cannot tell", func(t *testing.T) {
		// "" is what client-go's stores answer with the AtomicFIFO feature off, and
		// a version that does not parse is not from a real API server.
		for _, store := range []string{"", "not-a-number"} {
			w := newTracked(&storeAt{store}, &storeAt{store})
			w.ExpectWrite(Foos, web, "uid-1", "12")
			if _, ok := w.caughtUp(web, "uid-1"); !ok {
				t.Errorf("store at %q: caughtUp = false, want true", store)
			}
		}
	})
}

func TestRefusalsAndDeletions(t *testing.T) {
	web := cache.ObjectName{Namespace: "default", Name: "web"}

	t.Run("a refusal is new once per cause until a write goes through", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		for i, c := range []struct {
			cause string
			want  bool
		}{{"a quota", true}, {"a quota", false}, {"a policy", true}, {"a policy", false}} {
			if got := w.Report(web, "uid-1", c.cause); got != c.want {
				t.Errorf("refusal %d (%s): new = %v, want %v", i, c.cause, got, c.want)
			}
		}
		w.Report(web, "uid-1", "")
		if n := w.Len(); n != 0 {
			t.Errorf("%d records after the write went through, want 0", n)
		}
		if !w.Report(web, "uid-1", "a policy") {
			t.Error("the same cause after a write went through is not new")
		}
	})

	t.Run("an expected deletion lasts until the Foo is forgotten, for its UID only", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.ExpectDeletion(web, "uid-1")
		for i := range 2 {
			if behind, ok := w.caughtUp(web, "uid-1"); ok || behind != Foos {
				t.Errorf("check %d: caughtUp = %q, %v; want foos, false", i, behind, ok)
			}
		}
		w.Forget(web, "uid-1")
		if _, ok := w.caughtUp(web, "uid-1"); !ok || w.Len() != 0 {
			t.Errorf("caughtUp = %v and %d records after forget, want true and 0", ok, w.Len())
		}
		w.ExpectDeletion(web, "uid-1")
		if _, ok := w.caughtUp(web, "uid-2"); !ok {
			t.Error("another Foo of the name is expected deleted too")
		}
	})

	t.Run("what a sync learns after its Foo was forgotten ends with the sync", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Begin(web, "uid-1")
		w.Forget(web, "uid-1") // the delete event, mid-sync
		w.Report(web, "uid-1", "a quota")
		w.ExpectDeletion(web, "uid-1")
		w.synced(web, "uid-1")
		if n := w.Len(); n != 0 {
			t.Errorf("%d records after the sync of a forgotten Foo, want 0", n)
		}
	})
}

func TestCreatedUntilRecorded(t *testing.T) {
	web := cache.ObjectName{Namespace: "default", Name: "web"}
	d1 := samplev1alpha1.CreatedDeployment{Name: "web", UID: "d-1"}
	d2 := samplev1alpha1.CreatedDeployment{Name: "web-v2", UID: "d-2"}

	t.Run("created Deployments are told until recorded, then once", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Created(web, "uid-1", d1)
		w.Created(web, "uid-1", d2)
		for i := range 2 {
			// The syncs in between, which the records outlive.
			if _, ok := w.caughtUp(web, "uid-1"); !ok {
				t.Fatalf("sync %d did not begin", i)
			}
			if got := w.Unrecorded(web, "uid-1"); !slices.Equal(got, []samplev1alpha1.CreatedDeployment{d1, d2}) {
				t.Errorf("sync %d: Unrecorded = %v, want %v", i, got, []samplev1alpha1.CreatedDeployment{d1, d2})
			}
		}
		if got := w.Unrecorded(web, "uid-2"); got != nil {
			t.Errorf("another Foo of the name is told the Deployments of the first: %v", got)
		}
		if !w.AnyUnrecorded(web) {
			t.Error("AnyUnrecorded = false before the records were written")
		}
		if got := w.Recorded(web, "uid-1"); !slices.Equal(got, []samplev1alpha1.CreatedDeployment{d1, d2}) {
			t.Errorf("Recorded = %v, want %v", got, []samplev1alpha1.CreatedDeployment{d1, d2})
		}
		if got := w.Recorded(web, "uid-1"); got != nil {
			t.Errorf("Recorded told %v twice", got)
		}
		if w.AnyUnrecorded(web) || w.Len() != 0 {
			t.Errorf("AnyUnrecorded = %v and %d records once recorded, want false and 0", w.AnyUnrecorded(web), w.Len())
		}
	})

	t.Run("a Deployment created again under its name replaces the first", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Created(web, "uid-1", d1)
		again := samplev1alpha1.CreatedDeployment{Name: "web", UID: "d-3"}
		w.Created(web, "uid-1", again)
		if got := w.Unrecorded(web, "uid-1"); !slices.Equal(got, []samplev1alpha1.CreatedDeployment{again}) {
			t.Errorf("Unrecorded = %v, want %v", got, []samplev1alpha1.CreatedDeployment{again})
		}
	})

	t.Run("a Foo recreated under the name starts without them", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Created(web, "uid-1", d1)
		if _, ok := w.caughtUp(web, "uid-2"); !ok {
			t.Fatal("the new Foo's sync did not begin")
		}
		if got := w.Unrecorded(web, "uid-1"); got != nil {
			t.Errorf("the first Foo's creates outlived a sync of the Foo that took its name: %v", got)
		}
	})

	t.Run("a Foo gone from the API server is not told", func(t *testing.T) {
		w := newTracked(&storeAt{"10"}, &storeAt{"10"})
		w.Created(web, "uid-1", d1)
		w.ExpectDeletion(web, "uid-1")
		if got := w.Recorded(web, "uid-1"); got != nil {
			t.Errorf("Recorded told %v of a Foo gone from the API server", got)
		}
		w.Forget(web, "uid-1")
		if n := w.Len(); n != 0 {
			t.Errorf("%d records once forgotten, want 0", n)
		}
	})
}
