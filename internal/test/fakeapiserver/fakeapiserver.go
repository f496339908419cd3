// Package fakeapiserver makes client-go's fake clientsets behave as a real API server
// does where a controller's correctness depends on it: resourceVersions, conflicts,
// generations, delete preconditions and watches that open, lag and coalesce as real
// ones can. It is for tests.
//
// A fake clientset alone gives every write the same empty resourceVersion, accepts an
// update from any stale copy, and opens watches that carry nothing from before they
// opened. Tests of a controller's staleness handling need all three to be real.
package fakeapiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	core "k8s.io/client-go/testing"
)

// Client is what this package needs of a fake clientset; those that client-go and
// client-gen generate have it.
type Client interface {
	PrependReactor(verb, resource string, reaction core.ReactionFunc)
	PrependWatchReactor(resource string, reaction core.WatchReactionFunc)
	Tracker() core.ObjectTracker
}

// resourceVersions numbers the writes of every fake in the process, as etcd numbers
// revisions: one sequence, so that versions compare across resources.
var resourceVersions atomic.Int64

func init() { resourceVersions.Store(1000) }

// NextResourceVersion numbers a write.
func NextResourceVersion() string {
	return strconv.FormatInt(resourceVersions.Add(1), 10)
}

// Versioned makes the fake's creates and updates of resource behave as an API
// server's: every write gets a new resourceVersion, and an update is refused with a
// conflict when its UID is not the stored object's or its resourceVersion is not the
// stored one. Everything else is left to the fake.
func Versioned(client Client, resource schema.GroupVersionResource) {
	client.PrependReactor("create", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		obj := a.(core.CreateAction).GetObject().(metav1.Object)
		obj.SetResourceVersion(NextResourceVersion())
		return false, nil, nil
	})
	client.PrependReactor("update", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		obj := a.(core.UpdateAction).GetObject().(metav1.Object)
		stored, err := client.Tracker().Get(resource, obj.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		if err := precondition(resource, stored.(metav1.Object), obj); err != nil {
			return true, nil, err
		}
		obj.SetResourceVersion(NextResourceVersion())
		return false, nil, nil
	})
	client.PrependReactor("patch", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		p := a.(core.PatchAction)
		stored, err := client.Tracker().Get(resource, p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		patched, err := Patched(stored, p.GetPatchType(), p.GetPatch())
		if err != nil {
			return true, nil, err
		}
		obj := patched.(metav1.Object)
		if err := precondition(resource, stored.(metav1.Object), obj); err != nil {
			return true, nil, err
		}
		obj.SetResourceVersion(NextResourceVersion())
		if err := client.Tracker().Update(resource, patched, p.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, patched, nil
	})
}

