package reconcile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestNewDeployment(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](3))
	want := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "web",
			Namespace: "default",
			Labels:    map[string]string{"samplecontroller.k8s.io/foo-uid": "web-uid"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "samplecontroller.k8s.io/v1alpha1",
				Kind:               "Foo",
				Name:               "web",
				UID:                "web-uid",
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"samplecontroller.k8s.io/foo-uid": "web-uid"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"samplecontroller.k8s.io/foo-uid": "web-uid"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
	if diff := cmp.Diff(want, NewDeployment(foo)); diff != "" {
		t.Errorf("NewDeployment() mismatch (-want +got):\n%s", diff)
	}

	t.Run("replicas nil defaults to 1", func(t *testing.T) {
		if got := *NewDeployment(newFoo("web", nil)).Spec.Replicas; got != 1 {
			t.Errorf("replicas = %d, want 1", got)
		}
	})
	t.Run("replicas zero is kept", func(t *testing.T) {
		if got := *NewDeployment(newFoo("web", ptr.To[int32](0))).Spec.Replicas; got != 0 {
			t.Errorf("replicas = %d, want 0", got)
		}
	})
}

func TestUpdateDeployment(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](2))
	tests := []struct {
		name        string
		mutate      func(d *appsv1.Deployment)
		want        func(d *appsv1.Deployment) // applied to the input to get the expected output
		wantChanged bool
	}{{
		name:   "matching deployment is left alone",
		mutate: func(d *appsv1.Deployment) {},
	}, {
		name: "apiserver defaults and foreign fields are left alone",
		mutate: func(d *appsv1.Deployment) {
			d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "3"}
			d.Labels["team"] = "blue"
			d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
			d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T00:00:00Z"}
			d.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy"})
		},
	}, {
		name:        "replicas drift is reverted",
		mutate:      func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) },
		want:        func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](2) },
		wantChanged: true,
	}, {
		name:        "nil replicas are set",
		mutate:      func(d *appsv1.Deployment) { d.Spec.Replicas = nil },
		want:        func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](2) },
		wantChanged: true,
	}, {
		name: "image drift is reverted and the restart annotation kept",
		mutate: func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T00:00:00Z"}
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0"
		},
		want:        func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:latest" },
		wantChanged: true,
	}, {
		// A renamed container is no longer the Foo's: it stays, and the Foo's comes back.
		name:   "a renamed container is left alone and the foo's is added back",
		mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "web" },
		want: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "nginx", Image: "nginx:latest"})
		},
		wantChanged: true,
	}, {
		name: "a container inserted before the foo's is left alone",
		mutate: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = append([]corev1.Container{{Name: "sidecar", Image: "envoy"}}, d.Spec.Template.Spec.Containers...)
		},
	}, {
		name: "image drift of the foo's container is reverted wherever it stands",
		mutate: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "sidecar", Image: "envoy"}, {Name: "nginx", Image: "nginx:1.0"}}
		},
		want:        func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[1].Image = "nginx:latest" },
		wantChanged: true,
	}, {
		name:   "missing container is added",
		mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers = nil },
		want: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}
		},
		wantChanged: true,
	}, {
		name: "label drift is reverted and other labels kept",
		mutate: func(d *appsv1.Deployment) {
			d.Labels = map[string]string{"team": "blue", FooUIDLabel: "someone-else"}
		},
		want:        func(d *appsv1.Deployment) { d.Labels[FooUIDLabel] = "web-uid" },
		wantChanged: true,
	}, {
		name:        "missing labels are added",
		mutate:      func(d *appsv1.Deployment) { d.Labels = nil },
		want:        func(d *appsv1.Deployment) { d.Labels = map[string]string{FooUIDLabel: "web-uid"} },
		wantChanged: true,
	}, {
		name: "a classic controller's selector is kept and its pods are not relabelled",
		mutate: func(d *appsv1.Deployment) {
			classic := map[string]string{"app": "nginx", "controller": "web"}
			d.Labels = nil
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: classic}
			d.Spec.Template.Labels = map[string]string{"app": "nginx", "controller": "web"}
		},
		want:        func(d *appsv1.Deployment) { d.Labels = map[string]string{FooUIDLabel: "web-uid"} },
		wantChanged: true,
	}, {
		name:        "template labels the selector needs are restored",
		mutate:      func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"extra": "x"} },
		want:        func(d *appsv1.Deployment) { d.Spec.Template.Labels[FooUIDLabel] = "web-uid" },
		wantChanged: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			current := NewDeployment(foo)
			tc.mutate(current)
			input := current.DeepCopy()
			want := current.DeepCopy()
			if tc.want != nil {
				tc.want(want)
			}

			got, changed := UpdateDeployment(foo, current)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("UpdateDeployment() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(input, current); diff != "" {
				t.Errorf("UpdateDeployment() modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

// TestDeploymentPatch checks that the patch names only what changed, with the
// resourceVersion it was made from as its precondition.
func TestDeploymentPatch(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](2))
	current := NewDeployment(foo)
	current.ResourceVersion = "41"
	tests := []struct {
		name   string
		mutate func(d *appsv1.Deployment)
		want   string
	}{{
		name:   "nothing changed: the precondition alone",
		mutate: func(*appsv1.Deployment) {},
		want:   `{"metadata":{"resourceVersion":"41"}}`,
	}, {
		name:   "replicas",
		mutate: func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](3) },
		want:   `{"metadata":{"resourceVersion":"41"},"spec":{"replicas":3}}`,
	}, {
		name:   "a label",
		mutate: func(d *appsv1.Deployment) { d.Labels["samplecontroller.k8s.io/slot"] = "4" },
		want:   `{"metadata":{"labels":{"samplecontroller.k8s.io/slot":"4"},"resourceVersion":"41"}}`,
	}, {
		name:   "an image, merged by the container's name",
		mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" },
		want:   `{"metadata":{"resourceVersion":"41"},"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"nginx"}],"containers":[{"image":"nginx:2","name":"nginx"}]}}}}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			updated := current.DeepCopy()
			tt.mutate(updated)
			got, err := DeploymentPatch(current, updated)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("DeploymentPatch() = %s, want %s", got, tt.want)
			}
		})
	}
}
