// The API server's side of the gate: the fencing policy of
// artifacts/deploy/components/fencing.

package tenure

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const (
	// FencingPolicy is the name of the fencing component's ValidatingAdmissionPolicy,
	// which the API server's refusals by it name.
	FencingPolicy = "sample-controller-fencing"
	// FencedMessage begins the message of the policy's refusals.
	FencedMessage = "the controller is fenced: "
	// HeldByAnother is in the message when the Lease names another holder.
	HeldByAnother = "; it is held by "
)

// Fenced tells whether err is the API server refusing a write by the fencing policy:
// the Pod that sent it does not hold the Lease, or the policy could not decide. Such
// a write was sent from a tenure that has ended, or reached the API server after the
// Lease changed hands: not a refusal of the Foo to report, but a write to retry under
// the next tenure (another replica's, most likely).
func Fenced(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	message := err.Error()
	return strings.Contains(message, FencedMessage) || strings.Contains(message, "ValidatingAdmissionPolicy '"+FencingPolicy+"'")
}

// heldByAnother tells whether a refusal's body says the Lease is held by another: the
// API server has seen it change hands, which this process has not, or its tenure
// would be over. A Lease another client emptied is not: its holder takes it back at
// its next renewal.
func heldByAnother(body []byte) bool {
	s := string(body)
	return strings.Contains(s, FencedMessage) && strings.Contains(s, HeldByAnother)
}
