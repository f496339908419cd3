//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// TestShardSelectorFiltersFoos checks the arithmetic of internal/slots against the pinned
// apiserver with ShardedListAndWatch on: a list and a watch with the selector of some
// slots return exactly the Foos of those slots.
func TestShardSelectorFiltersFoos(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.NewNamespace(t)
	foos := env.Sample.SamplecontrollerV1alpha1().Foos(ns)
	space, err := slots.NewSpace(8)
	if err != nil {
		t.Fatal(err)
	}
	chosen := []int{0, 1, 5}
	selector, _, err := space.Selector(chosen)
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) *samplev1alpha1.Foo {
		t.Helper()
		foo, err := foos.Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To[int32](1)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return foo
	}

	want := map[string]bool{}
	for i := range 40 {
		foo := create(fmt.Sprintf("listed-%d", i))
		if slices.Contains(chosen, space.Of(foo.UID)) {
			want[foo.Name] = true
		}
	}
	list, err := foos.List(ctx, metav1.ListOptions{ShardSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, foo := range list.Items {
		got[foo.Name] = true
	}
	if len(got) != len(want) || len(want) == 0 || len(want) == 40 {
		t.Fatalf("the list with %s returned %d Foos, want the %d of slots %v (of 40)", selector, len(got), len(want), chosen)
	}
	for name := range want {
		if !got[name] {
			t.Errorf("the list left out %s, of slot %v", name, chosen)
		}
	}

	w, err := foos.Watch(ctx, metav1.ListOptions{ShardSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Create Foos until at least 20 exist and the last one is in the slots: its event
	// is the last the watch may send, so it ends the wait.
	expected := map[string]bool{}
	var last *samplev1alpha1.Foo
	created := 0
	for ; created < 20 || !slices.Contains(chosen, space.Of(last.UID)); created++ {
		last = create(fmt.Sprintf("watched-%d", created))
		if slices.Contains(chosen, space.Of(last.UID)) {
			expected[last.Name] = true
		}
	}
	for seen := 0; seen < len(expected); {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d of %d events", seen, len(expected))
			}
			foo, isFoo := ev.Object.(*samplev1alpha1.Foo)
			if ev.Type != watch.Added || !isFoo {
				t.Fatalf("unexpected watch event %s %T", ev.Type, ev.Object)
			}
			if !expected[foo.Name] {
				t.Fatalf("the watch sent %s, of slot %d, outside slots %v", foo.Name, space.Of(foo.UID), chosen)
			}
			seen++
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	t.Logf("shard selector of slots %v of 8: listed %d of 40 Foos and watched %d of the next %d, all of theirs and nothing else",
		chosen, len(got), len(expected), created)
}
