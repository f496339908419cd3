package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned/fake"
)

// TestRun runs the controller with real informers on fake clientsets, from an empty
// cache to a converged Foo, and checks that cancellation stops it.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](2))
	unrelated := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "default"}}
	kubeclient, client := newClientsets([]runtime.Object{unrelated}, foo)
	c, done := runController(t, ctx, kubeclient, client, 2)

	// The controller creates the Deployment and reports on it.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.SamplecontrollerV1alpha1().Foos("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == 1 && got.Status.Selector != "", nil
	}); err != nil {
		t.Fatalf("Foo status was never written: %v", err)
	}
	if _, err := kubeclient.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("Deployment was not created: %v", err)
	}
	// The label selector keeps unrelated Deployments out of the cache.
	if _, err := c.cachedDeployment("default", "unrelated"); !apierrors.IsNotFound(err) {
		t.Errorf("unrelated Deployment in the cache: err = %v, want NotFound", err)
	}
	// Cached objects carry no managedFields.
	cachedFoo, err := c.foosLister.Foos("default").Get("web")
	if err != nil {
		t.Fatal(err)
	}
	if len(cachedFoo.ManagedFields) != 0 {
		t.Errorf("cached Foo has %d managedFields entries, want 0", len(cachedFoo.ManagedFields))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if !c.workqueue.ShuttingDown() {
		t.Error("work queue still running after Run returned")
	}
}

// TestRunStartsOnTheCachesSignal runs the controller in a bubble of fake time, where
// time passes only when every goroutine waits: the workers must have made the Foo's
// Deployment by the time everything waits, before any time passed. A wait for the caches that polls (client-go's
// WaitForCacheSync checks every 100 ms) would have let a tick pass first, at every
// start, even when the caches filled at once.
func TestRunStartsOnTheCachesSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		kubeclient, client := newClientsets(nil, newFoo("web", ptr.To[int32](1)))
		_, done := runController(t, ctx, kubeclient, client, 1)

		// Wait returns once every other goroutine waits, before time moves on.
		synctest.Wait()
		if _, err := kubeclient.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
			t.Errorf("once every goroutine waited, %v after the start: %v; want the Deployment made by then", time.Since(start), err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// settledRun is a run of the controller, in a bubble of fake time, on one new Foo
// "web" with one replica, over fake API servers, after every watch event has been
// delivered and every goroutine waits.
type settledRun struct {
	deployments, foos *fakeapiserver.Server
	controller        *Controller
	syncs             *atomic.Int64
	stop              func()
}

// runSettled makes a settledRun inside synctest.Test. The Foo watch lags by 10 ms, the
// Deployment watch by deploymentsLag; wrap, when set, wraps the clientset the
// controller writes Deployments with. stop cancels the run and checks that it ended
// well.
func runSettled(t *testing.T, deploymentsLag time.Duration, wrap func(kube kubernetes.Interface, foos *fakeapiserver.Server) kubernetes.Interface) settledRun {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	kubeclient, client := k8sfake.NewClientset(), fake.NewClientset()
	r := settledRun{
		deployments: fakeapiserver.New(kubeclient, deploymentsResource, "Deployment", fakeapiserver.WatchFault{Lag: deploymentsLag}),
		foos:        fakeapiserver.New(client, foosResource, "Foo", fakeapiserver.WatchFault{Lag: 10 * time.Millisecond}),
		syncs:       &atomic.Int64{},
	}
	if _, err := r.foos.Create(newFoo("web", ptr.To[int32](1))); err != nil {
		t.Fatal(err)
	}
	c, done := runController(t, ctx, kubeclient, client, 1, func(c *Controller) {
		countSyncs(c, r.syncs)
		if wrap != nil {
			c.kubeclientset = wrap(kubeclient, r.foos)
		}
	})
	r.controller = c
	r.stop = func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	}
	time.Sleep(time.Minute) // in the bubble: until every watch event is delivered
	synctest.Wait()
	return r
}

