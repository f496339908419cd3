package election

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
)

// TestCancelledCreateIsLeftToExpire cancels an election while its create of the
// Lease is in flight, after the apiserver committed it: the Lease names this process,
// which will never renew it. Run returns at once and leaves it to expire: a release
// would let a replica that saw it held here take it at once, beside the holder it may
// have been deleted under, whom the create's wait is for.
func TestCancelledCreateIsLeftToExpire(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	client.PrependReactor("create", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		create := action.(clienttesting.CreateAction)
		// Committed; then the caller gives up on the answer.
		if err := client.Tracker().Create(leases, create.GetObject(), create.GetNamespace()); err != nil {
			return true, nil, err
		}
		cancel()
		return true, nil, context.Canceled
	})
	result := Run(ctx, Config{
		Lock: testLock(client, Lease{Name: "slot-0", Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond}),
	}, func(context.Context) error {
		t.Error("the work ran, though the election was cancelled before it held the Lease")
		return nil
	})
	if result.Worked || result.ReleaseErr != nil {
		t.Errorf("Run = %+v, want not worked, and no error", result)
	}
	if holder := testHolder(t, client); holder != "a" {
		t.Errorf("the Lease names %q, want a's, left to expire", holder)
	}
}

// TestCancelledWaitLeavesOthersLeases cancels an election waiting for another's
// Lease: the Lease stays as it was.
func TestCancelledWaitLeavesOthersLeases(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "slot-0", Namespace: "system"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("b"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
		},
	})
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	result := Run(ctx, Config{
		Lock: testLock(client, Lease{Name: "slot-0", Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 50 * time.Millisecond}),
	}, func(context.Context) error {
		t.Error("the work ran while b held the Lease")
		return nil
	})
	if result.Worked || result.ReleaseErr != nil {
		t.Errorf("Run = %+v, want not worked, nothing to release", result)
	}
	if holder := testHolder(t, client); holder != "b" {
		t.Errorf("the Lease names %q, want b's untouched", holder)
	}
}

// TestLostWhileDrainingIsReported loses the Lease while the work drains after ctx was
// cancelled (its in-flight writes finish before it returns): the loss is reported,
// since those writes could land after the next holder's first, and Run returns only
// once the work has.
func TestLostWhileDrainingIsReported(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	var cut atomic.Bool
	client.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if cut.Load() {
			return true, nil, errors.New("cut off from the apiserver")
		}
		return false, nil, nil
	})
	started := make(chan struct{})
	var lost atomic.Bool
	var workReturned time.Time
	result := make(chan Result)
	go func() {
		result <- Run(ctx, Config{
			Lock:   testLock(client, Lease{Name: "slot-0", Duration: 2 * time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}),
			OnLost: func() { lost.Store(true) },
		}, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			time.Sleep(1500 * time.Millisecond) // in-flight writes finishing
			workReturned = time.Now()
			return nil
		})
	}()
	<-started
	cut.Store(true)
	cancel()
	r := <-result
	if returned := time.Now(); returned.Before(workReturned) || workReturned.IsZero() {
		t.Errorf("Run returned before the work did")
	}
	if !lost.Load() {
		t.Error("the Lease was lost while the work drained, and OnLost was not called")
	}
	if !r.Worked {
		t.Errorf("Run = %+v, want worked", r)
	}
}

