package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// FuzzUpdateDeployment edits a Foo's Deployment the ways others do (replicas, labels,
// containers in any order, under any name) and checks what UpdateDeployment promises:
// the Foo's fields come back, everything else stays where it was, and a second pass
// has nothing left to change.
func FuzzUpdateDeployment(f *testing.F) {
	f.Add(int32(2), false, int32(2), "nginx=nginx:latest", "team=blue")
	f.Add(int32(0), true, int32(7), "sidecar=envoy,nginx=nginx:1.0", "samplecontroller.k8s.io/foo-uid=someone-else")
	f.Add(int32(3), false, int32(-1), "", "")
	f.Add(int32(1), false, int32(1), "web=nginx:latest,nginx=httpd,nginx=x", "a=b,c=d")
	f.Fuzz(func(t *testing.T, want int32, wantNil bool, have int32, containers, labels string) {
		foo := newFoo("web", ptr.To(want))
		if wantNil {
			foo.Spec.Replicas = nil
		}
		current := NewDeployment(foo)
		current.Spec.Replicas = ptr.To(have)
		current.Spec.Template.Spec.Containers = parseContainers(containers)
		current.Labels = parseLabels(labels)
		before := current.DeepCopy()

		got, _ := UpdateDeployment(foo, current)
		if diff := cmp.Diff(before, current); diff != "" {
			t.Fatalf("UpdateDeployment modified its input (-before +after):\n%s", diff)
		}
		if *got.Spec.Replicas != DesiredReplicas(foo) {
			t.Errorf("replicas = %d, want %d", *got.Spec.Replicas, DesiredReplicas(foo))
		}
		if got.Labels[FooUIDLabel] != string(foo.UID) {
			t.Errorf("label %s = %q, want %q", FooUIDLabel, got.Labels[FooUIDLabel], foo.UID)
		}
		for k, v := range before.Labels {
			if k != FooUIDLabel && got.Labels[k] != v {
				t.Errorf("label %s = %q, want %q kept", k, got.Labels[k], v)
			}
		}
		i := slices.IndexFunc(got.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == ContainerName })
		if i < 0 || got.Spec.Template.Spec.Containers[i].Image != ContainerImage {
			t.Errorf("containers %v: want the first %q to run %q", got.Spec.Template.Spec.Containers, ContainerName, ContainerImage)
		}
		if others, kept := othersThan(before, i), othersThan(got, i); !slices.Equal(others, kept) {
			t.Errorf("other containers %v, want %v kept in place", kept, others)
		}
		if _, changed := UpdateDeployment(foo, got); changed {
			t.Errorf("a second pass over %v still changes it", got.Spec.Template.Spec.Containers)
		}
	})
}

// FuzzCalculateStatus computes a status from any Deployment status, stored status and
// sync outcome, stores it, and computes it again a day later: the same world must give
// the same status, or every sync would write one (a hot loop the apiserver cannot see
// within a second).
func FuzzCalculateStatus(f *testing.F) {
	f.Add(int64(3), false, int64(2), int64(2), int32(3), int32(3), int32(3), int32(3), uint8(0), "")
	f.Add(int64(1), true, int64(0), int64(0), int32(0), int32(0), int32(0), int32(0), uint8(1), "")
	f.Add(int64(5), false, int64(4), int64(3), int32(1), int32(4), int32(2), int32(2), uint8(2), "denied: quote of the request é")
	f.Add(int64(2), false, int64(1), int64(1), int32(1), int32(1), int32(1), int32(1), uint8(3), "etcd is down")
	f.Fuzz(func(t *testing.T, generation int64, noDeployment bool, dGeneration, dObserved int64,
		replicas, updated, ready, available int32, outcome uint8, message string) {
		foo := newFoo("web", ptr.To[int32](3))
		foo.Generation = generation
		var d *appsv1.Deployment
		if !noDeployment {
			d = NewDeployment(foo)
			d.Generation = dGeneration
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: dObserved, Replicas: replicas,
				UpdatedReplicas: updated, ReadyReplicas: ready, AvailableReplicas: available}
		}
		var syncErr error
		switch outcome % 4 {
		case 1:
			syncErr = fmt.Errorf("syncing: %w", ErrNotOwned)
		case 2:
			syncErr = apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New(message))
		case 3:
			syncErr = apierrors.NewServiceUnavailable(message)
		}

		first := CalculateStatus(foo, d, syncErr, now)
		stored := foo.DeepCopy()
		stored.Status = first
		again := CalculateStatus(stored, d, syncErr, metav1.NewTime(now.Add(24*time.Hour)))
		if diff := cmp.Diff(first, again); diff != "" {
			t.Fatalf("the same world computes another status (-first +again):\n%s", diff)
		}
		if syncErr != nil && outcome%4 == 3 {
			return // the stored status is kept
		}
		if first.ObservedGeneration != generation {
			t.Errorf("observedGeneration = %d, want %d", first.ObservedGeneration, generation)
		}
		for _, c := range first.Conditions {
			if len(c.Message) > MaxMessageLength || !utf8.ValidString(c.Message) {
				t.Errorf("condition message of %d bytes, valid UTF-8 %v", len(c.Message), utf8.ValidString(c.Message))
			}
		}
	})
}

// parseContainers reads "name=image,name=image".
func parseContainers(s string) []corev1.Container {
	var containers []corev1.Container
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		name, image, _ := strings.Cut(part, "=")
		containers = append(containers, corev1.Container{Name: name, Image: image})
	}
	return containers
}

// parseLabels reads "key=value,key=value".
func parseLabels(s string) map[string]string {
	labels := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(part, "="); ok {
			labels[k] = v
		}
	}
	return labels
}

// othersThan lists d's containers as name=image, leaving out the one at index skip.
func othersThan(d *appsv1.Deployment, skip int) []string {
	var out []string
	for i, c := range d.Spec.Template.Spec.Containers {
		if i != skip {
			out = append(out, c.Name+"="+c.Image)
		}
	}
	return out
}