// TestRunSyncsANewFooOnce runs the controller on a new Foo until everything waits,
// with every write's event delivered: one sync creates the Deployment and writes the
// status, and the echoes of those two writes cause no other, nor leave anything
// behind in the write tracker, whether the Deployment's event reaches the handlers
// after the answer to its create, as when the watch lags, or before.
func TestRunSyncsANewFooOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lag delays the Deployment watch's events; answerLate delays the answer to
		// the create until its event has been handled.
		lag        time.Duration
		answerLate bool
	}{
		{name: "the Deployment's event after the answer", lag: 10 * time.Millisecond},
		{name: "the Deployment's event before the answer", answerLate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var wrap func(kubernetes.Interface, *fakeapiserver.Server) kubernetes.Interface
				if tc.answerLate {
					wrap = func(kube kubernetes.Interface, _ *fakeapiserver.Server) kubernetes.Interface {
						return lateCreates{Interface: kube}
					}
				}
				r := runSettled(t, tc.lag, wrap)
				defer r.stop()
				c := r.controller
				foo, err := r.foos.Get("default", "web")
				if err != nil {
					t.Fatal(err)
				}
				if cached, err := c.foosLister.Foos("default").Get("web"); err != nil || cached.ResourceVersion != foo.(metav1.Object).GetResourceVersion() {
					t.Fatalf("the status write's event never reached the cache: %v", err)
				}
				if _, err := c.cachedDeployment("default", "web"); err != nil {
					t.Fatalf("the Deployment's event never reached the cache: %v", err)
				}
				if got := (fakeapiserver.RequestCounts{Creates: 1}); r.deployments.Counts() != got {
					t.Errorf("Deployment requests %+v, want %+v", r.deployments.Counts(), got)
				}
				if got := (fakeapiserver.RequestCounts{Updates: 1}); r.foos.Counts() != got {
					t.Errorf("Foo requests %+v, want %+v (the status)", r.foos.Counts(), got)
				}
				if got := r.syncs.Load(); got != 1 {
					t.Errorf("%d syncs of one new Foo, want 1", got)
				}
				if n := c.writes.Len(); n != 0 {
					t.Errorf("%d write tracker entries left, want 0", n)
				}
			})
		})
	}
}

// lateCreates is a clientset whose Deployment creates return a second after the API
// server made them: in a bubble of fake time, after the informers have delivered the
// create's event and every handler has run. during, when set, runs right after the
// create, as someone else's write. (A reactor that slept would hold the fake
// clientset's lock, which a watch being opened waits for.)
type lateCreates struct {
	kubernetes.Interface
	during func()
}

func (c lateCreates) AppsV1() appsv1client.AppsV1Interface {
	return lateAppsV1{c.Interface.AppsV1(), c.during}
}

type lateAppsV1 struct {
	appsv1client.AppsV1Interface
	during func()
}

func (c lateAppsV1) Deployments(namespace string) appsv1client.DeploymentInterface {
	return lateDeployments{c.AppsV1Interface.Deployments(namespace), c.during}
}

type lateDeployments struct {
	appsv1client.DeploymentInterface
	during func()
}

func (c lateDeployments) Create(ctx context.Context, d *appsv1.Deployment, opts metav1.CreateOptions) (*appsv1.Deployment, error) {
	created, err := c.DeploymentInterface.Create(ctx, d, opts)
	if c.during != nil {
		c.during()
	}
	time.Sleep(time.Second)
	return created, err
}

// TestRunSyncsAgainOnAChangeDuringTheSync: the Foo is scaled while the sync that
// creates its Deployment runs. That sync's status write finds a new generation and
// leaves it to the next sync, writing only its record of the Deployment; the spec
// change's event, held until the sync ends, must bring the Foo back, or the Deployment
// keeps the old replica count for good.
func TestRunSyncsAgainOnAChangeDuringTheSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := runSettled(t, 10*time.Millisecond, func(kube kubernetes.Interface, foos *fakeapiserver.Server) kubernetes.Interface {
			return lateCreates{Interface: kube, during: func() {
				if err := foos.Edit("default", "web", func(obj runtime.Object) {
					obj.(*samplev1alpha1.Foo).Spec.Replicas = ptr.To[int32](3)
				}); err != nil {
					t.Error(err)
				}
			}}
		})
		defer r.stop()
		d, err := r.deployments.Get("default", "web")
		if err != nil {
			t.Fatal(err)
		}
		if got := *d.(*appsv1.Deployment).Spec.Replicas; got != 3 {
			t.Errorf("Deployment replicas = %d, want 3", got)
		}
		foo, err := r.foos.Get("default", "web")
		if err != nil {
			t.Fatal(err)
		}
		if got := foo.(*samplev1alpha1.Foo).Status.ObservedGeneration; got != 2 {
			t.Errorf("Foo status.observedGeneration = %d, want 2", got)
		}
		// The create's, the new spec's, and between them one skipped if it comes
		// before the cache holds the record the first kept on the new spec's Foo.
		if got := r.syncs.Load(); got < 2 || got > 3 {
			t.Errorf("%d syncs, want 2 or 3", got)
		}
	})
}

// countSyncs counts c's syncs in n, this controller's only: the metrics are the
// process's.
func countSyncs(c *Controller, n *atomic.Int64) {
	sync := c.sync
	c.sync = func(ctx context.Context, key cache.ObjectName) error {
		n.Add(1)
		return sync(ctx, key)
	}
}