// Patched returns a copy of stored with patch applied, as the API server applies it,
// through JSON: a resourceVersion in the patch stays in the result, where an update's
// precondition finds it. Strategic merge patches and JSON merge patches are supported.
func Patched(stored runtime.Object, patchType types.PatchType, patch []byte) (runtime.Object, error) {
	from, err := json.Marshal(stored)
	if err != nil {
		return nil, err
	}
	var to []byte
	switch patchType {
	case types.StrategicMergePatchType:
		to, err = strategicpatch.StrategicMergePatch(from, patch, stored)
	case types.MergePatchType:
		to, err = jsonpatch.MergePatch(from, patch)
	default:
		return nil, fmt.Errorf("fakeapiserver: patch type %s is not supported", patchType)
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	patched := stored.DeepCopyObject()
	// Cleared first: unmarshalling leaves fields the patch removed as they were.
	value := reflect.ValueOf(patched).Elem()
	value.Set(reflect.Zero(value.Type()))
	if err := json.Unmarshal(to, patched); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return patched, nil
}

// precondition refuses an update sent from another object of the same name, or from a
// copy older than the stored one.
func precondition(resource schema.GroupVersionResource, stored, sent metav1.Object) error {
	if uid := stored.GetUID(); uid != sent.GetUID() {
		return apierrors.NewConflict(resource.GroupResource(), sent.GetName(),
			fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", sent.GetUID(), uid))
	}
	if rv := sent.GetResourceVersion(); rv != "" && rv != stored.GetResourceVersion() {
		return apierrors.NewConflict(resource.GroupResource(), sent.GetName(),
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	return nil
}

// WatchesOpened signals on the returned channel each time a watch of resource ("*" for
// any) opens. A fake's watch carries only the changes made after it opened, where a real
// API server's carries those since the list it follows: a test that changes objects
// under an informer waits for its watch to open, not only for its cache to sync.
func WatchesOpened(client Client, resource string) <-chan struct{} {
	opened := make(chan struct{}, 100)
	client.PrependWatchReactor(resource, func(a core.Action) (bool, watch.Interface, error) {
		w, err := openWatch(client.Tracker(), a)
		if err != nil {
			return true, nil, err
		}
		select {
		case opened <- struct{}{}:
		default:
		}
		return true, w, nil
	})
	return opened
}

// CopiedWatches makes every watch of client carry objects of its own, as a real API
// server's watch does, whose events are decoded afresh for each watcher. A fake's
// tracker sends copies of what changes after a watch opens, but, for the objects it
// delivers as the watch opens (those changed between a list and the watch after it),
// the very objects it stores. An informer transform that edits what it is given, which
// client-go's TransformFunc documentation says is safe, would then edit the tracker's
// objects while the test reads them.
//
// Install it before this package's other watch reactors (New, WatchesOpened), which
// copy too and, prepended later, come first.
func CopiedWatches(client Client) {
	client.PrependWatchReactor("*", func(a core.Action) (bool, watch.Interface, error) {
		w, err := openWatch(client.Tracker(), a)
		return true, w, err
	})
}

// openWatch opens a watch of tracker for a, whose events carry copies.
func openWatch(tracker core.ObjectTracker, a core.Action) (watch.Interface, error) {
	w, err := tracker.Watch(a.GetResource(), a.GetNamespace(), listOptions(a))
	if err != nil {
		return nil, err
	}
	return newCopyingWatch(w), nil
}

func listOptions(a core.Action) metav1.ListOptions {
	if w, ok := a.(core.WatchActionImpl); ok {
		return w.ListOptions
	}
	return metav1.ListOptions{}
}

// WatchFault is how the watches of a Server misbehave.
type WatchFault struct {
	// Lag delays every event.
	Lag time.Duration
	// Coalesce drops an update event when the next event in the stream is of the same
	// object: the informer applies only the last of a run of changes. Nothing else comes
	// in between, so every resourceVersion the informer reaches still describes the API
	// server's state at that version, as a real watch does.
	Coalesce bool
}

// RequestCounts are the write requests a Server received through the clientset.
type RequestCounts struct {
	// Updates count patches too. Conflicts are the updates and deletes refused for a precondition (a
	// resourceVersion or a UID) the stored object does not meet.
	Creates, Updates, Deletes, Conflicts int
	// NotFound are the updates and deletes of an object that no longer exists.
	NotFound int
	// StaleConflicts are the updates refused because they were sent from a copy older
	// than the same client's own last write of that object.
	StaleConflicts int
}

// Server makes a fake clientset's writes of one resource behave as a real API server's
// do, and counts them:
//   - writes are applied one at a time, each with a new resourceVersion from one
//     sequence, so that every watch sees them in resourceVersion order (reactors that
//     number a write before the tracker applies it let concurrent writes reach the
//     watch out of order, and an informer's resourceVersion go backwards);
//   - a create sets the UID and generation 1, a spec change bumps the generation;
//   - an update of a stale copy or of another object of the same name is a conflict,
//     as is a delete whose preconditions do not hold;
//   - a delete event carries the resourceVersion of the deletion, not the object's
//     last one.
//
// Its watches are faulty as its WatchFault says. Writes made with its own methods
// (Create, Edit, Remove: the users and other controllers of a test) are not counted.
type Server struct {
	tracker  core.ObjectTracker
	resource schema.GroupVersionResource
	kind     schema.GroupVersionKind
	fault    WatchFault
	dropped  atomic.Int64
	created  func(runtime.Object)

	mu sync.Mutex
	// deletions holds the resourceVersion of each deletion, by UID, for its event.
	deletions map[types.UID]string
	// written holds the resourceVersion of the client's last write of each object, by
	// namespace/name.
	written  map[string]int64
	requests RequestCounts
}

// New installs a Server for resource, whose objects are of kind, on client.
func New(client Client, resource schema.GroupVersionResource, kind string, fault WatchFault) *Server {
	s := &Server{
		tracker:   client.Tracker(),
		resource:  resource,
		kind:      resource.GroupVersion().WithKind(kind),
		fault:     fault,
		deletions: map[types.UID]string{},
		written:   map[string]int64{},
	}
	client.PrependReactor("create", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		obj, err := s.create(a.(core.CreateAction).GetObject())
		if err == nil {
			s.requests.Creates++
			s.written[objectKey(obj)] = resourceVersionOf(obj)
			if s.created != nil {
				s.created(obj)
			}
		}
		return true, obj, err
	})
	client.PrependReactor("update", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sent := a.(core.UpdateAction).GetObject()
		obj, err := s.update(sent, a.GetSubresource())
		s.count(sent, obj, err)
		return true, obj, err
	})
	// A patch is an update of the stored object with the patch applied, counted as
	// one: a resourceVersion in the patch is its precondition.
	client.PrependReactor("patch", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p := a.(core.PatchAction)
		stored, err := s.tracker.Get(s.resource, p.GetNamespace(), p.GetName())
		if err != nil {
			if apierrors.IsNotFound(err) {
				s.requests.NotFound++
			}
			return true, nil, err
		}
		sent, err := Patched(stored, p.GetPatchType(), p.GetPatch())
		if err != nil {
			return true, nil, err
		}
		obj, err := s.update(sent, a.GetSubresource())
		s.count(sent, obj, err)
		return true, obj, err
	})
	client.PrependReactor("delete", resource.Resource, func(a core.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		d := a.(core.DeleteAction)
		err := s.delete(d.GetNamespace(), d.GetName(), d.GetDeleteOptions().Preconditions)
		switch {
		case apierrors.IsNotFound(err):
			s.requests.NotFound++
		case apierrors.IsConflict(err):
			s.requests.Conflicts++
		case err == nil:
			s.requests.Deletes++
		}
		return true, nil, err
	})
	client.PrependWatchReactor(resource.Resource, func(a core.Action) (bool, watch.Interface, error) {
		source, err := openWatch(s.tracker, a)
		if err != nil {
			return true, nil, err
		}
		return true, newFaultyWatch(s, source), nil
	})
	return s
}

// count counts an update of sent, which stored obj or failed with err. The caller
// holds mu.
func (s *Server) count(sent, obj runtime.Object, err error) {
	switch {
	case apierrors.IsNotFound(err):
		s.requests.NotFound++
	case apierrors.IsConflict(err):
		s.requests.Conflicts++
		if resourceVersionOf(sent) < s.written[objectKey(sent)] {
			s.requests.StaleConflicts++
		}
	case err == nil:
		s.requests.Updates++
		s.written[objectKey(obj)] = resourceVersionOf(obj)
	}
}

// OnCreate has created called with each object created through the clientset, while
// no other write can happen. Call it before the clientset is used.
func (s *Server) OnCreate(created func(runtime.Object)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = created
}

// Counts returns the write requests received through the clientset so far.
func (s *Server) Counts() RequestCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Dropped is the number of events the watches dropped as their fault says.
func (s *Server) Dropped() int64 { return s.dropped.Load() }

// Fault is how the Server's watches misbehave.
func (s *Server) Fault() WatchFault { return s.fault }

// Get returns the stored object.
func (s *Server) Get(namespace, name string) (runtime.Object, error) {
	return s.tracker.Get(s.resource, namespace, name)
}

// List returns every stored object of the resource.
func (s *Server) List() []runtime.Object {
	list, err := s.tracker.List(s.resource, s.kind, metav1.NamespaceAll)
	if err != nil {
		return nil
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	return objs
}

// Create is a create by someone other than the client, which is not counted.
func (s *Server) Create(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.create(obj)
}

// Edit is a read-modify-write of an object by someone other than the client, which
// never conflicts.
func (s *Server) Edit(namespace, name string, mutate func(runtime.Object)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := s.tracker.Get(s.resource, namespace, name)
	if err != nil {
		return err
	}
	obj := stored.DeepCopyObject()
	mutate(obj)
	_, err = s.update(obj, "")
	return err
}

// EditStatusInARow writes n changes of the status of the object with UID uid, with no
// other write in between, as a controller that writes each step of a rollout does.
func (s *Server) EditStatusInARow(namespace, name string, uid types.UID, n int, mutate func(int, runtime.Object)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		stored, err := s.tracker.Get(s.resource, namespace, name)
		if err != nil {
			return err
		}
		if m, _ := meta.Accessor(stored); m.GetUID() != uid {
			return nil
		}
		obj := stored.DeepCopyObject()
		mutate(i, obj)
		if _, err := s.update(obj, "status"); err != nil {
			return err
		}
	}
	return nil
}

// Remove is a deletion by someone other than the client.
func (s *Server) Remove(namespace, name string, preconditions *metav1.Preconditions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delete(namespace, name, preconditions)
}

// create stores a new object. The caller holds mu.
func (s *Server) create(obj runtime.Object) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if _, err := s.tracker.Get(s.resource, m.GetNamespace(), m.GetName()); err == nil {
		return nil, apierrors.NewAlreadyExists(s.resource.GroupResource(), m.GetName())
	}
	if m.GetUID() == "" {
		m.SetUID(uuid.NewUUID())
	}
	m.SetGeneration(1)
	m.SetResourceVersion(NextResourceVersion())
	// Add, not Create: the fake's field manager knows no schema for custom resources.
	if err := s.tracker.Add(obj); err != nil {
		return nil, err
	}
	return s.tracker.Get(s.resource, m.GetNamespace(), m.GetName())
}

