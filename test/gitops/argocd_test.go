package gitops

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// TestArgoCDHealthCheck runs the Argo CD health check on each moment of a Foo's life and
// on a Foo the controller has not seen yet: Healthy, Progressing or Degraded as kstatus
// reads it, always with a message.
func TestArgoCDHealthCheck(t *testing.T) {
	script, err := ReadHealthCheck(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	moments := lifecycle(t)
	created := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
		"metadata": map[string]any{"name": "web", "namespace": "default", "generation": int64(1)},
		"spec":     map[string]any{"deploymentName": "web"},
	}}
	moments = append(moments, moment{name: "created, no status yet", foo: created, want: kstatus.InProgressStatus})
	unobserved := created.DeepCopy()
	unobserved.Object["status"] = map[string]any{"observedGeneration": int64(0)}
	moments = append(moments, moment{name: "created, the status defaulted", foo: unobserved, want: kstatus.InProgressStatus})
	for _, m := range moments {
		health, err := ArgoCDHealth(script, m.foo)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if health.Status != HealthOf[m.want] || health.Message == "" {
			t.Errorf("%s: the health check says %s (%q), want %s with a message; status %v", m.name, health.Status, health.Message, HealthOf[m.want], m.foo.Object["status"])
		}
	}
}
