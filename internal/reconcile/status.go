// The Foo's status, computed from its Deployment and the last sync's outcome, and the
// messages of its conditions.

package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// MaxMessageLength bounds the messages of events and conditions built from an API
// server's answer, which an admission webhook chooses; an event's note may have at
// most 1 kB.
const MaxMessageLength = 1000

// ErrNotOwned reports that the Foo's Deployment name belongs to a Deployment the Foo
// does not control, or (ErrNotCreated) that the controller did not create for it.
var ErrNotOwned = errors.New("deployment is not controlled by the Foo")

// ErrNotCreated reports that the Deployment under the Foo's Deployment name names the
// Foo as its controller, but the Foo's record (status.deployments) does not have it:
// someone else gave it that owner reference. The controller neither updates nor
// deletes it, as with any Deployment the Foo does not own.
var ErrNotCreated = fmt.Errorf("%w: it names the Foo as its controller, but the controller did not create it for the Foo", ErrNotOwned)

// CalculateStatus computes the status a Foo should have after a sync of its
// Deployment ended with syncErr. d is the Deployment as last observed: the one the
// Foo controls, or nil when it does not exist (yet); with ErrNotOwned, the one in the
// way. A refused write (IsRejected) reports the API server's answer with d's replica
// counts. Any other error says nothing new, and the stored status is kept.
//
// now stamps a Ready condition whose status or reason changes; an unchanged
// condition keeps its transition time, so an unchanged world computes a status equal
// to the stored one and nothing is written.
func CalculateStatus(foo *samplev1alpha1.Foo, d *appsv1.Deployment, syncErr error, now metav1.Time) samplev1alpha1.FooStatus {
	status := samplev1alpha1.FooStatus{
		ObservedGeneration: foo.Generation,
		Conditions:         cloneConditions(foo.Status.Conditions),
		Deployments:        slices.Clone(foo.Status.Deployments),
	}
	ready := metav1.Condition{
		Type:               samplev1alpha1.ConditionReady,
		Status:             metav1.ConditionFalse,
		ObservedGeneration: foo.Generation,
		LastTransitionTime: now,
	}
	switch {
	case errors.Is(syncErr, ErrNotOwned):
		// The Deployment in the way is someone else's; its replicas are not the Foo's.
		ready.Reason, ready.Message = samplev1alpha1.ReasonDeploymentNotOwned, NotOwnedMessage(foo, syncErr)
		setConditions(&status.Conditions, ready)
		return status
	case IsRejected(syncErr):
		ready.Reason, ready.Message = samplev1alpha1.ReasonDeploymentRejected, RejectedMessage(foo, syncErr)
	case syncErr != nil:
		return *foo.Status.DeepCopy()
	case d == nil:
		ready.Reason = samplev1alpha1.ReasonDeploymentProgressing
		ready.Message = fmt.Sprintf("Deployment %q does not exist yet", foo.Spec.DeploymentName)
	default:
		ready.Status, ready.Reason, ready.Message = deploymentReadiness(d, DesiredReplicas(foo))
	}
	if d != nil {
		status.Replicas = d.Status.Replicas
		status.ReadyReplicas = d.Status.ReadyReplicas
		status.AvailableReplicas = d.Status.AvailableReplicas
		if selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
			status.Selector = selector.String()
		}
	}
	setConditions(&status.Conditions, ready)
	return status
}

// setConditions sets ready, and the condition kstatus reads for its reason: Reconciling
// while the Deployment progresses, Stalled when only someone else can unblock it, and
// neither once it is available. The one that does not apply is removed, so that a Foo
// carries no False condition that says nothing. Each keeps its transition time while
// its status stays.
func setConditions(conditions *[]metav1.Condition, ready metav1.Condition) {
	meta.SetStatusCondition(conditions, ready)
	set := func(conditionType string) {
		c := ready
		c.Type, c.Status = conditionType, metav1.ConditionTrue
		meta.SetStatusCondition(conditions, c)
	}
	switch ready.Reason {
	case samplev1alpha1.ReasonDeploymentProgressing:
		set(samplev1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(conditions, samplev1alpha1.ConditionStalled)
	case samplev1alpha1.ReasonDeploymentNotOwned, samplev1alpha1.ReasonDeploymentRejected, samplev1alpha1.ReasonDeploymentFailed:
		set(samplev1alpha1.ConditionStalled)
		meta.RemoveStatusCondition(conditions, samplev1alpha1.ConditionReconciling)
	default:
		meta.RemoveStatusCondition(conditions, samplev1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(conditions, samplev1alpha1.ConditionStalled)
	}
}

// IsRejected tells whether err is the API server refusing a Deployment write for a
// reason that the same write cannot overcome by itself: admission (a policy, a
// webhook, a quota), validation, or authorization.
func IsRejected(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// RejectionCause identifies what refused a Deployment write, however the API server
// words it on each try: the answer's code and reason and the kinds and fields of its
// causes, never its message, which a webhook or policy may fill with the request
// itself. Two refusals with the same cause are one problem to report, not two.
func RejectionCause(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "unknown"
	}
	s := status.Status()
	parts := []string{strconv.Itoa(int(s.Code)), string(s.Reason)}
	if s.Details != nil {
		var causes []string
		for _, c := range s.Details.Causes {
			causes = append(causes, string(c.Type)+"@"+c.Field)
		}
		slices.Sort(causes)
		parts = append(parts, slices.Compact(causes)...)
	}
	return strings.Join(parts, " ")
}

// RejectedMessage is the condition message and event note for err, a refused write
// of foo's Deployment: the API server's own words, which name the policy, webhook or
// quota that refused it, cut at MaxMessageLength on a rune boundary.
func RejectedMessage(foo *samplev1alpha1.Foo, err error) string {
	answer := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		answer = status.Status().Message
	}
	message := fmt.Sprintf("The API server refused to write Deployment %q: %s", foo.Spec.DeploymentName, validUTF8(answer))
	if len(message) > MaxMessageLength {
		cut := MaxMessageLength - len("...")
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut] + "..."
	}
	return message
}