// update stores a new state of an object, of its status when subresource is "status".
// The caller holds mu.
func (s *Server) update(obj runtime.Object, subresource string) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	stored, err := s.tracker.Get(s.resource, m.GetNamespace(), m.GetName())
	if err != nil {
		return nil, err
	}
	current, _ := meta.Accessor(stored)
	if err := precondition(s.resource, current, m); err != nil {
		return nil, err
	}
	m.SetGeneration(current.GetGeneration())
	if subresource == "" && !equality.Semantic.DeepEqual(specOf(obj), specOf(stored)) {
		m.SetGeneration(current.GetGeneration() + 1)
	}
	m.SetResourceVersion(NextResourceVersion())
	if err := s.tracker.Update(s.resource, obj, m.GetNamespace()); err != nil {
		return nil, err
	}
	return s.tracker.Get(s.resource, m.GetNamespace(), m.GetName())
}

// delete removes an object. The caller holds mu.
func (s *Server) delete(namespace, name string, preconditions *metav1.Preconditions) error {
	stored, err := s.tracker.Get(s.resource, namespace, name)
	if err != nil {
		return err
	}
	current, _ := meta.Accessor(stored)
	if p := preconditions; p != nil && (p.UID != nil && *p.UID != current.GetUID() ||
		p.ResourceVersion != nil && *p.ResourceVersion != current.GetResourceVersion()) {
		return apierrors.NewConflict(s.resource.GroupResource(), name, errors.New("Precondition failed"))
	}
	s.deletions[current.GetUID()] = NextResourceVersion()
	return s.tracker.Delete(s.resource, namespace, name)
}

// deletionEvent gives a delete event the resourceVersion of the deletion.
func (s *Server) deletionEvent(e watch.Event) watch.Event {
	if e.Type != watch.Deleted {
		return e
	}
	m, err := meta.Accessor(e.Object)
	if err != nil {
		return e
	}
	s.mu.Lock()
	rv, ok := s.deletions[m.GetUID()]
	s.mu.Unlock()
	if ok {
		m.SetResourceVersion(rv) // the event's own copy (openWatch)
	}
	return e
}

func resourceVersionOf(obj runtime.Object) int64 {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return rv
}

func objectKey(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// specOf returns an object's spec, as the API server compares it to bump the
// generation.
func specOf(obj runtime.Object) any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil
	}
	return u["spec"]
}
