package main

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2/ktesting"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/slots"
)

// TestSlotScope: a slot's controller acts only on its own Foos, whatever the apiserver
// sends (it ignores shard selectors without ShardedListAndWatch), and labels the
// Deployments it writes with the slot.
func TestSlotScope(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	space, err := slots.NewSpace(4)
	if err != nil {
		t.Fatal(err)
	}
	scope := &slotScope{space: space, slot: 2, value: "2"}
	mine, others := 0, 0
	for range 200 {
		foo := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "f", UID: uuid.NewUUID()}}
		if got, want := scope.owns(ctx, foo), space.Of(foo.UID) == 2; got != want {
			t.Fatalf("owns(Foo of slot %d) = %v", space.Of(foo.UID), got)
		} else if got {
			mine++
		} else {
			others++
		}
	}
	if mine == 0 || others == 0 || !scope.outside.Load() {
		t.Errorf("%d Foos of the slot, %d of others, said so: %v", mine, others, scope.outside.Load())
	}

	d := &appsv1.Deployment{}
	if !scope.label(d) || d.Labels[SlotLabel] != "2" {
		t.Errorf("labels %v after labelling, want %s=2", d.Labels, SlotLabel)
	}
	if scope.label(d) {
		t.Error("labelling a labelled Deployment changed it")
	}
	d.Labels[SlotLabel] = "3"
	if !scope.label(d) || d.Labels[SlotLabel] != "2" {
		t.Errorf("a Deployment labelled for another slot kept %v", d.Labels)
	}
}
