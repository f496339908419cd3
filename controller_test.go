package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	"github.com/seed-e6610ed6/sample-controller/internal/writes"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

func TestSyncHandler(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](2))
	ready := availableDeployment(foo)
	readyFoo := withStatus(foo, ready)
	// rescaled is readyFoo once its author set spec.replicas to n, the Deployment the
	// controller then writes, and the Foo with the status it then writes.
	rescaled := func(n int32) (*samplev1alpha1.Foo, *appsv1.Deployment, *samplev1alpha1.Foo) {
		f := modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) { f.Spec.Replicas = ptr.To(n); f.Generation = 2 })
		d := modified(ready, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(n) })
		return f, d, modifiedFoo(f, func(f *samplev1alpha1.Foo) { f.Status = calculatedStatus(f, d, now) })
	}
	toZero, zeroDeployment, toZeroWithStatus := rescaled(0)
	// renamed is readyFoo once its author set spec.deploymentName to web-v2.
	renamed := modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2"; f.Generation = 2 })
	toThree, threeDeployment, toThreeWithStatus := rescaled(3)
	// otherImage is ready after someone set its image by hand.
	otherImage := modified(ready, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "httpd" })
	// refusedEarlier is f once an earlier sync reported that the API server refused
	// the write of ready.
	refusedEarlier := func(f *samplev1alpha1.Foo) *samplev1alpha1.Foo {
		return modifiedFoo(f, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, ready, refusal, earlier) })
	}
	// confirmed is the read that checks, before a Deployment write for a Foo that has
	// had one (a create, a delete, a patch back to a spec already applied), that the
	// cached Foo is the one the API server holds, at its generation; a new Foo's first
	// create, a patch that applies a new spec and a sync that writes no Deployment make
	// none, and a sync makes it once. The fixture lists the Deployment requests before
	// the Foo requests.
	confirmed := get(foosResource, "web")
	// goneFromServer leaves the cached Foo behind the API server, which no longer
	// has it; with replacement set, it has another Foo of that name instead.
	goneFromServer := func(replacement *samplev1alpha1.Foo) func(f *fixture) {
		return func(f *fixture) {
			if err := f.client.Tracker().Delete(foosResource, "default", "web"); err != nil {
				t.Fatal(err)
			}
			if replacement != nil {
				if err := f.client.Tracker().Add(replacement); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	tests := []struct {
		name       string
		foo        *samplev1alpha1.Foo // in the cache and on the server; nil for none
		cached     []*appsv1.Deployment
		serverOnly []*appsv1.Deployment
		setup      func(f *fixture)
		synced     *samplev1alpha1.Foo // the Foo synced, when foo is nil
		want       []action
		wantEvents []string
		wantErr    bool
	}{{
		name: "creates the deployment and reports progress",
		foo:  foo,
		want: []action{
			create(reconcile.NewDeployment(foo)),
			updateStatus(withStatus(foo, reconcile.NewDeployment(foo))),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name:   "nothing to do makes no API calls",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{ready},
	}, {
		name:   "reports readiness once the deployment is available",
		foo:    withStatus(foo, reconcile.NewDeployment(foo)),
		cached: []*appsv1.Deployment{ready},
		want:   []action{updateStatus(readyFoo)},
	}, {
		name: "reverts replicas drift",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](9)
		})},
		want:       []action{patch(ready), confirmed},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name:       "reverts image drift",
		foo:        readyFoo,
		cached:     []*appsv1.Deployment{otherImage},
		want:       []action{patch(ready), confirmed},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name: "reverts label drift and keeps labels others added",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Labels = map[string]string{reconcile.FooUIDLabel: "stale", "team": "blue"}
		})},
		want: []action{patch(modified(ready, func(d *appsv1.Deployment) {
			d.Labels = map[string]string{reconcile.FooUIDLabel: "web-uid", "team": "blue"}
		})), confirmed},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name: "keeps the rollout restart annotation when nothing else differs",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
		})},
	}, {
		name: "keeps the rollout restart annotation while reverting drift",
		foo:  readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
			d.Spec.Replicas = ptr.To[int32](1)
		})},
		want: []action{patch(modified(ready, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
		})), confirmed},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name:   "leaves a foreign deployment in the cache alone and says so",
		foo:    foo,
		cached: []*appsv1.Deployment{foreignDeployment("web", map[string]string{reconcile.FooUIDLabel: "x"})},
		want: []action{updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, now)
		}))},
		wantEvents: []string{`Warning DeploymentNotOwned Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`},
	}, {
		name:       "leaves a foreign deployment only on the server alone and says so",
		foo:        foo,
		serverOnly: []*appsv1.Deployment{foreignDeployment("web", nil)},
		want: []action{
			create(reconcile.NewDeployment(foo)),
			get(deploymentsResource, "web"),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, now) })),
		},
		wantEvents: []string{`Warning DeploymentNotOwned Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`},
	}, {
		name: "waits without a Warning for the Deployment of an earlier Foo of its name",
		foo:  foo,
		serverOnly: []*appsv1.Deployment{reconcile.NewDeployment(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.UID = "earlier-uid"
		}))},
		want: []action{
			create(reconcile.NewDeployment(foo)),
			get(deploymentsResource, "web"),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, now) })),
		},
	}, {
		name: "waits without a Warning for a Deployment being deleted",
		foo:  foo,
		serverOnly: []*appsv1.Deployment{modified(foreignDeployment("web", nil), func(d *appsv1.Deployment) {
			d.DeletionTimestamp = &earlier
			d.Finalizers = []string{"example.com/hold"}
		})},
		want: []action{
			create(reconcile.NewDeployment(foo)),
			get(deploymentsResource, "web"),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, now) })),
		},
	}, {
		name: "a reported conflict is looked at again without a write or an event",
		foo: modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
		}),
		serverOnly: []*appsv1.Deployment{foreignDeployment("web", nil)},
		want:       []action{get(deploymentsResource, "web")},
	}, {
		// Its name was taken: the Deployment under it is not taken as created without a
		// record, written before the create.
		name: "a reported conflict that went away is resolved",
		foo: modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
		}),
		want: []action{
			get(deploymentsResource, "web"),
			create(newCreated(foo)),
			confirmed,
			updateStatus(creating(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
				f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
			}))),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
				f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
				f.Status = calculatedStatus(f, reconcile.NewDeployment(foo), now)
			})),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name: "adopts a deployment the classic controller created for this Foo",
		foo:  readyFoo,
		serverOnly: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) {
			d.Labels = nil
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx", "controller": "web"}}
			d.Spec.Template.Labels = map[string]string{"app": "nginx", "controller": "web"}
		})},
		// Recorded by its UID, and not in the cache, which has only labelled ones.
		want: []action{
			get(deploymentsResource, "web"),
			patch(modified(ready, func(d *appsv1.Deployment) {
				d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx", "controller": "web"}}
				d.Spec.Template.Labels = map[string]string{"app": "nginx", "controller": "web"}
			})),
			confirmed,
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) { f.Status.Selector = "app=nginx,controller=web" })),
		},
		wantEvents: []string{`Normal DeploymentUpdated Updated Deployment "web" to match the Foo's spec`},
	}, {
		name: "replaces the deployment when deploymentName changes",
		foo: modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
			f.Spec.DeploymentName = "web-v2"
			f.Generation = 2
		}),
		cached: []*appsv1.Deployment{ready},
		want: []action{
			create(newCreated(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2" }))),
			del(deploymentsResource, "web"),
			confirmed,
			updateStatus(creating(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
				f.Spec.DeploymentName = "web-v2"
				f.Generation = 2
			}))),
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
				f.Spec.DeploymentName = "web-v2"
				f.Generation = 2
				f.Status = calculatedStatus(f, reconcile.NewDeployment(f), now)
				f.Status.Deployments = reconcile.DropRecord(f.Status.Deployments, "web")
			})),
		},
		// The create is told once the status records it, after the delete.
		wantEvents: []string{
			`Normal DeploymentDeleted Deleted Deployment "web", replaced by "web-v2"`,
			`Normal DeploymentCreated Created Deployment "web-v2"`,
		},
	}, {
		// Its author may patch the Deployment but not delete it: the controller must
		// not rewrite it, nor delete it once the Foo's name changes.
		name:   "leaves alone a deployment given the foo's owner reference by someone else, and says so",
		foo:    renamed,
		cached: []*appsv1.Deployment{ready, forgedDeployment(foo, "web-v2")},
		want: []action{get(deploymentsResource, "web-v2"), updateStatus(modifiedFoo(renamed, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotCreated, now)
		}))},
		wantEvents: []string{strings.ReplaceAll(notCreatedEvent, `"web"`, `"web-v2"`)},
	}, {
		name:   "leaves alone a deployment under a previous name given the foo's owner reference by someone else",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{ready, forgedDeployment(foo, "payroll")},
	}, {
		name:   "records the deployment of a foo synced before deployments were recorded",
		foo:    withoutRecords(readyFoo),
		cached: []*appsv1.Deployment{ready},
		want:   []action{get(foosResource, "web"), updateStatus(readyFoo)},
	}, {
		// Its status in the cache is behind the API server's, which has a record.
		name:    "does not take a deployment as created on a cached status behind the server's",
		foo:     withoutRecords(readyFoo),
		cached:  []*appsv1.Deployment{ready},
		setup:   func(f *fixture) { update(f, readyFoo) },
		want:    []action{get(foosResource, "web")},
		wantErr: true,
	}, {
		// The controller's own delete of it has not reached the cache yet.
		name:    "does not report a cached deployment the server no longer has",
		foo:     renamed,
		cached:  []*appsv1.Deployment{ready, forgedDeployment(foo, "web-v2")},
		setup:   func(f *fixture) { remove(f, "web-v2") },
		want:    []action{get(deploymentsResource, "web-v2")},
		wantErr: true,
	}, {
		name: "does not take for its own a deployment in the way of a foo synced before deployments were recorded",
		foo: modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
		}),
		cached: []*appsv1.Deployment{forgedDeployment(foo, "web")},
		want: []action{get(deploymentsResource, "web"), updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotOwned, earlier)
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotCreated, now)
		}))},
		wantEvents: []string{notCreatedEvent},
	}, {
		// The process that created it died before the status write that records it.
		name:   "knows the deployment it was creating by its token",
		foo:    creating(foo),
		cached: []*appsv1.Deployment{modified(newCreated(foo), func(d *appsv1.Deployment) { d.UID = createdUID(d.Name) })},
		want: []action{
			get(deploymentsResource, "web"),
			updateStatus(withStatus(foo, reconcile.NewDeployment(foo))),
		},
	}, {
		// Another process recorded it and died; its create landed only after this
		// one looked for the Deployment.
		name: "knows a deployment created under the record it replaced",
		foo: modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
			f.Status.Deployments = []samplev1alpha1.CreatedDeployment{{Name: "web", Creating: reconcile.TokenHash("earlier token")}}
		}),
		setup: func(f *fixture) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				late := modified(newCreated(foo), func(d *appsv1.Deployment) {
					d.UID = "late-uid"
					d.Annotations[reconcile.CreationTokenAnnotation] = "earlier token"
				})
				if err := f.kubeclient.Tracker().Add(late); err != nil {
					return true, nil, err
				}
				return true, nil, apierrors.NewAlreadyExists(deploymentsResource.GroupResource(), "web")
			})
		},
		want: []action{
			get(deploymentsResource, "web"),
			create(newCreated(foo)),
			get(deploymentsResource, "web"),
			confirmed,
			updateStatus(creating(readyFoo)),
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
				f.Status = calculatedStatus(f, modified(newCreated(foo), func(d *appsv1.Deployment) { d.UID = "late-uid" }), now)
			})),
		},
	}, {
		name:   "leaves alone a deployment without the token of the one it was creating",
		foo:    creating(foo),
		cached: []*appsv1.Deployment{forgedDeployment(foo, "web")},
		want: []action{get(deploymentsResource, "web"), updateStatus(modifiedFoo(creating(foo), func(f *samplev1alpha1.Foo) {
			f.Status = reconcile.CalculateStatus(f, nil, reconcile.ErrNotCreated, now)
		}))},
		wantEvents: []string{notCreatedEvent},
	}, {
		name: "drops the record of a previous deployment that is gone",
		foo: modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
			f.Status.Deployments = append(f.Status.Deployments, samplev1alpha1.CreatedDeployment{Name: "web-v0", UID: "web-v0-uid"})
		}),
		cached: []*appsv1.Deployment{ready},
		want:   []action{get(deploymentsResource, "web-v0"), confirmed, updateStatus(readyFoo)},
	}, {
		name:   "foo deleted before the sync",
		synced: foo,
		cached: []*appsv1.Deployment{ready},
	}, {
		name: "foo being deleted is left to the garbage collector",
		foo: modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
			f.DeletionTimestamp = &now
			f.Finalizers = []string{"foregroundDeletion"}
		}),
	}, {
		name: "recreates a deployment that was deleted",
		foo:  readyFoo,
		want: []action{
			get(deploymentsResource, "web"),
			create(newCreated(foo)),
			confirmed,
			updateStatus(creating(readyFoo)),
			updateStatus(withStatus(readyFoo, reconcile.NewDeployment(foo))),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		// Its Deployment is gone because the garbage collector removed it, and the
		// cache has not seen the Foo's deletion yet.
		name:    "does not recreate the deployment of a foo gone from the server",
		foo:     readyFoo,
		setup:   goneFromServer(nil),
		want:    []action{confirmed},
		wantErr: true,
	}, {
		name:    "does not recreate the deployment of a foo replaced on the server",
		foo:     readyFoo,
		setup:   goneFromServer(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.UID = "web-uid-2" })),
		want:    []action{confirmed},
		wantErr: true,
	}, {
		name:   "does not touch a deployment that is being deleted",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) { d.DeletionTimestamp = &now; d.Spec.Replicas = ptr.To[int32](5) })},
		want: []action{updateStatus(withStatus(readyFoo, modified(ready, func(d *appsv1.Deployment) {
			d.DeletionTimestamp = &now
		})))},
	}, {
		name: "replicas nil means one",
		foo:  newFoo("web", nil),
		want: []action{
			create(reconcile.NewDeployment(newFoo("web", ptr.To[int32](1)))),
			updateStatus(withStatus(newFoo("web", nil), reconcile.NewDeployment(newFoo("web", nil)))),
		},
		wantEvents: []string{`Normal DeploymentCreated Created Deployment "web"`},
	}, {
		name:   "scales to zero",
		foo:    toZero,
		cached: []*appsv1.Deployment{ready},
		want:   []action{patch(zeroDeployment), updateStatus(toZeroWithStatus)},
		// A new spec is reported by observedGeneration; no event is recorded for it.
	}, {
		name:   "a spec change records no event, even when the deployment also drifted",
		foo:    toThree,
		cached: []*appsv1.Deployment{otherImage},
		want:   []action{patch(threeDeployment), updateStatus(toThreeWithStatus)},
	}, {
		name:  "a refused create is reported and retried",
		foo:   foo,
		setup: func(f *fixture) { refuse(f, "create") },
		want: []action{
			create(reconcile.NewDeployment(foo)),
			updateStatus(modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, refusal, now) })),
		},
		wantEvents: []string{"Warning DeploymentRejected " + refusedMessage},
		wantErr:    true,
	}, {
		name:  "a refusal already reported makes no event and no status write",
		foo:   modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Status = reconcile.CalculateStatus(f, nil, refusal, earlier) }),
		setup: func(f *fixture) { refuse(f, "create") },
		want:  []action{create(reconcile.NewDeployment(foo)), confirmed},
		// Still an error: the key goes back to the queue with backoff.
		wantErr: true,
	}, {
		name:   "a refused update is reported with the deployment's replicas",
		foo:    readyFoo,
		cached: []*appsv1.Deployment{modified(ready, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) })},
		setup:  func(f *fixture) { refuse(f, "patch") },
		want: []action{
			patch(ready),
			confirmed,
			updateStatus(modifiedFoo(readyFoo, func(f *samplev1alpha1.Foo) {
				f.Status = reconcile.CalculateStatus(f, modified(ready, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) }), refusal, now)
			})),
		},
		wantEvents: []string{"Warning DeploymentRejected " + refusedMessage},
		wantErr:    true,
	}, {
		// The drifted Deployment is available, which alone would make Ready True.
		name:    "a refused update already reported writes no status, though the deployment is available",
		foo:     refusedEarlier(readyFoo),
		cached:  []*appsv1.Deployment{otherImage},
		setup:   func(f *fixture) { refuse(f, "patch") },
		want:    []action{patch(ready), confirmed},
		wantErr: true,
	}, {
		name:   "the update that applies a spec refused before records no event",
		foo:    refusedEarlier(toThree),
		cached: []*appsv1.Deployment{ready},
		want:   []action{patch(threeDeployment), confirmed, updateStatus(withStatus(refusedEarlier(toThree), threeDeployment))},
	}, {
		// The status cannot tell a refused revert from a refused new spec; the Ready
		// condition's change says what happened.
		name:   "the revert of a hand edit refused before records no event",
		foo:    refusedEarlier(readyFoo),
		cached: []*appsv1.Deployment{otherImage},
		want:   []action{patch(ready), confirmed, updateStatus(withStatus(refusedEarlier(readyFoo), ready))},
	}, {
		name: "a namespace being deleted is not reported on the foo",
		foo:  foo,
		setup: func(f *fixture) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				err := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
					errors.New("unable to create new content in namespace default because it is being terminated"))
				err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
				return true, nil, err
			})
		},
		want:    []action{create(reconcile.NewDeployment(foo))},
		wantErr: true,
	}, {
		// Another replica holds the Lease now: nothing to tell the Foo's author.
		name: "a write the fencing policy refused is retried without an event or a status",
		foo:  foo,
		setup: func(f *fixture) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, fencedError()
			})
		},
		want:    []action{create(reconcile.NewDeployment(foo))},
		wantErr: true,
	}, {
		name: "create failure is returned for a retry",
		foo:  foo,
		setup: func(f *fixture) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			})
		},
		want:    []action{create(reconcile.NewDeployment(foo))},
		wantErr: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var foos []*samplev1alpha1.Foo
			synced := tc.synced
			if tc.foo != nil {
				foos = append(foos, tc.foo)
				synced = tc.foo
			}
			f := newFixture(t, foos, tc.cached, tc.serverOnly)
			if tc.setup != nil {
				tc.setup(f)
			}
			err := f.sync(synced)
			if (err != nil) != tc.wantErr {
				t.Fatalf("syncHandler() error = %v, wantErr %v", err, tc.wantErr)
			}
			f.checkActions(tc.want)
			f.checkEvents(tc.wantEvents...)
		})
	}
}

