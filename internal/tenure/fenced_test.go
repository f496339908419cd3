package tenure

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestFenced(t *testing.T) {
	// The policy's message, as the component writes it: Fenced knows it by these words.
	policy, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "deploy", "components", "fencing", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, words := range []string{"name: " + FencingPolicy + "\n", "'" + FencedMessage + "'", "'" + HeldByAnother + "'"} {
		if !strings.Contains(string(policy), words) {
			t.Errorf("the fencing policy does not have %q", words)
		}
	}
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	refusal := func(message string) error {
		return apierrors.NewForbidden(deployments, "web", errors.New("ValidatingAdmissionPolicy '"+FencingPolicy+"' with binding '"+FencingPolicy+"' denied request: "+message))
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refusal(FencedMessage + "Pod a_1 does not hold the Lease ns/sample-controller" + HeldByAnother + "b_2"), true},
		{refusal(FencedMessage + "Pod a_1 does not hold the Lease ns/sample-controller, which has no holder"), true},
		// The policy failing rather than refusing: 422, naming the policy.
		{apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", field.ErrorList{field.Invalid(nil, nil,
			"ValidatingAdmissionPolicy '"+FencingPolicy+"' with binding '"+FencingPolicy+"' denied request: failed to configure binding: paramKind not yet synced")}), true},
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