// validUTF8 replaces every byte of s that is not UTF-8 with U+FFFD, as encoding/json
// does when the status is written: the message stored is then the message computed,
// and a refusal already reported is recognised as such.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

// NotOwnedMessage tells the Foo's author that its deploymentName is taken, as err
// (ErrNotOwned or ErrNotCreated) says.
func NotOwnedMessage(foo *samplev1alpha1.Foo, err error) string {
	if errors.Is(err, ErrNotCreated) {
		return fmt.Sprintf("Deployment %q names this Foo as its controller, but the controller did not create it for this Foo and leaves it alone; delete it or choose another spec.deploymentName", foo.Spec.DeploymentName)
	}
	return fmt.Sprintf("Deployment %q already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName", foo.Spec.DeploymentName)
}

// RejectedReported tells whether foo's status already reports the refusal message.
func RejectedReported(foo *samplev1alpha1.Foo, message string) bool {
	return readyReason(foo, samplev1alpha1.ReasonDeploymentRejected, message)
}

// NotOwnedReported tells whether foo's status already says that its current
// deploymentName is taken, as err (ErrNotOwned or ErrNotCreated) says; with err nil,
// either way.
func NotOwnedReported(foo *samplev1alpha1.Foo, err error) bool {
	if err == nil {
		return NotOwnedReported(foo, ErrNotOwned) || NotOwnedReported(foo, ErrNotCreated)
	}
	return readyReason(foo, samplev1alpha1.ReasonDeploymentNotOwned, NotOwnedMessage(foo, err))
}

// SpecApplied tells whether the controller had applied foo's current spec to its
// Deployment, as far as the status tells: it has observed this generation, and not as
// refused or taken. After a refusal the status cannot tell a new spec from a reverted
// hand edit, so the update that finally goes through records no DeploymentUpdated
// event either way; the Ready condition's change from DeploymentRejected says it.
func SpecApplied(foo *samplev1alpha1.Foo) bool {
	if foo.Status.ObservedGeneration != foo.Generation {
		return false
	}
	ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
	return ready == nil || (ready.Reason != samplev1alpha1.ReasonDeploymentRejected && ready.Reason != samplev1alpha1.ReasonDeploymentNotOwned)
}

// readyReason tells whether foo's Ready condition has reason, and message unless it
// is empty.
func readyReason(foo *samplev1alpha1.Foo, reason, message string) bool {
	ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
	return ready != nil && ready.Reason == reason && (message == "" || ready.Message == message)
}

// deploymentReadiness tells whether d has rolled out its current spec with want
// replicas, all available, as the status, reason and message of a Ready condition.
func deploymentReadiness(d *appsv1.Deployment, want int32) (metav1.ConditionStatus, string, string) {
	progressing := func(format string, args ...any) (metav1.ConditionStatus, string, string) {
		return metav1.ConditionFalse, samplev1alpha1.ReasonDeploymentProgressing, fmt.Sprintf(format, args...)
	}
	switch {
	case d.DeletionTimestamp != nil:
		return progressing("Deployment %q is being deleted", d.Name)
	case d.Status.ObservedGeneration < d.Generation:
		return progressing("Waiting for Deployment %q to observe its latest spec", d.Name)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == "False" {
			return metav1.ConditionFalse, samplev1alpha1.ReasonDeploymentFailed,
				fmt.Sprintf("Deployment %q is not progressing: %s", d.Name, c.Message)
		}
	}
	switch {
	case d.Status.UpdatedReplicas < want:
		return progressing("Rolling out: %d of %d replicas updated", d.Status.UpdatedReplicas, want)
	case d.Status.Replicas > d.Status.UpdatedReplicas:
		return progressing("Rolling out: %d old replicas pending termination", d.Status.Replicas-d.Status.UpdatedReplicas)
	case d.Status.AvailableReplicas < want:
		return progressing("%d of %d replicas available", d.Status.AvailableReplicas, want)
	}
	return metav1.ConditionTrue, samplev1alpha1.ReasonDeploymentAvailable,
		fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
}

func cloneConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	return append(make([]metav1.Condition, 0, len(in)), in...)
}