// TestDeploymentsFirst checks that a sync that creates a new Foo's Deployment while
// other Foos wait in the queue leaves the status write and the Event to the Foo's next
// turn, at the back of the queue, which reads nothing more for it than a sync that did
// both; that what the status does not record yet is not lost when the deploymentName
// changes in between; and that a stopping controller writes those statuses, and only
// those, before it leaves the queue to the next process.
func TestDeploymentsFirst(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](2))
	other := newFoo("other", ptr.To[int32](1))
	key, otherKey := cache.MetaObjectToName(foo), cache.MetaObjectToName(other)
	// deferred has a worker take foo, queued before other, and checks that it created
	// foo's Deployment and stopped there, to come back after other; it puts the
	// Deployment in the cache as the informer would.
	deferred := func(t *testing.T, f *fixture) {
		t.Helper()
		_, ctx := ktesting.NewTestContext(t)
		q := f.controller.workqueue
		q.Add(key)
		q.Add(otherKey)
		before := testutil.ToFloat64(syncsTotal.WithLabelValues(syncDeferred))
		if !f.controller.processNextWorkItem(ctx) {
			t.Fatal("the worker stopped")
		}
		if got := testutil.ToFloat64(syncsTotal.WithLabelValues(syncDeferred)) - before; got != 1 {
			t.Errorf("syncs_total{result=deferred} rose by %v, want 1", got)
		}
		f.checkActions([]action{create(reconcile.NewDeployment(foo))})
		f.checkEvents()
		if got := q.Len(); got != 2 {
			t.Fatalf("queue length %d after the deferral, want 2: other, then web again", got)
		}
		if head, _ := q.Get(); head != otherKey {
			t.Fatalf("queue head %v, want %v: the deferred Foo goes to the back", head, otherKey)
		}
		q.Done(otherKey)
		created, err := f.kubeclient.AppsV1().Deployments(foo.Namespace).Get(t.Context(), foo.Spec.DeploymentName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.controller.deploymentsIndexer.Add(cachedCopy(created)); err != nil {
			t.Fatal(err)
		}
		f.kubeclient.ClearActions()
		f.client.ClearActions()
	}

	t.Run("the status and the Event come with the next turn", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo, other}, nil, nil)
		deferred(t, f)
		_, ctx := ktesting.NewTestContext(t)
		if !f.controller.processNextWorkItem(ctx) {
			t.Fatal("the worker stopped")
		}
		// No read of the Foo to learn whose the Deployment is: this process made it.
		f.checkActions([]action{updateStatus(withStatus(foo, reconcile.NewDeployment(foo)))})
		f.checkEvents(`Normal DeploymentCreated Created Deployment "web"`)
		// Told once: the sync after it has nothing to do.
		stored, err := f.client.SamplecontrollerV1alpha1().Foos(foo.Namespace).Get(t.Context(), foo.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.controller.foosIndexer.Update(stored); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()
		if err := f.sync(stored); err != nil {
			t.Fatal(err)
		}
		f.checkActions(nil)
		f.checkEvents()
	})

	t.Run("an empty queue syncs the Foo in one go", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		if err := f.sync(foo); err != nil {
			t.Fatal(err)
		}
		f.checkActions([]action{create(reconcile.NewDeployment(foo)), updateStatus(withStatus(foo, reconcile.NewDeployment(foo)))})
		f.checkEvents(`Normal DeploymentCreated Created Deployment "web"`)
	})

	t.Run("a Foo that had a Deployment is synced in one go", func(t *testing.T) {
		// Its Deployment was deleted: recreating it is not a cold start, and its
		// record must not wait.
		ready := withStatus(foo, availableDeployment(foo))
		f := newFixture(t, []*samplev1alpha1.Foo{ready}, nil, nil)
		f.controller.workqueue.Add(otherKey)
		if err := f.sync(ready); err != nil {
			t.Fatalf("sync = %v, want nil", err)
		}
		f.checkEvents(`Normal DeploymentCreated Created Deployment "web"`)
	})

	t.Run("a deploymentName changed before the status write", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo, other}, nil, nil)
		deferred(t, f)
		renamed := modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.DeploymentName = "web-v2"; f.Generation = 2 })
		update(f, renamed)
		if err := f.controller.foosIndexer.Update(renamed.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		// web is recorded (and told) before web-v2 is created, and deleted after.
		if err := f.sync(renamed); err != nil {
			t.Fatalf("sync of the renamed Foo = %v", err)
		}
		if _, err := f.kubeclient.AppsV1().Deployments(foo.Namespace).Get(t.Context(), "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Deployment created under the previous name: %v, want it deleted", err)
		}
		stored, err := f.client.SamplecontrollerV1alpha1().Foos(foo.Namespace).Get(t.Context(), foo.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []samplev1alpha1.CreatedDeployment{{Name: "web-v2", UID: createdUID("web-v2")}}
		if diff := cmp.Diff(want, stored.Status.Deployments); diff != "" {
			t.Errorf("status.deployments (-want +got):\n%s", diff)
		}
		f.checkEvents(
			`Normal DeploymentCreated Created Deployment "web"`,
			`Normal DeploymentDeleted Deleted Deployment "web", replaced by "web-v2"`,
			`Normal DeploymentCreated Created Deployment "web-v2"`,
		)
	})

	t.Run("a stopping controller writes the deferred statuses only", func(t *testing.T) {
		third := newFoo("third", ptr.To[int32](1))
		f := newFixture(t, []*samplev1alpha1.Foo{foo, other, third}, nil, nil)
		deferred(t, f)
		q := f.controller.workqueue
		q.Add(cache.MetaObjectToName(third))
		q.ShutDown()
		_, ctx := ktesting.NewTestContext(t)
		for f.controller.processNextWorkItem(ctx) {
		}
		// third, never synced, is left to the next process; web's status is written.
		f.checkActions([]action{updateStatus(withStatus(foo, reconcile.NewDeployment(foo)))})
		f.checkEvents(`Normal DeploymentCreated Created Deployment "web"`)
	})

	t.Run("a sync that creates while the controller stops does not defer", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{foo, other}, nil, nil)
		f.controller.workqueue.Add(otherKey)
		f.controller.workqueue.ShutDown()
		if err := f.sync(foo); err != nil {
			t.Fatalf("sync = %v, want nil", err)
		}
		f.checkActions([]action{create(reconcile.NewDeployment(foo)), updateStatus(withStatus(foo, reconcile.NewDeployment(foo)))})
		f.checkEvents(`Normal DeploymentCreated Created Deployment "web"`)
	})
}