// TestTakenOverWhileWorking has another replica take the Lease while this one works,
// as after this process was frozen for longer than the Lease: its next renewal is
// refused (the resourceVersion moved) and its read shows the other holder. The work's
// tenure, which its context carries, ends at that read, and so does the election: the
// loss is reported at once, not after client-go's renew deadline.
func TestTakenOverWhileWorking(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Released before: taking it is an update, and the tenure begins at once.
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: "slot-0", Namespace: "system", ResourceVersion: fakeapiserver.NextResourceVersion(),
			Annotations: map[string]string{ReleasedByAnnotation: "b"},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
	})
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	// The fake does not check resourceVersions: refuse an update while another holds
	// the Lease, as the apiserver would refuse the stale one.
	// Once b has taken over, every update of a's is refused.
	var takingOver atomic.Bool
	client.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if takingOver.Load() {
			return true, nil, apierrors.NewConflict(leases.GroupResource(), "slot-0", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	const renewDeadline = 3 * time.Second
	working := make(chan *tenure.Tenure, 1)
	lost := make(chan time.Time, 1)
	result := make(chan Result, 1)
	go func() {
		result <- Run(ctx, Config{
			Lock:   testLock(client, Lease{Name: "slot-0", Duration: 4 * time.Second, RenewDeadline: renewDeadline, RetryPeriod: 50 * time.Millisecond}),
			OnLost: func() { lost <- time.Now() },
		}, func(ctx context.Context) error {
			working <- tenure.FromContext(ctx)
			<-ctx.Done()
			return nil
		})
	}()
	held := <-working
	if held == nil || !held.Valid() {
		t.Fatalf("the work started with tenure %v, want a valid one", held)
	}
	takingOver.Store(true)
	// A renewal already past the reactor lands before b's write, not after it.
	time.Sleep(100 * time.Millisecond)
	lease, err := client.CoordinationV1().Leases("system").Get(ctx, "slot-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.HolderIdentity = ptr.To("b")
	lease.ResourceVersion = fakeapiserver.NextResourceVersion()
	if err := client.Tracker().Update(leases, lease, "system"); err != nil {
		t.Fatal(err)
	}
	takenOver := time.Now()
	select {
	case at := <-lost:
		if late := at.Sub(takenOver); late > renewDeadline/3 {
			t.Errorf("the loss was reported %v after the takeover, want within %v (the renew deadline is %v)", late, renewDeadline/3, renewDeadline)
		}
	case <-time.After(2 * renewDeadline):
		t.Fatal("the loss was never reported")
	}
	if held.Valid() {
		t.Error("the tenure is still valid after the Lease was seen held by another")
	}
	if r := <-result; !r.Worked {
		t.Errorf("Run = %+v, want worked", r)
	}
	if holder := testHolder(t, client); holder != "b" {
		t.Errorf("the Lease names %q, want b's untouched", holder)
	}
}

// TestCreatedLeaseWaitsADuration runs an election with no Lease: this process creates
// it, and its work starts a whole Lease duration later, with a valid tenure, in case
// the Lease was deleted under a holder that still writes.
func TestCreatedLeaseWaitsADuration(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const duration = 2 * time.Second
	began := time.Now()
	var started time.Time
	var valid bool
	client := fake.NewClientset()
	result := Run(ctx, Config{
		Lock: testLock(client, Lease{Name: "slot-0", Duration: duration, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}),
	}, func(ctx context.Context) error {
		started, valid = time.Now(), tenure.FromContext(ctx).Valid()
		return nil
	})
	if !result.Worked {
		t.Fatalf("Run = %+v, want worked", result)
	}
	if waited := started.Sub(began); waited < duration {
		t.Errorf("the work started %v after the election, want at least the Lease duration %v", waited, duration)
	}
	if !valid {
		t.Error("the work started without a valid tenure")
	}
	if holder := testHolder(t, client); holder != "" {
		t.Errorf("the Lease still names %q once the work returned, want it released", holder)
	}
}

// TestStopWhileWaitingOutACreatedLease stops a process that created the Lease while it
// waits out the Lease duration: Run returns at once, without running the work, and
// leaves the Lease to expire rather than release it before the wait is over.
func TestStopWhileWaitingOutACreatedLease(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	const duration = time.Minute
	// The first renewal comes a retry period into the wait: the SIGTERM then.
	var renewals atomic.Int32
	client.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if renewals.Add(1) == 1 {
			cancel()
		}
		return false, nil, nil
	})
	began := time.Now()
	result := Run(ctx, Config{
		Lock: testLock(client, Lease{Name: "slot-0", Duration: duration, RenewDeadline: 45 * time.Second, RetryPeriod: 100 * time.Millisecond}),
	}, func(context.Context) error {
		t.Error("the work ran, though the process was stopped before its tenure began")
		return nil
	})
	if took := time.Since(began); took > duration/2 {
		t.Errorf("Run returned %v after the stop, want at once, not at the end of the %v wait", took, duration)
	}
	if result.Worked || result.Err != nil || result.ReleaseErr != nil {
		t.Errorf("Run = %+v, want not worked, and no error", result)
	}
	if holder := testHolder(t, client); holder != "a" {
		t.Errorf("the Lease names %q, want a's, left to expire", holder)
	}
}

// testLock is member a's lock of the Lease system/slot-0, with lease's timings, on a
// client whose Leases get resourceVersions and conflicts as on an API server.
func testLock(client *fake.Clientset, lease Lease) *LeaseLock {
	fakeapiserver.Versioned(client, coordinationv1.SchemeGroupVersion.WithResource("leases"))
	lease.Namespace, lease.Name, lease.Identity = "system", "slot-0", "a"
	return lease.NewLock(client, tenure.New(clock.RealClock{}), LockOptions{})
}

// testHolder is the holder the Lease system/slot-0 names.
func testHolder(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	lease, err := client.CoordinationV1().Leases("system").Get(context.Background(), "slot-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// TestReleaseAfterOwnRenewalCommitted releases a Lease after a renewal of this process
// whose answer was cut off (its context cancelled as the work stopped) was committed:
// Release knows the Lease for its own by the renew time it sent, and empties it, or
// the next holder would wait a whole Lease duration.
func TestReleaseAfterOwnRenewalCommitted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	client := fake.NewClientset()
	fakeapiserver.Versioned(client, leases)
	clock := clocktesting.NewFakeClock(time.Now())
	lock := Lease{Namespace: "system", Name: "slot-0", Identity: "a", Duration: 15 * time.Second}.NewLock(client, tenure.New(clock), LockOptions{Clock: clock})
	if _, _, err := lock.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get = %v, want NotFound", err)
	}
	now := metav1.NewTime(time.Now())
	record := resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
	if err := lock.Create(ctx, record); err != nil {
		t.Fatal(err)
	}
	// Past the wait its create began, within which it would be left to expire.
	clock.Step(16 * time.Second)
	// A renewal the apiserver commits, whose answer is lost.
	var lost atomic.Bool
	lost.Store(true)
	client.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if !lost.Swap(false) {
			return false, nil, nil
		}
		renewed := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		renewed.ResourceVersion = fakeapiserver.NextResourceVersion()
		if err := client.Tracker().Update(leases, renewed, "system"); err != nil {
			return true, nil, err
		}
		return true, nil, context.Canceled
	})
	record.RenewTime = metav1.NewTime(now.Add(time.Second))
	if err := lock.Update(ctx, record); !errors.Is(err, context.Canceled) {
		t.Fatalf("Update = %v, want its answer lost", err)
	}
	released, err := lock.Release(ctx)
	if !released || err != nil {
		t.Errorf("Release = %v, %v; want released", released, err)
	}
	if holder := testHolder(t, client); holder != "" {
		t.Errorf("the Lease still names %q, who will never renew it", holder)
	}
}
