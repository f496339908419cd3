package fakeapiserver

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

var deployments = appsv1.SchemeGroupVersion.WithResource("deployments")

func deployment(name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
	}
}

func rv(t *testing.T, obj metav1.Object) int64 {
	t.Helper()
	n, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", obj.GetResourceVersion(), err)
	}
	return n
}

func TestServerWrites(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	s := New(client, deployments, "Deployment", WatchFault{})
	api := client.AppsV1().Deployments("ns")

	created, err := api.Create(ctx, deployment("web", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.UID == "" || created.Generation != 1 || created.ResourceVersion == "" {
		t.Errorf("created: UID %q, generation %d, resourceVersion %q; want a UID, 1 and a version", created.UID, created.Generation, created.ResourceVersion)
	}
	if _, err := api.Create(ctx, deployment("web", 1), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}

	scaled := created.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](2)
	updated, err := api.Update(ctx, scaled, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Generation != 2 || rv(t, updated) <= rv(t, created) {
		t.Errorf("after a spec change: generation %d, resourceVersion %s after %s; want 2 and a later one", updated.Generation, updated.ResourceVersion, created.ResourceVersion)
	}

	status := updated.DeepCopy()
	status.Status.ReadyReplicas = 2
	if after, err := api.UpdateStatus(ctx, status, metav1.UpdateOptions{}); err != nil || after.Generation != 2 {
		t.Errorf("a status write: %v, generation %d; want no error and generation still 2", err, after.Generation)
	}

	// From the copy of the first write: stale.
	stale := created.DeepCopy()
	stale.Spec.Replicas = ptr.To[int32](5)
	if _, err := api.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("an update from a stale copy: %v, want a conflict", err)
	}
	// Of another object of the same name.
	other := updated.DeepCopy()
	other.UID, other.ResourceVersion = "someone-else", ""
	if _, err := api.Update(ctx, other, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("an update of another object of the name: %v, want a conflict", err)
	}
	if err := api.Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(other.UID)}}); !apierrors.IsConflict(err) {
		t.Errorf("a delete with another UID as precondition: %v, want a conflict", err)
	}
	if _, err := api.Update(ctx, deployment("gone", 1), metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("an update of a missing object: %v, want NotFound", err)
	}

	// Writes by others are not counted.
	if err := s.Edit("ns", "web", func(obj runtime.Object) { obj.(*appsv1.Deployment).Spec.Paused = true }); err != nil {
		t.Fatal(err)
	}
	got := s.Counts()
	// Both refused updates were sent from a copy older than the last write: the second
	// carried no resourceVersion at all. The refused delete is a conflict too: a
	// client that repeats it is not quiet.
	want := RequestCounts{Creates: 1, Updates: 2, Conflicts: 3, NotFound: 1, StaleConflicts: 2}
	if got != want {
		t.Errorf("counts: %+v, want %+v", got, want)
	}
	if n := len(s.List()); n != 1 {
		t.Errorf("List: %d objects, want 1", n)
	}
}

// TestServerPatches checks that a patch is an update of the stored object: counted as
// one, conditional on a resourceVersion it carries, and leaving what it does not name.
func TestServerPatches(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	s := New(client, deployments, "Deployment", WatchFault{})
	api := client.AppsV1().Deployments("ns")
	d := deployment("web", 1)
	d.Annotations = map[string]string{"keep": "me"}
	created, err := api.Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string) (*appsv1.Deployment, error) {
		return api.Patch(ctx, "web", types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
	}

	scaled, err := patch(`{"metadata":{"resourceVersion":"` + created.ResourceVersion + `"},"spec":{"replicas":3}}`)
	if err != nil {
		t.Fatal(err)
	}
	if *scaled.Spec.Replicas != 3 || scaled.Annotations["keep"] != "me" || scaled.Generation != 2 || rv(t, scaled) <= rv(t, created) {
		t.Errorf("patched: replicas %d, annotations %v, generation %d, resourceVersion %s; want 3, kept, 2 and later than %s",
			*scaled.Spec.Replicas, scaled.Annotations, scaled.Generation, scaled.ResourceVersion, created.ResourceVersion)
	}
	if _, err := patch(`{"metadata":{"resourceVersion":"` + created.ResourceVersion + `"},"spec":{"replicas":5}}`); !apierrors.IsConflict(err) {
		t.Errorf("a patch conditional on a stale version: %v, want a conflict", err)
	}
	if _, err := patch(`{"spec":{"paused":true}}`); err != nil {
		t.Errorf("an unconditional patch: %v", err)
	}
	if _, err := api.Patch(ctx, "gone", types.StrategicMergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a patch of a missing object: %v, want NotFound", err)
	}
	want := RequestCounts{Creates: 1, Updates: 2, Conflicts: 1, NotFound: 1, StaleConflicts: 1}
	if got := s.Counts(); got != want {
		t.Errorf("counts: %+v, want %+v", got, want)
	}
}

