package tenure

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestFenced(t *testing.T) {
	// The policy's message, as the component writes it: Fenced knows it by these words.
	policy, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "deploy", "components", "fencing", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(policy), "'"+FencedMessage+"'") {
		t.Fatalf("the fencing policy's message does not begin with %q", FencedMessage)
	}
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	fenced := apierrors.NewForbidden(deployments, "web",
		errors.New("ValidatingAdmissionPolicy 'sample-controller-fencing' with binding 'sample-controller-fencing' denied request: "+FencedMessage+"Pod a_1 does not hold the Lease ns/sample-controller, b_2 does"))
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fenced, true},
		{apierrors.NewForbidden(deployments, "web", errors.New("ValidatingAdmissionPolicy 'replicas' denied request: too many replicas")), false},
		{apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil), false},
		{errors.New(FencedMessage), false},
		{nil, false},
	} {
		if got := Fenced(c.err); got != c.want {
			t.Errorf("Fenced(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
