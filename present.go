// Deciding on the present, not on a cache that lags it: a new leader's check of its
// caches against the API server before its workers start (catchUp), and the read that
// confirms a Foo before a Deployment write that could undo an earlier one (confirmFoo).
// The controller's own writes are covered apart, by its expectations (c.writes).

package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// catchUpTimeout bounds a new leader's check of its caches. Past it the tenure goes
// on: creates and deletes for a Foo that has had a Deployment, and patches back to an
// applied spec, still confirm the Foo (Controller.confirmFoo); a patch that applies a
// new spec does not.
const catchUpTimeout = 30 * time.Second

// catchUpPageSize is how many objects' metadata one request of the check lists.
const catchUpPageSize = 500

// catchUp has a tenure that begins on warm caches decide on the present. A standby's
// caches can lag the API server by any time (a slow watch, a watch cache behind etcd)
// and hold the Foos as they were before the last leader's writes, while its Deployment
// cache is current, or the other way round. Once the caches have synced, catchUp lists
// the metadata of the Foos and of the controller's Deployments in namespace (all when
// empty) from the API server, a consistent read: what it held when the tenure began.
// Every Foo whose cached copy, or one of whose Deployments, is older or missing then
// waits until the cache holds the version listed (writes.Tracker.Expect), and a cached
// Foo the API server no longer had waits for its deletion; every other Foo syncs at
// once. The workers start when it returns.
func catchUp(ctx context.Context, c *Controller, client metadata.Interface, namespace string) {
	logger := klog.FromContext(ctx)
	if !c.waitForCaches(ctx) {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	foos, deployments, err := expectThePresent(ctx, c, client, namespace)
	took := time.Since(start)
	catchUpSeconds.Set(took.Seconds())
	cachesBehindTotal.WithLabelValues(writes.Foos).Add(float64(foos))
	cachesBehindTotal.WithLabelValues(writes.Deployments).Add(float64(deployments))
	if err != nil {
		logger.Error(err, "Checking the caches against the API server; going on, a Deployment write that could undo an earlier one confirms its Foo first", "took", took)
		return
	}
	logger.Info("Checked the caches against the API server", "foosBehind", foos, "deploymentsBehind", deployments, "took", took)
}

// expectThePresent is catchUp's comparison. It returns how many Foos and Deployments
// the caches held behind the API server.
func expectThePresent(ctx context.Context, c *Controller, client metadata.Interface, namespace string) (foos, deployments int, err error) {
	listed := map[cache.ObjectName]bool{}
	fooListRV, err := eachMetadata(ctx, client.Resource(samplev1alpha1.SchemeGroupVersion.WithResource("foos")), namespace, "", func(m *metav1.PartialObjectMetadata) {
		key := cache.MetaObjectToName(m)
		listed[key] = true
		cached, err := c.foosLister.Foos(m.Namespace).Get(m.Name)
		switch {
		case err != nil:
			// Not cached yet: the event that brings it in enqueues it.
		case cached.UID != m.UID && olderRV(cached.ResourceVersion, m.ResourceVersion):
			c.writes.ExpectDeletion(key, cached.UID)
			foos++
		case cached.UID == m.UID && olderRV(cached.ResourceVersion, m.ResourceVersion):
			c.writes.Expect(writes.Foos, key, m.UID, m.ResourceVersion)
			foos++
		}
	})
	if err != nil {
		return foos, deployments, fmt.Errorf("listing the Foos' metadata: %w", err)
	}
	cached, err := c.foosLister.List(labels.Everything())
	if err != nil {
		return foos, deployments, err
	}
	for _, foo := range cached {
		// Not listed, and older than the list: deleted before it was read.
		if key := cache.MetaObjectToName(foo); !listed[key] && olderRV(foo.ResourceVersion, fooListRV) {
			c.writes.ExpectDeletion(key, foo.UID)
			foos++
		}
	}
	// The controller's Deployments the cache lacks or holds older. One it holds that
	// the API server no longer has needs nothing here: a write to it is refused by its
	// preconditions, and its deletion event brings its Foo back.
	_, err = eachMetadata(ctx, client.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")), namespace, reconcile.FooUIDLabel, func(m *metav1.PartialObjectMetadata) {
		ref := metav1.GetControllerOf(m)
		if !isFooRef(ref) {
			return
		}
		if d, err := c.cachedDeployment(m.Namespace, m.Name); err == nil && d.UID == m.UID && !olderRV(d.ResourceVersion, m.ResourceVersion) {
			return
		}
		// For the Foo the cache holds under that name only: the record of another (an
		// earlier Foo of the name, whose Deployment awaits the garbage collector, or one
		// not cached yet, whose event enqueues it) would replace the Foo's own.
		if foo, err := c.foosLister.Foos(m.Namespace).Get(ref.Name); err != nil || foo.UID != ref.UID {
			return
		}
		c.writes.Expect(writes.Deployments, cache.ObjectName{Namespace: m.Namespace, Name: ref.Name}, ref.UID, m.ResourceVersion)
		deployments++
	})
	if err != nil {
		return foos, deployments, fmt.Errorf("listing the Deployments' metadata: %w", err)
	}
	return foos, deployments, nil
}

