package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/slots"
	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
)

// TestInformersListWhatTheControllerManages: both informers list in the namespace
// asked for, the Deployments by the controller's labels, and keep only the index
// the controller reads, in either mode.
func TestInformersListWhatTheControllerManages(t *testing.T) {
	space, err := slots.NewSpace(4)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := newSlotWatch(space, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		labels   map[string]string
		slot     *slotWatch
		selector string
	}{
		{"unsharded", nil, nil, reconcile.FooUIDLabel},
		{"a slot", map[string]string{SlotLabel: "1"}, slot, reconcile.FooUIDLabel + "," + SlotLabel + "=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			kubeClient, sampleClient := k8sfake.NewClientset(), fake.NewClientset()
			lists := make(chan k8stesting.ListAction, 2)
			record := func(action k8stesting.Action) (bool, runtime.Object, error) {
				lists <- action.(k8stesting.ListAction)
				return false, nil, nil
			}
			kubeClient.PrependReactor("list", "deployments", record)
			sampleClient.PrependReactor("list", "foos", record)

			cfg := Config{KubeClient: kubeClient, SampleClient: sampleClient, Namespace: "ns", DeploymentLabels: tc.labels}
			if tc.slot != nil {
				cfg.FooListWatch = tc.slot.fooListWatch(sampleClient, "ns")
			}
			informers := newInformers(cfg)
			if got, want := indexNames(informers.deployments), []string{byControllerUID}; !slices.Equal(got, want) {
				t.Errorf("the Deployment informer's indexes are %v, want %v", got, want)
			}
			if got, want := indexNames(informers.foos.Informer()), []string{byDeploymentName}; !slices.Equal(got, want) {
				t.Errorf("the Foo informer's indexes are %v, want %v", got, want)
			}
			informers.start(ctx)
			defer informers.shutdown()
			defer cancel() // before shutdown, which waits for the informers to stop

			seen := map[string]string{}
			for len(seen) < 2 {
				select {
				case list := <-lists:
					if list.GetNamespace() != "ns" {
						t.Errorf("%s listed in namespace %q, want ns", list.GetResource().Resource, list.GetNamespace())
					}
					seen[list.GetResource().Resource] = list.GetListRestrictions().Labels.String()
				case <-ctx.Done():
					t.Fatalf("listed only %v", seen)
				}
			}
			if got, want := seen["deployments"], tc.selector; got != want {
				t.Errorf("Deployments listed by the selector %q, want %q", got, want)
			}
			if got := seen["foos"]; got != "" {
				t.Errorf("Foos listed by the selector %q, want none", got)
			}
		})
	}
}

// indexNames are the names of an informer's indexes, sorted.
func indexNames(informer cache.SharedIndexInformer) []string {
	var names []string
	for name := range informer.GetIndexer().GetIndexers() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
