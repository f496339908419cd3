// The API server's side of the gate: the fencing policy of
// artifacts/deploy/components/fencing.

package tenure

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// FencedMessage is what the fencing policy's refusals say, after the policy's name:
// the policy's messageExpression begins with it.
const FencedMessage = "the controller is fenced: "

// Fenced tells whether err is the API server refusing a write because the Pod that
// sent it does not hold the Lease, by the fencing policy. Such a write was sent from
// a tenure that has ended, or reached the API server after the Lease changed hands:
// not a refusal of the object to report, but a write to drop and retry under the next
// tenure (another replica's, most likely). The Gate ends the write's tenure when it
// sees such an answer.
func Fenced(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), FencedMessage)
}