// TestSyncHandlerMarksRefusals checks that only a reported refusal gets the capped
// backoff of processNextWorkItem.
func TestSyncHandlerMarksRefusals(t *testing.T) {
	foo := newFoo("web", nil)
	terminating := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("namespace is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused by a policy", apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("no")), true},
		{"namespace being deleted", terminating, false},
		{"fenced: another replica holds the Lease", fencedError(), false},
		{"server unavailable", apierrors.NewServiceUnavailable("etcd is down"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			err := f.sync(foo)
			if err == nil {
				t.Fatal("syncHandler() = nil, want an error")
			}
			if got := errors.Is(err, errRejected); got != tt.want {
				t.Errorf("errors.Is(%v, errRejected) = %v, want %v", err, got, tt.want)
			}
		})
	}
}

// TestNotOwnedIsReportedOncePerHolder syncs a Foo whose Deployment name is taken while
// its status writes fail, so that the status never says so: the Warning is recorded
// once, and again only for another holder of the name.
func TestNotOwnedIsReportedOncePerHolder(t *testing.T) {
	foo := newFoo("web", nil)
	holder := foreignDeployment("web", map[string]string{reconcile.FooUIDLabel: "x"})
	f := newFixture(t, []*samplev1alpha1.Foo{foo}, []*appsv1.Deployment{holder}, nil)
	f.client.PrependReactor("update", "foos", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	const warning = `Warning DeploymentNotOwned Deployment "web" already exists and is not controlled by this Foo; delete it or choose another spec.deploymentName`
	for range 3 {
		if err := f.sync(foo); err == nil {
			t.Fatal("syncHandler() = nil, want the status write's error")
		}
	}
	f.checkEvents(warning)

	another := modified(holder, func(d *appsv1.Deployment) { d.UID = "another-holder-uid" })
	if err := f.controller.deploymentsIndexer.Update(cachedCopy(another)); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(foo); err == nil {
		t.Fatal("syncHandler() = nil, want the status write's error")
	}
	f.checkEvents(warning)
}

// fencedError is the fencing policy's refusal of a Deployment write: this Pod no longer
// holds the Lease.
func fencedError() error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
		errors.New("ValidatingAdmissionPolicy '"+tenure.FencingPolicy+"' with binding '"+tenure.FencingPolicy+"' denied request: "+
			tenure.FencedMessage+"Pod a_1 does not hold the Lease sample-controller-system/sample-controller"+tenure.HeldByAnother+"b_2"))
}

