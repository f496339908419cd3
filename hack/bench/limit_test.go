package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	samplescheme "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/scheme"
	"github.com/seed-e6610ed6/sample-controller/pkg/reconcile"
)

// The limit's Event is the one our controller's recorder writes when it has created a
// Deployment, but for its name, times and reporting instance.
func TestCreatedEventIsTheRecorders(t *testing.T) {
	foo := newFoo("a", 1)
	foo.ResourceVersion = "5"
	d := reconcile.NewDeployment(foo)
	d.UID, d.ResourceVersion = "d-uid", "7"

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, samplescheme.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(t.Context().Done())
	defer broadcaster.Shutdown()
	broadcaster.NewRecorder(scheme, "sample-controller").
		Eventf(foo, d, corev1.EventTypeNormal, reconcile.EventDeploymentCreated, "Create", "Created Deployment %q", d.Name)

	var recorded []eventsv1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events(foo.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		recorded = list.Items
		return len(recorded) > 0, nil
	})
	if err != nil {
		t.Fatalf("the recorder wrote no Event: %v", err)
	}

	got := createdEvent(foo, d, time.Now())
	if !strings.HasPrefix(got.Name, "a.") || got.Namespace != foo.Namespace {
		t.Errorf("name %s/%s, want %s/a.<time>", got.Namespace, got.Name, foo.Namespace)
	}
	want := &recorded[0]
	for _, e := range []*eventsv1.Event{got, want} {
		e.TypeMeta, e.ObjectMeta = metav1.TypeMeta{}, metav1.ObjectMeta{}
		e.EventTime, e.ReportingInstance = metav1.MicroTime{}, ""
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("createdEvent =\n%s\nthe recorder's =\n%s", gotJSON, wantJSON)
	}
}
