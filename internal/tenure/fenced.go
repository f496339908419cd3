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
// the Pod that sent it does not hold the Lease (403), or the policy could not decide
// (a 422 naming the policy: its expression failed, or the API server has not synced
// the Lease yet). Such a write was sent from a tenure that has ended, reached the API
// server after the Lease changed hands, or came too early: not a refusal of the Foo to
// report, but a write to retry under the next tenure (another replica's, most likely).
func Fenced(err error) bool {
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		return false
	}
	message := err.Error()
	return apierrors.IsForbidden(err) && strings.Contains(message, FencedMessage) ||
		strings.Contains(message, "ValidatingAdmissionPolicy '"+FencingPolicy+"'")
}

// heldByAnother tells whether a refusal's body says the Lease is held by another than
// self (this process's identity in Leases, if known): the API server has seen it
// change hands, which this process has not, or its tenure would be over. A Lease
// another client emptied is not: its holder takes it back at its next renewal. Nor is
// one held by self: the policy cannot match this process (its token bound to no Pod,
// or its identity not its Pod's), and no tenure of its own would change that.
func heldByAnother(body []byte, self string) bool {
	s := string(body)
	if !strings.Contains(s, FencedMessage) || !strings.Contains(s, HeldByAnother) {
		return false
	}
	// The holder ends the message, which ends the Status's JSON string.
	return self == "" || !strings.Contains(s, HeldByAnother+self+`"`)
}