// eachMetadata lists the metadata of resource in namespace, a page at a time, and
// calls each for every item. It returns the list's resourceVersion, every page's.
func eachMetadata(ctx context.Context, resource metadata.Getter, namespace, selector string, each func(*metav1.PartialObjectMetadata)) (string, error) {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: catchUpPageSize}
	for {
		list, err := resource.Namespace(namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			each(&list.Items[i])
		}
		if list.Continue == "" {
			return list.ResourceVersion, nil
		}
		opts.Continue = list.Continue
	}
}

// olderRV tells whether resourceVersion a is older than b. Versions that do not
// compare (not from a real API server) count as not older.
func olderRV(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && cmp < 0
}

// confirmFoo checks on the API server that foo, as cached, is the Foo it holds now:
// the same object, not being deleted, at the same generation (its spec as cached), and
// with a record of Deployments if the cached one has none (reconcile.Unrecorded).
//
// A Deployment write decided on an older Foo undoes what came after it: the Foo's
// author's change, or the previous leader's work for it. A cache can be behind the
// Deployments it is compared with, whatever this process wrote itself: a new leader's
// warm cache whose Foo watch lags, a relist from a watch cache behind etcd. It would
// create a Deployment under a name the Foo gave up, scale one back, or delete the one
// the Foo uses now as if it were left from a rename. And the Deployment of a Foo that
// had one is often missing because the garbage collector deleted it after the Foo was
// deleted, and its delete event can come before the Foo's: a Deployment created from
// the cached Foo would belong to no Foo.
//
// When the cache is behind, the sync is skipped (errStaleCache) and the Foo waits for
// the cache to hold the version read here, whose event wakes it. Only a create or a
// delete for a Foo that had a Deployment, and a patch back to a spec already applied,
// pay for the read: a new Foo's first create, the bulk of a cold start, a patch that
// applies a new spec and a sync that writes nothing do not.
func (c *Controller) confirmFoo(ctx context.Context, foo *samplev1alpha1.Foo) error {
	key := cache.MetaObjectToName(foo)
	current, err := c.sampleclientset.SamplecontrollerV1alpha1().Foos(foo.Namespace).Get(ctx, foo.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && current.UID != foo.UID:
		// Gone, and syncs of it wait until the informer brings the deletion, or the
		// Foo that took the name.
		c.writes.ExpectDeletion(key, foo.UID)
		staleSkipsTotal.WithLabelValues(writes.Foos).Inc()
		return fmt.Errorf("%w: the Foo is gone from the API server", errStaleCache)
	case err != nil:
		return fmt.Errorf("getting Foo %s/%s: %w", foo.Namespace, foo.Name, err)
	case current.DeletionTimestamp == nil && current.Generation == foo.Generation &&
		(!reconcile.Unrecorded(foo) || reconcile.Unrecorded(current)):
		return nil
	}
	// Being deleted, a newer spec, or a record of Deployments the cached status lacks
	// (which would take one someone else gave the Foo for its own): the event of the
	// version read wakes the Foo.
	c.writes.Expect(writes.Foos, key, foo.UID, current.ResourceVersion)
	staleSkipsTotal.WithLabelValues(writes.Foos).Inc()
	return fmt.Errorf("%w: the API server holds the Foo at generation %d (being deleted: %t, recorded: %t), the cache at %d",
		errStaleCache, current.Generation, current.DeletionTimestamp != nil, !reconcile.Unrecorded(current), foo.Generation)
}

// controlsAny tells whether the cache holds a Deployment that foo controls.
func (c *Controller) controlsAny(foo *samplev1alpha1.Foo) bool {
	owned, err := c.deploymentsIndexer.ByIndex(byControllerUID, string(foo.UID))
	return err == nil && len(owned) > 0
}