// TestRunFinishesInFlightSyncs cancels Run while a sync waits on the API server: the
// sync completes, and Run returns only after it.
func TestRunFinishesInFlightSyncs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](1))
	kubeclient, client := newClientsets(nil, foo)
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release
		finished.Store(true)
		return false, nil, nil // on to the object tracker
	})
	c, done := runController(t, ctx, kubeclient, client, 1)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync never reached the API server")
	}
	cancel()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.workqueue.ShuttingDown(), nil
	}); err != nil {
		t.Fatal("the queue did not shut down after cancellation")
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if !finished.Load() {
		t.Error("Run returned before its in-flight sync finished")
	}
	if _, err := kubeclient.Tracker().Get(deploymentsResource, "default", "web"); err != nil {
		t.Errorf("the in-flight create did not complete: %v", err)
	}
}

// newClientsets returns fake clientsets holding kubeObjects and foos whose watches
// carry copies of the stored objects (fakeapiserver.CopiedWatches), for informers whose
// transform edits what they receive, and which give created Deployments a UID. Tests that install a fakeapiserver.Server have it.
func newClientsets(kubeObjects []runtime.Object, foos ...runtime.Object) (*k8sfake.Clientset, *fake.Clientset) {
	kubeclient, client := k8sfake.NewClientset(kubeObjects...), fake.NewClientset(foos...)
	giveCreatedUIDs(kubeclient)
	fakeapiserver.CopiedWatches(kubeclient)
	fakeapiserver.CopiedWatches(client)
	return kubeclient, client
}

// runController builds a controller with real informers on the fake clientsets, as
// main does, applies options to it, and runs it until ctx is cancelled. Run's result
// arrives on the channel.
func runController(t *testing.T, ctx context.Context, kubeclient *k8sfake.Clientset, client *fake.Clientset, workers int, options ...func(*Controller)) (*Controller, <-chan error) {
	t.Helper()
	c, err := NewController(ctx, Config{KubeClient: kubeclient, SampleClient: client, Recorder: events.NewFakeRecorder(100)})
	if err != nil {
		t.Fatal(err)
	}
	for _, option := range options {
		option(c)
	}
	c.StartInformers(ctx)
	t.Cleanup(c.ShutdownInformers)

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, workers) }()
	return c, done
}

// TestRunWakesFoosWhenDeploymentsChangeHands checks, on real informers, that a change
// that can end a Foo's wait wakes it at once rather than at the next recheck: an owner
// reference removed by hand, and a Foo recreated under the same name whose
// predecessor's Deployment goes away.
func TestRunWakesFoosWhenDeploymentsChangeHands(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	foo := newFoo("web", ptr.To[int32](1))
	kubeclient, client := newClientsets(nil, foo)
	fakeapiserver.Versioned(client, foosResource)
	runController(t, ctx, kubeclient, client, 2)
	deployments := kubeclient.AppsV1().Deployments("default")
	foos := client.SamplecontrollerV1alpha1().Foos("default")

	// Well within notOwnedRecheckInterval.
	const within = 10 * time.Second
	waitFor := func(what string, cond func(ctx context.Context) bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			return cond(ctx), nil
		}); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	readyReason := func(ctx context.Context) string {
		got, err := foos.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, samplev1alpha1.ConditionReady); c != nil && c.ObservedGeneration == got.Generation {
			return c.Reason
		}
		return ""
	}
	deleteDeployment := func() {
		t.Helper()
		if err := deployments.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	controlledBy := func(ctx context.Context, uid types.UID) bool {
		d, err := deployments.Get(ctx, "web", metav1.GetOptions{})
		return err == nil && metav1.GetControllerOf(d) != nil && metav1.GetControllerOf(d).UID == uid
	}

	waitFor("the Deployment", func(ctx context.Context) bool { return controlledBy(ctx, foo.UID) })
	waitFor("the status", func(ctx context.Context) bool { return readyReason(ctx) == samplev1alpha1.ReasonDeploymentProgressing })

	// Someone takes the Deployment away from the Foo.
	d, err := deployments.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.OwnerReferences = nil
	d.ResourceVersion = "100" // the fake API server keeps the resourceVersion it is given
	if _, err := deployments.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the Foo to report that it lost its Deployment", func(ctx context.Context) bool {
		return readyReason(ctx) == samplev1alpha1.ReasonDeploymentNotOwned
	})

	// The Foo is deleted and created again; the fake clientsets have no garbage
	// collector, so its predecessor's Deployment stays until this test deletes it.
	deleteDeployment()
	waitFor("a new Deployment", func(ctx context.Context) bool { return controlledBy(ctx, foo.UID) })
	if err := foos.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recreated := modifiedFoo(foo, func(f *samplev1alpha1.Foo) { f.UID = "web-uid-2"; f.ResourceVersion = "200" })
	// Through the tracker: the fake's managed fields know no schema for Foo creates.
	if err := client.Tracker().Add(recreated); err != nil {
		t.Fatal(err)
	}
	waitFor("the recreated Foo to find the name taken", func(ctx context.Context) bool {
		return readyReason(ctx) == samplev1alpha1.ReasonDeploymentNotOwned
	})
	deleteDeployment()
	waitFor("the recreated Foo's Deployment", func(ctx context.Context) bool { return controlledBy(ctx, recreated.UID) })
}