// TestVersionedPatches checks Versioned's patches: conditional on a resourceVersion
// they carry, and given a new one.
func TestVersionedPatches(t *testing.T) {
	ctx := context.Background()
	d := deployment("web", 1)
	d.ResourceVersion = "1"
	client := fake.NewClientset(d)
	Versioned(client, deployments)
	api := client.AppsV1().Deployments("ns")
	if _, err := api.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"metadata":{"resourceVersion":"0"},"spec":{"replicas":2}}`), metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("a patch conditional on another version: %v, want a conflict", err)
	}
	patched, err := api.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"metadata":{"resourceVersion":"1"},"spec":{"replicas":2}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *patched.Spec.Replicas != 2 || patched.ResourceVersion == "1" {
		t.Errorf("patched: replicas %d, resourceVersion %s; want 2 and a new one", *patched.Spec.Replicas, patched.ResourceVersion)
	}
}

func TestServerWatch(t *testing.T) {
	ctx := context.Background()

	t.Run("a delete event carries the deletion's resourceVersion", func(t *testing.T) {
		client := fake.NewClientset()
		s := New(client, deployments, "Deployment", WatchFault{})
		created, err := s.Create(deployment("web", 1))
		if err != nil {
			t.Fatal(err)
		}
		w, err := client.AppsV1().Deployments("ns").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if err := s.Remove("ns", "web", nil); err != nil {
			t.Fatal(err)
		}
		e := next(t, w)
		if e.Type != watch.Deleted || rv(t, e.Object.(metav1.Object)) <= rv(t, created.(metav1.Object)) {
			t.Errorf("got %s at %s, want Deleted after %s", e.Type, e.Object.(metav1.Object).GetResourceVersion(), created.(metav1.Object).GetResourceVersion())
		}
	})

	t.Run("a lagging watch delivers late, and a coalescing one only the last of a run", func(t *testing.T) {
		const lag = 200 * time.Millisecond
		client := fake.NewClientset()
		s := New(client, deployments, "Deployment", WatchFault{Lag: lag, Coalesce: true})
		created, err := s.Create(deployment("web", 1))
		if err != nil {
			t.Fatal(err)
		}
		uid := created.(metav1.Object).GetUID()
		w, err := client.AppsV1().Deployments("ns").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		start := time.Now()
		if err := s.EditStatusInARow("ns", "web", uid, 3, func(i int, obj runtime.Object) {
			obj.(*appsv1.Deployment).Status.ReadyReplicas = int32(i + 1)
		}); err != nil {
			t.Fatal(err)
		}
		e := next(t, w)
		if waited := time.Since(start); waited < lag {
			t.Errorf("the first event came after %v, want at least %v", waited, lag)
		}
		if got := e.Object.(*appsv1.Deployment).Status.ReadyReplicas; got != 3 {
			t.Errorf("the first event shows %d ready replicas, want the last of the run, 3", got)
		}
		if s.Dropped() != 2 {
			t.Errorf("%d events dropped, want 2", s.Dropped())
		}
	})
}

func TestVersioned(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	Versioned(client, deployments)
	opened := WatchesOpened(client, "deployments")
	api := client.AppsV1().Deployments("ns")
	created, err := api.Create(ctx, deployment("web", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updated, err := api.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil || rv(t, updated) <= rv(t, created) {
		t.Fatalf("update: %v; want a resourceVersion after %s", err, created.ResourceVersion)
	}
	if _, err := api.Update(ctx, created, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("an update from a stale copy: %v, want a conflict", err)
	}
	w, err := api.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case <-opened:
	case <-time.After(5 * time.Second):
		t.Error("no signal that the watch opened")
	}
}

// next returns the watch's next event after those that list what was stored when it
// opened.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			if e.Type != watch.Added {
				return e
			}
		case <-timeout:
			t.Fatal("no event within 5s")
		}
	}
}

// TestWatchesCarryCopies edits what each watch delivers, as an informer's transform
// may, and checks that the fake's stored objects stay as they were: both the objects a
// watch delivers as it opens and those changed after.
func TestWatchesCarryCopies(t *testing.T) {
	ctx := context.Background()
	for name, install := range map[string]func(*fake.Clientset){
		"CopiedWatches": func(c *fake.Clientset) { CopiedWatches(c) },
		"WatchesOpened": func(c *fake.Clientset) { WatchesOpened(c, "deployments") },
		"New":           func(c *fake.Clientset) { New(c, deployments, "Deployment", WatchFault{}) },
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(deployment("stored", 1))
			install(client)
			api := client.AppsV1().Deployments("ns")
			w, err := api.Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if err := client.Tracker().Add(deployment("added", 1)); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				var e watch.Event
				select {
				case e = <-w.ResultChan():
				case <-time.After(5 * time.Second):
					t.Fatal("no event")
				}
				delivered := e.Object.(*appsv1.Deployment)
				delivered.Spec.Replicas = ptr.To[int32](7)
				got, err := api.Get(ctx, delivered.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if *got.Spec.Replicas != 1 {
					t.Errorf("%s: editing the %s event's object made the stored one's replicas %d, want 1", delivered.Name, e.Type, *got.Spec.Replicas)
				}
			}
		})
	}
}

// A watch stopped while an event waits for its receiver ends its goroutine, and closes
// its channel, without the event being taken.
func TestStoppedWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset(deployment("stored", 1))
		CopiedWatches(client)
		w, err := client.AppsV1().Deployments("ns").Watch(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the stored object's event waits to be received
		w.Stop()
		synctest.Wait()
		select {
		case e, ok := <-w.ResultChan():
			if ok {
				t.Errorf("after Stop, the watch still delivered %s %s", e.Type, e.Object.(metav1.Object).GetName())
			}
		default:
			t.Error("after Stop, the watch's channel is still open")
		}
	})
}
