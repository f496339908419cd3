// The record, in a Foo's status, of the Deployments the controller created for it:
// what tells the Deployments it may update or delete from ones that someone else
// gave the Foo's owner reference.

package reconcile

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	appsv1 "k8s.io/api/apps/v1"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// CreationTokenAnnotation carries, on a Deployment the controller creates, the token
// whose hash the Foo's record holds while the Deployment is being created.
const CreationTokenAnnotation = "samplecontroller.k8s.io/creation-token"

// CreationToken is the token of the Deployment named name that the controller
// creates for the Foo of UID uid, keyed by key: the same within one process, so that
// retries of a create need no new record, and known to no one else before the
// Deployment carries it.
func CreationToken(key []byte, foo *samplev1alpha1.Foo, name string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(string(foo.UID) + "/" + name))
	return hex.EncodeToString(mac.Sum(nil))
}

// TokenHash is the hash of a creation token that the record of a Deployment being
// created holds.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Record returns the record of the Deployment named name, or nil.
func Record(records []samplev1alpha1.CreatedDeployment, name string) *samplev1alpha1.CreatedDeployment {
	if i := slices.IndexFunc(records, func(r samplev1alpha1.CreatedDeployment) bool { return r.Name == name }); i >= 0 {
		return &records[i]
	}
	return nil
}

// SetRecord returns records with the record of r's name replaced by r, or r added.
func SetRecord(records []samplev1alpha1.CreatedDeployment, r samplev1alpha1.CreatedDeployment) []samplev1alpha1.CreatedDeployment {
	records = slices.Clone(records)
	if existing := Record(records, r.Name); existing != nil {
		*existing = r
		return records
	}
	return append(records, r)
}

// DropRecord returns records without the record of the Deployment named name.
func DropRecord(records []samplev1alpha1.CreatedDeployment, name string) []samplev1alpha1.CreatedDeployment {
	return slices.DeleteFunc(slices.Clone(records), func(r samplev1alpha1.CreatedDeployment) bool { return r.Name == name })
}

// Created tells whether d is a Deployment that records say the controller created:
// the record of its name has its UID, or is of a Deployment being created and d
// carries the token whose hash it holds. d must be the Deployment as the API server
// serves it: the controller's cache keeps no annotations.
func Created(records []samplev1alpha1.CreatedDeployment, d *appsv1.Deployment) bool {
	r := Record(records, d.Name)
	switch {
	case r == nil:
		return false
	case r.UID != "":
		return r.UID == d.UID
	}
	token, ok := d.Annotations[CreationTokenAnnotation]
	return ok && r.Creating != "" && hmac.Equal([]byte(TokenHash(token)), []byte(r.Creating))
}

// Unrecorded tells whether foo has no record of a Deployment created for it, and does
// not say that its Deployment name is taken: it is new (the controller records a
// Deployment with the status write that follows its create), or was last synced by
// the classic sample-controller or a version that kept no records. The Deployment under
// its current name that it controls is then taken as created for it, and recorded:
// in that window, an owner reference someone else gave it is not told apart.
func Unrecorded(foo *samplev1alpha1.Foo) bool {
	return len(foo.Status.Deployments) == 0 && !readyReason(foo, samplev1alpha1.ReasonDeploymentNotOwned, "")
}
