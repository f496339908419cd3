//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// fightFor is how long the other actor keeps changing the owned Deployment.
const fightFor = 20 * time.Second

// TestFightingActor has another client change a Foo's Deployment again and again, its
// replicas and its image in turn, each time as soon as the controller has restored it.
// The controller must restore it every time, with one update per change: no storm of
// retries or status writes.
//
// Conflicts are not the controller's to avoid: its patches carry the resourceVersion
// they were decided on, and the Deployment controller writes the Deployment's status
// after every change, racing them. What it must not do is conflict twice on one
// version: a retry on a copy it already knows is stale.
func TestFightingActor(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t)
	c := startProxied(t, ns)
	createFoo(t, ns, "contested", "contested", 2)
	checkInvariants(t, ns, []string{"contested"})
	before := len(c.proxy.Writes())

	deployments := env.Kube.AppsV1().Deployments(ns)
	var restores []time.Duration
	began := time.Now()
	for fight := 0; time.Since(began) < fightFor; fight++ {
		err := retry.RetryOnConflict(conflictBackoff, func() error {
			d, err := deployments.Get(t.Context(), "contested", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fight%2 == 0 {
				d.Spec.Replicas = ptr.To[int32](5)
			} else {
				d.Spec.Template.Spec.Containers[0].Image = "httpd:2"
			}
			_, err = deployments.Update(t.Context(), d, metav1.UpdateOptions{FieldManager: "fighter"})
			return err
		})
		if err != nil {
			t.Fatalf("changing the Deployment: %v", err)
		}
		changed := time.Now()
		framework.Eventually(t, timeout, "the controller to restore the Deployment", func(ctx context.Context) (bool, string) {
			d, err := deployments.Get(ctx, "contested", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			images := containerImages(d)
			want := reconcile.ContainerName + "=" + reconcile.ContainerImage
			return ptr.Deref(d.Spec.Replicas, 1) == 2 && len(images) == 1 && images[0] == want,
				fmt.Sprintf("replicas %d, containers %v", ptr.Deref(d.Spec.Replicas, 1), images)
		})
		restores = append(restores, time.Since(changed))
	}
	fought := time.Since(began)
	settled := checkInvariants(t, ns, []string{"contested"})

	var updates, conflicts, statusWrites, events, other int
	conflicted := map[string]int{} // by the resourceVersion the write was conditional on
	for _, w := range c.proxy.Writes()[before:] {
		switch {
		case w.Resource == "deployments" && w.Method == "PATCH" && w.Code == 200:
			updates++
		case w.Resource == "deployments" && w.Code == 409:
			conflicts++
			if conflicted[w.ResourceVersion]++; conflicted[w.ResourceVersion] == 2 {
				t.Errorf("a second conflict on resourceVersion %q: %v", w.ResourceVersion, w)
			}
		case w.Resource == "foos" && w.Subresource == "status":
			statusWrites++
		case w.Resource == "events":
			events++
		case w.Resource != "leases":
			other++
			t.Logf("unexpected write: %v", w)
		}
	}
	slices.Sort(restores)
	fights := len(restores)
	fmt.Printf("faults: fighting actor: %d fights in %.0fs, each restored (median %.2fs, max %.2fs); the controller made %d Deployment updates, %d conflicts, %d status writes, %d events, %d other writes; settled %.1fs after the last fight\n",
		fights, fought.Seconds(), percentile(restores, 0.5).Seconds(), percentile(restores, 1).Seconds(), updates, conflicts, statusWrites, events, other, settled.Seconds())

	// One update restores each change (two at the edges: the fight's first and last
	// can meet a sync already under way).
	if updates > fights+2 {
		t.Errorf("%d Deployment updates for %d changes: more than one per change", updates, fights)
	}
	// Each change moves the Deployment's Pods, and the Foo's status follows their
	// counts: a few writes per change, never a loop.
	if statusWrites > 10*fights {
		t.Errorf("%d status writes for %d changes: a storm", statusWrites, fights)
	}
	if other > 0 {
		t.Errorf("%d writes of something other than the Deployment's spec, the Foo's status and events", other)
	}
	if _, err := deployments.Get(t.Context(), "contested", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("the Deployment is gone")
	}
}
