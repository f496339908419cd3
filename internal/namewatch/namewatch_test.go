package namewatch

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
)

// woken records the waiters woken, in order.
type woken struct {
	mu      sync.Mutex
	waiters []cache.ObjectName
	ch      chan cache.ObjectName
}

func newWoken() *woken { return &woken{ch: make(chan cache.ObjectName, 10)} }

func (w *woken) wake(waiter cache.ObjectName) {
	w.mu.Lock()
	w.waiters = append(w.waiters, waiter)
	w.mu.Unlock()
	w.ch <- waiter
}

// next waits for the next waiter woken, or fails after a few seconds.
func (w *woken) next(t *testing.T, what string) cache.ObjectName {
	t.Helper()
	select {
	case waiter := <-w.ch:
		return waiter
	case <-time.After(5 * time.Second):
		t.Fatalf("no waiter woken: %s", what)
		return cache.ObjectName{}
	}
}

// none checks that no waiter is woken for a while.
func (w *woken) none(t *testing.T, what string) {
	t.Helper()
	select {
	case waiter := <-w.ch:
		t.Errorf("%s woken: %s", waiter, what)
	case <-time.After(300 * time.Millisecond):
	}
}

// watchedClient returns a fake clientset holding objects, and a channel that receives
// once each watch is open. A fake's watch carries only the changes made after it
// opened, where a real apiserver's carries those since the list it follows: a test
// that changes things under a watch waits for it to open first.
func watchedClient(objects ...runtime.Object) (*fake.Clientset, <-chan struct{}) {
	client := fake.NewClientset(objects...)
	return client, fakeapiserver.WatchesOpened(client, "*")
}

// open waits for a watch to open, or fails after a few seconds.
func open(t *testing.T, opened <-chan struct{}) {
	t.Helper()
	select {
	case <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("no watch opened")
	}
}

func deployment(name string, uid types.UID) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid}}
}

func TestWatcher(t *testing.T) {
	foo := cache.ObjectName{Namespace: "ns", Name: "web"}
	web := cache.ObjectName{Namespace: "ns", Name: "web"}

	t.Run("wakes the waiter when the Deployment it saw is deleted, not when it changes", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		client, opened := watchedClient(deployment("web", "old"), deployment("other", "o"))
		w := newWoken()
		watcher := New(ctx, client, 10, w.wake)
		if !watcher.Wait(foo, web, "old") {
			t.Fatal("Wait refused the first name")
		}
		open(t, opened)
		w.none(t, "the Deployment it saw is still there")
		changed := deployment("web", "old")
		changed.Labels = map[string]string{"touched": "yes"}
		if _, err := client.AppsV1().Deployments("ns").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Another Deployment changing is no news either (a fake ignores the field
		// selector).
		if err := client.AppsV1().Deployments("ns").Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		w.none(t, "the Deployment it saw was only changed")
		if err := client.AppsV1().Deployments("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := w.next(t, "the Deployment was deleted"); got != foo {
			t.Errorf("woke %v, want %v", got, foo)
		}
	})

	t.Run("wakes the waiter when the name was freed before the watch began", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w := newWoken()
		watcher := New(ctx, fake.NewClientset(), 10, w.wake)
		watcher.Wait(foo, web, "old")
		w.next(t, "nothing under the name")
	})

	t.Run("wakes the waiter when another Deployment took the name", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w := newWoken()
		watcher := New(ctx, fake.NewClientset(deployment("web", "new")), 10, w.wake)
		watcher.Wait(foo, web, "old")
		w.next(t, "another Deployment under the name")
	})

	t.Run("wakes a waiter that joins a watch after the change it waits for", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		client, opened := watchedClient(deployment("web", "old"))
		w := newWoken()
		watcher := New(ctx, client, 10, w.wake)
		watcher.Wait(foo, web, "old")
		open(t, opened)
		if err := client.AppsV1().Deployments("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		w.next(t, "the Deployment was deleted")
		// Another Foo saw the Deployment just before it went, and joins the watch now.
		late := cache.ObjectName{Namespace: "ns", Name: "web-late"}
		watcher.Wait(late, web, "old")
		// The first waiter, still waiting, may be woken again too.
		for w.next(t, "a late waiter for a Deployment already gone") != late {
		}
	})

	t.Run("watches each name once, while anyone waits, up to the limit", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		client := fake.NewClientset(deployment("web", "old"), deployment("api", "a"))
		w := newWoken()
		watcher := New(ctx, client, 1, w.wake)
		other := cache.ObjectName{Namespace: "ns", Name: "web-copy"}
		if !watcher.Wait(foo, web, "old") || !watcher.Wait(other, web, "old") {
			t.Fatal("Wait refused a name already watched")
		}
		if watcher.Watched() != 1 {
			t.Errorf("%d names watched, want 1", watcher.Watched())
		}
		api := cache.ObjectName{Namespace: "ns", Name: "api"}
		if watcher.Wait(cache.ObjectName{Namespace: "ns", Name: "api-foo"}, api, "a") {
			t.Error("Wait took a second name beyond the limit of one")
		}
		watcher.Done(foo)
		if watcher.Watched() != 1 {
			t.Errorf("%d names watched while one waiter is left, want 1", watcher.Watched())
		}
		watcher.Done(other)
		if watcher.Watched() != 0 {
			t.Errorf("%d names watched once nobody waits, want 0", watcher.Watched())
		}
		if !watcher.Wait(cache.ObjectName{Namespace: "ns", Name: "api-foo"}, api, "a") {
			t.Error("Wait refused a name once the limit had room")
		}
		// A waiter that moves to another name leaves the first.
		watcher.Wait(cache.ObjectName{Namespace: "ns", Name: "api-foo"}, web, "old")
		if watcher.Watched() != 1 {
			t.Errorf("%d names watched after the only waiter moved, want 1", watcher.Watched())
		}
	})
}
