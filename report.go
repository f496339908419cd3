// What the controller tells a Foo's author when its Deployment cannot be what the spec
// asks: the name is taken by a Deployment the Foo does not own, or the API server
// rejected the write. One Event per cause, the status in the latest words, and a
// recheck, since the cause can go away without an event that brings the Foo back.

package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// notOwnedRecheckInterval is how often a Foo whose Deployment name is taken looks
// again. A Deployment the controller never labelled, or without its DeploymentLabels,
// is not in the filtered cache; a watch of its name (maxNameWatches) wakes the Foo when it goes, and
// this recheck is the fallback.
const notOwnedRecheckInterval = time.Minute

// rejectedRecheckInterval is the longest a Foo whose Deployment write the API server
// refused waits before it tries again.
const rejectedRecheckInterval = time.Minute

// rejectedBackoff counts one more failure of key and returns how long to wait before
// the next try: the workqueue's exponential backoff, up to rejectedRecheckInterval.
func (c *Controller) rejectedBackoff(key cache.ObjectName) time.Duration {
	return min(c.rateLimiter.When(key), rejectedRecheckInterval)
}

// reportNotOwned tells the Foo's author, once per holder, that its Deployment name is taken by
// other, and has the Foo woken when other goes away: by the cache's events when other
// is in it, by a watch of its name when not (one the controller never labelled, or
// without its DeploymentLabels), and by a recheck after notOwnedRecheckInterval in any case. A name
// taken only by the Deployment of a Foo deleted before this one was created under the
// same name, or by one being deleted, is waiting for the garbage collector: no Warning.
//
// err is reconcile.ErrNotOwned, or reconcile.ErrNotCreated for a Deployment that names
// foo as its controller but that the controller did not create for it.
func (c *Controller) reportNotOwned(ctx context.Context, foo *samplev1alpha1.Foo, other *appsv1.Deployment, err error) {
	logger := klog.FromContext(ctx)
	key := cache.MetaObjectToName(foo)
	if c.deploymentsCached(other) || !c.nameWatches.Wait(key, cache.MetaObjectToName(other), other.UID) {
		c.nameWatches.Done(key)
	}
	switch {
	case reconcile.NotOwnedReported(foo, err):
	case awaitingCollection(foo, other):
		logger.V(2).Info("Deployment name is taken by a Deployment on its way out; waiting for it to go", "deployment", klog.KObj(other))
	case !c.writes.Report(key, foo.UID, err.Error()+": "+string(other.UID)):
		// Reported while this process runs, and the status write that says so failed.
	default:
		c.recorder.Eventf(foo, other, corev1.EventTypeWarning, reconcile.EventDeploymentNotOwned, "Sync", reconcile.NotOwnedMessage(foo, err))
		logger.Info("Deployment name is taken by a Deployment this Foo does not own", "deployment", klog.KObj(other), "reason", err)
	}
	c.workqueue.AddAfter(key, notOwnedRecheckInterval)
}

// deploymentsCached tells whether d is in the Deployment cache, whose events wake the
// Foos waiting for its name.
func (c *Controller) deploymentsCached(d *appsv1.Deployment) bool {
	cached, err := c.cachedDeployment(d.Namespace, d.Name)
	return err == nil && cached.UID == d.UID
}

// awaitingCollection tells whether other, which holds foo's Deployment name, is on its
// way out: being deleted, or controlled by an earlier Foo of foo's name, which the
// garbage collector deletes now that that Foo is gone.
func awaitingCollection(foo *samplev1alpha1.Foo, other *appsv1.Deployment) bool {
	if other.DeletionTimestamp != nil {
		return true
	}
	ref := metav1.GetControllerOf(other)
	return isFooRef(ref) && ref.Name == foo.Name && ref.UID != foo.UID
}

// reportRejected tells the Foo's author, with a Warning event once per cause, that the
// API server refused to write its Deployment; the status says it too, in the latest
// words. It returns err marked with errRejected, so that the Foo is retried with a
// capped backoff: the cause (a policy, a quota, a permission) can go away without a
// change to the Foo.
func (c *Controller) reportRejected(ctx context.Context, foo *samplev1alpha1.Foo, err error) error {
	message := reconcile.RejectedMessage(foo, err)
	cause := reconcile.RejectionCause(err)
	// Once per cause while this process runs; after a restart, unless the status
	// already says exactly this.
	if c.writes.Report(cache.MetaObjectToName(foo), foo.UID, cause) && !reconcile.RejectedReported(foo, message) {
		c.recorder.Eventf(foo, nil, corev1.EventTypeWarning, reconcile.EventDeploymentRejected, "Sync", "%s", message)
	}
	return fmt.Errorf("%w: %w", errRejected, err)
}