func TestSyncHandlerStatusConflict(t *testing.T) {
	// A Foo whose Deployment the last sync created and recorded.
	stale := modifiedFoo(newFoo("web", ptr.To[int32](2)), func(f *samplev1alpha1.Foo) {
		f.Status.Deployments = []samplev1alpha1.CreatedDeployment{{Name: "web", UID: createdUID("web")}}
	})
	ready := availableDeployment(stale)
	// Someone changed the Foo's labels meanwhile: same generation, new resourceVersion.
	fresh := modifiedFoo(stale, func(f *samplev1alpha1.Foo) {
		f.ResourceVersion = "2"
		f.Labels = map[string]string{"team": "blue"}
	})

	t.Run("retries with the foo as the server has it", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{stale}, []*appsv1.Deployment{ready}, nil)
		conflictOnce(f)
		if err := f.client.Tracker().Update(foosResource, fresh.DeepCopy(), fresh.Namespace); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()

		if err := f.sync(stale); err != nil {
			t.Fatalf("syncHandler() = %v, want nil", err)
		}
		f.checkActions([]action{
			updateStatus(withStatus(stale, ready)),
			get(foosResource, "web"),
			updateStatus(withStatus(fresh, ready)),
		})
		f.checkEvents()
	})

	t.Run("leaves the write to the next sync when the spec changed", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{stale}, []*appsv1.Deployment{ready}, nil)
		conflictOnce(f)
		changed := modifiedFoo(fresh, func(f *samplev1alpha1.Foo) { f.Generation = 2; f.Spec.Replicas = ptr.To[int32](3) })
		if err := f.client.Tracker().Update(foosResource, changed, changed.Namespace); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()

		if err := f.sync(stale); err != nil {
			t.Fatalf("syncHandler() = %v, want nil", err)
		}
		f.checkActions([]action{
			updateStatus(withStatus(stale, ready)),
			get(foosResource, "web"),
		})
	})

	// A new Foo renamed while its first Deployment is created: the next sync, for the
	// new name, must know that Deployment to delete it.
	t.Run("keeps the record of what it created when a new spec takes the status write", func(t *testing.T) {
		foo := newFoo("web", ptr.To[int32](2))
		f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
		conflictOnce(f)
		renamed := modifiedFoo(foo, func(f *samplev1alpha1.Foo) {
			f.ResourceVersion, f.Generation, f.Spec.DeploymentName = "2", 2, "web-v2"
		})
		update(f, renamed)
		f.client.ClearActions()

		if err := f.sync(foo); err != nil {
			t.Fatalf("syncHandler() = %v, want nil", err)
		}
		f.checkActions([]action{
			create(reconcile.NewDeployment(foo)),
			updateStatus(withStatus(foo, reconcile.NewDeployment(foo))),
			get(foosResource, "web"),
			get(foosResource, "web"),
			updateStatus(modifiedFoo(renamed, func(f *samplev1alpha1.Foo) {
				f.Status.Deployments = []samplev1alpha1.CreatedDeployment{{Name: "web", UID: createdUID("web")}}
			})),
		})
	})

	// The new Foo has the same name and generation, but not the old one's Deployment:
	// the old status (Ready, a selector of the old Pods) must not reach it.
	t.Run("leaves a foo recreated under the same name to its own sync", func(t *testing.T) {
		f := newFixture(t, []*samplev1alpha1.Foo{stale}, []*appsv1.Deployment{ready}, nil)
		conflictOnce(f)
		recreated := modifiedFoo(fresh, func(f *samplev1alpha1.Foo) { f.UID = "web-uid-2" })
		if err := f.client.Tracker().Delete(foosResource, stale.Namespace, stale.Name); err != nil {
			t.Fatal(err)
		}
		if err := f.client.Tracker().Add(recreated); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()

		if err := f.sync(stale); err != nil {
			t.Fatalf("syncHandler() = %v, want nil", err)
		}
		f.checkActions([]action{
			updateStatus(withStatus(stale, ready)),
			get(foosResource, "web"),
		})
	})
}