// TestRunRefusalsBackOff refuses every Deployment create with a message that differs
// on every try, as a webhook that quotes the request does. Each refusal is a new
// status, and the controller's own status write must not bring the Foo back before
// its backoff says so; it is one cause, reported by one Event.
func TestRunRefusalsBackOff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	kubeclient, client := newClientsets(nil, newFoo("web", nil))
	var creates atomic.Int32
	kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		n := creates.Add(1)
		return true, nil, apierrors.NewForbidden(deploymentsResource.GroupResource(), "web", fmt.Errorf("denied request %d", n))
	})
	fakeapiserver.Versioned(client, foosResource)
	c, _ := runController(t, ctx, kubeclient, client, 2)

	// The first refusal is reported.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.SamplecontrollerV1alpha1().Foos("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, samplev1alpha1.ConditionReady)
		return c != nil && c.Reason == samplev1alpha1.ReasonDeploymentRejected, nil
	}); err != nil {
		t.Fatalf("the refusals were never reported: %v", err)
	}
	// Backoff from 5 ms, doubling: about 10 tries in the next 3 s. A status write
	// that requeued the Foo at once would make hundreds.
	start := creates.Load()
	<-time.After(3 * time.Second)
	if tries := creates.Load() - start; tries > 20 {
		t.Errorf("%d refused creates in 3 s, want at most 20: the controller's status writes undo its backoff", tries)
	}
	// Every try was refused for the same cause, in other words: one Event.
	var warnings []string
	for len(c.recorder.(*events.FakeRecorder).Events) > 0 {
		warnings = append(warnings, <-c.recorder.(*events.FakeRecorder).Events)
	}
	if len(warnings) != 1 {
		t.Errorf("%d Events for %d refusals of one cause, want 1: %q", len(warnings), creates.Load(), warnings)
	}
}

// TestRunPutsDeploymentsFirst runs one worker over a cold start of new Foos: every
// Deployment is created before any status is written, and then every Foo gets its
// status and its Event, once.
func TestRunPutsDeploymentsFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const n = 20
	var foos []runtime.Object
	for i := range n {
		foos = append(foos, newFoo(fmt.Sprintf("foo-%02d", i), ptr.To[int32](1)))
	}
	kubeclient, client := newClientsets(nil, foos...)
	var mu sync.Mutex
	var writes []string // "deployment NAME" and "status NAME", in the order sent
	logWrite := func(what string) core.ReactionFunc {
		return func(a core.Action) (bool, runtime.Object, error) {
			name := ""
			if o, ok := a.(core.CreateAction); ok {
				name = o.GetObject().(metav1.Object).GetName()
			}
			if o, ok := a.(core.UpdateAction); ok {
				name = o.GetObject().(metav1.Object).GetName()
			}
			mu.Lock()
			defer mu.Unlock()
			writes = append(writes, what+" "+name)
			return false, nil, nil
		}
	}
	kubeclient.PrependReactor("create", "deployments", logWrite("deployment"))
	client.PrependReactor("update", "foos", logWrite("status"))
	recorder := events.NewFakeRecorder(2 * n)
	runController(t, ctx, kubeclient, client, 1, func(c *Controller) { c.recorder = recorder })

	written := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(writes)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(written()) >= 2*n, nil
	}); err != nil {
		t.Fatalf("%d writes, want %d: %v", len(written()), 2*n, err)
	}
	got := written()
	for i, w := range got {
		if want := i < n; strings.HasPrefix(w, "deployment ") != want {
			t.Fatalf("write %d is %q; want the %d Deployments first, then the statuses: %q", i, w, n, got)
		}
	}
	statuses := map[string]int{}
	for _, w := range got[n:] {
		statuses[strings.TrimPrefix(w, "status ")]++
	}
	if len(statuses) != n {
		t.Errorf("statuses written for %d Foos, want %d: %q", len(statuses), n, got[n:])
	}
	told := map[string]int{}
	for i := range n {
		select {
		case e := <-recorder.Events:
			told[e]++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d Events, want %d", i, n)
		}
	}
	for i := range n {
		e := fmt.Sprintf("Normal %s Created Deployment %q", reconcile.EventDeploymentCreated, fmt.Sprintf("foo-%02d", i))
		if told[e] != 1 {
			t.Errorf("%q told %d times, want once", e, told[e])
		}
	}
	select {
	case e := <-recorder.Events:
		t.Errorf("an Event more: %q", e)
	case <-time.After(100 * time.Millisecond):
	}
}
