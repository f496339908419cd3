//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/kubernetes"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// TestEventStormLeavesOtherNamespacesOnTime runs a controller over every namespace of a
// cluster of its own while 1000 Foos arrive in one namespace at once, whose Events,
// one per Deployment created, come faster than its one Event writer (--workers=4) writes
// them. A Foo created in a quiet namespace meanwhile must have its Event written ahead
// of the storm's queue, not behind it; and no Event of either may be lost.
//
// Nothing else writes in that cluster (no controller manager), so each Foo keeps the
// resourceVersion of its one status write, after which the controller records its
// Event (Deployments first: the statuses come after the Deployments of the Foos
// queued), and each Event that of its creation. Those versions, one etcd's revisions,
// order every write: how many of the storm's Events were written between the quiet
// Foo's status and its Event, against how many were waiting when it came, tells the
// turns apart without a clock.
func TestEventStormLeavesOtherNamespacesOnTime(t *testing.T) {
	t.Parallel()
	const storm, quiet, stormFoos = "storm", "quiet", 1000
	ctx := t.Context()
	cluster := env.StartCluster(t, "cluster-event-storm", localcluster.Options{SkipControllerManager: true, SkipScheduler: true, SkipKwok: true})
	cfg := cluster.RESTConfig()
	cfg.QPS = -1
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{storm, quiet} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.StartControllerWith(t, localcluster.ControllerOptions{Kubeconfig: cluster.KubeconfigPath(), Args: []string{"--workers=4"}})

	create := func(ns, name string) error {
		_, err := sample.SamplecontrollerV1alpha1().Foos(ns).Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name},
		}, metav1.CreateOptions{})
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, stormFoos)
	for w := range 20 {
		wg.Go(func() {
			for i := w; i < stormFoos; i += 20 {
				errs <- create(storm, fmt.Sprintf("gust-%04d", i))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := create(quiet, "calm"); err != nil {
		t.Fatal(err)
	}

	// Every Event written: the storm's and the quiet Foo's.
	var stormEvents, quietEvents []eventsv1.Event
	framework.Eventually(t, 5*timeout, "every Event of both namespaces", func(ctx context.Context) (bool, string) {
		var err error
		if stormEvents, err = createdEvents(ctx, kube, storm); err != nil {
			return false, err.Error()
		}
		if quietEvents, err = createdEvents(ctx, kube, quiet); err != nil {
			return false, err.Error()
		}
		return len(stormEvents) == stormFoos && len(quietEvents) == 1,
			fmt.Sprintf("%d of the storm's %d Events, %d of the quiet namespace's 1", len(stormEvents), stormFoos, len(quietEvents))
	})
	drained := time.Since(start)
	calm, err := sample.SamplecontrollerV1alpha1().Foos(quiet).Get(ctx, "calm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stormFooList, err := sample.SamplecontrollerV1alpha1().Foos(storm).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := func(a, b string) bool {
		cmp, err := resourceversion.CompareResourceVersion(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return cmp < 0
	}
	// Waiting when the quiet Foo's Event was recorded, at its status write: the storm's
	// Events recorded before it, at theirs, less those written before it.
	waiting := 0
	for _, foo := range stormFooList.Items {
		if foo.Status.ObservedGeneration != foo.Generation {
			t.Fatalf("storm Foo %s has no status: its Event was recorded without it", foo.Name)
		}
		if before(foo.ResourceVersion, calm.ResourceVersion) {
			waiting++
		}
	}
	overtaken := 0
	for _, e := range stormEvents {
		switch {
		case before(e.ResourceVersion, calm.ResourceVersion):
			waiting--
		case before(e.ResourceVersion, quietEvents[0].ResourceVersion):
			overtaken++
		}
	}
	fmt.Printf("e2e: event storm: %d Foos in one namespace, all %d Events written %.1fs after they were created; the quiet namespace's Event came with %d of the storm's waiting, %d of them written before it\n",
		stormFoos, len(stormEvents), drained.Seconds(), waiting, overtaken)
	if waiting < 100 {
		t.Fatalf("only %d of the storm's Events were waiting when the quiet Foo's Deployment was created: the storm shows nothing", waiting)
	}
	// A turn each: the storm Events in flight when it was recorded. Behind the storm,
	// it would wait for every one.
	if overtaken*10 > waiting {
		t.Errorf("%d of the %d storm Events waiting were written before the quiet namespace's one: it waited behind the storm", overtaken, waiting)
	}
}

// createdEvents is the controller's Events in ns that report a Deployment created.
func createdEvents(ctx context.Context, kube kubernetes.Interface, ns string) ([]eventsv1.Event, error) {
	list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var created []eventsv1.Event
	for _, e := range list.Items {
		if e.ReportingController == "sample-controller" && e.Reason == "DeploymentCreated" {
			created = append(created, e)
		}
	}
	return created, nil
}