// TestSyncHandlerWaitsForItsOwnWrites runs two syncs of a scaled Foo before the
// informers deliver the first one's writes. The second would update the Deployment
// again from its stale copy, and fail on a conflict; it must do nothing until the
// caches hold what the first wrote.
func TestSyncHandlerWaitsForItsOwnWrites(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	d := availableDeployment(foo)
	foo = withStatus(foo, d)
	scaled := modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.Spec.Replicas = ptr.To[int32](3); f.Generation = 2 })
	f := newFixture(t, []*samplev1alpha1.Foo{scaled}, []*appsv1.Deployment{d}, nil)
	fakeapiserver.Versioned(f.kubeclient, deploymentsResource)
	fakeapiserver.Versioned(f.client, foosResource)
	skips := func() float64 { return testutil.ToFloat64(staleSkipsTotal.WithLabelValues(writes.Foos)) }

	if err := f.sync(scaled); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if got := len(f.kubeclient.Actions()) + len(f.client.Actions()); got != 2 {
		t.Fatalf("first sync made %d requests, want 2 (the Deployment update, the status)", got)
	}
	f.kubeclient.ClearActions()
	f.client.ClearActions()

	before := skips()
	err := f.sync(scaled)
	if !errors.Is(err, errStaleCache) {
		t.Errorf("second sync on stale caches: err = %v, want errStaleCache", err)
	}
	f.checkActions(nil)
	if got := skips() - before; got != 1 {
		t.Errorf("stale skips counted = %v, want 1", got)
	}

	// The informers deliver the writes: the Deployment first, then the status.
	deliver := func(indexer cache.Indexer, obj any) {
		t.Helper()
		if err := indexer.Update(obj); err != nil {
			t.Fatal(err)
		}
	}
	server, err := f.kubeclient.Tracker().Get(deploymentsResource, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	deliver(f.controller.deploymentsIndexer, cachedCopy(server.(*appsv1.Deployment)))
	if err := f.sync(scaled); !errors.Is(err, errStaleCache) {
		t.Errorf("sync with the Foo cache still behind: err = %v, want errStaleCache", err)
	}
	written, err := f.client.Tracker().Get(foosResource, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	deliver(f.controller.foosIndexer, written)
	if err := f.sync(written.(*samplev1alpha1.Foo)); err != nil {
		t.Errorf("sync once the caches caught up: %v", err)
	}
	f.checkActions(nil)
}

// TestSyncHandlerOnAFooGoneFromTheServer: a new Foo is deleted after its Deployment is
// created and before its first status write, and the garbage collector deletes that
// Deployment while the Foo's deletion has not reached the cache. Its status still says
// it never had a Deployment, so nothing but what the status write learnt keeps the
// next sync from creating one for a Foo that no longer exists, again after each
// collection, until the cache catches up.
func TestSyncHandlerOnAFooGoneFromTheServer(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
	if err := f.client.Tracker().Delete(foosResource, foo.Namespace, foo.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(foo); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if got := len(f.kubeclient.Actions()); got != 1 {
		t.Fatalf("first sync made %d Deployment requests, want 1 (the create)", got)
	}
	// The garbage collector deletes the Deployment; the Deployment cache never had it.
	if err := f.kubeclient.Tracker().Delete(deploymentsResource, foo.Namespace, foo.Spec.DeploymentName); err != nil {
		t.Fatal(err)
	}
	f.kubeclient.ClearActions()
	f.client.ClearActions()

	if err := f.sync(foo); !errors.Is(err, errStaleCache) {
		t.Errorf("sync of a Foo the API server said was gone: err = %v, want errStaleCache", err)
	}
	f.checkActions(nil)

	// Its deletion reaches the cache: nothing is left of it.
	f.controller.forgetFoo(foo)
	if f.controller.writes.Len() != 0 {
		t.Errorf("the Foo is still remembered after its deletion event (%d records)", f.controller.writes.Len())
	}
}

// TestNothingOutlivesAFooDeletedMidSync: the Foo's delete event reaches the handlers
// while a sync of it still runs, and the sync then learns what it would remember until
// that event (a refusal it reported, the Foo gone from the API server). No event comes
// after the deletion to forget it: the sync's end must, or the record stays for ever.
func TestNothingOutlivesAFooDeletedMidSync(t *testing.T) {
	for _, c := range []struct {
		name string
		// deleteDuring deletes foo while the sync is at one of its requests.
		deleteDuring func(f *fixture, foo *samplev1alpha1.Foo)
	}{{
		name: "the Deployment create is refused",
		deleteDuring: func(f *fixture, foo *samplev1alpha1.Foo) {
			f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
				f.controller.forgetFoo(foo)
				return true, nil, refusal
			})
		},
	}, {
		name: "the status write finds the Foo gone",
		deleteDuring: func(f *fixture, foo *samplev1alpha1.Foo) {
			f.client.PrependReactor("update", "foos", func(core.Action) (bool, runtime.Object, error) {
				f.controller.forgetFoo(foo)
				return true, nil, apierrors.NewNotFound(foosResource.GroupResource(), foo.Name)
			})
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			foo := newFoo("web", ptr.To[int32](1))
			f := newFixture(t, []*samplev1alpha1.Foo{foo}, nil, nil)
			c.deleteDuring(f, foo)
			_ = f.sync(foo)
			if n := f.controller.writes.Len(); n != 0 {
				t.Errorf("%d records left of a Foo deleted during its sync, want 0", n)
			}
		})
	}
}

// TestDriftIsRevertedOnlyOnTheVersionSeen syncs a Foo whose cached Deployment drifted,
// while the API server already holds a later version that someone else wrote. The
// controller writes the Deployment by a patch made from its trimmed cache: the patch
// must carry the cached resourceVersion, so that it is refused rather than applied on
// top of a version the controller never saw.
func TestDriftIsRevertedOnlyOnTheVersionSeen(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](1))
	drifted := modified(availableDeployment(foo), func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) })
	foo = withStatus(foo, drifted)
	f := newFixture(t, []*samplev1alpha1.Foo{foo}, []*appsv1.Deployment{drifted}, nil)
	later := modified(drifted, func(d *appsv1.Deployment) {
		d.ResourceVersion = "2"
		d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	})
	if err := f.kubeclient.Tracker().Update(deploymentsResource, later, later.Namespace); err != nil {
		t.Fatal(err)
	}
	fakeapiserver.Versioned(f.kubeclient, deploymentsResource)

	if err := f.sync(foo); !apierrors.IsConflict(err) {
		t.Errorf("sync from a stale cache: err = %v, want a conflict", err)
	}
	stored, err := f.kubeclient.Tracker().Get(deploymentsResource, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(later, stored) {
		t.Errorf("the later version was written over: stored %+v", stored)
	}
}
