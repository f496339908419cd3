package election

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
)

var leasesResource = coordinationv1.SchemeGroupVersion.WithResource("leases")

// replica is one process's lock of system/slot-0, driven as client-go's elector drives
// it: a read, then an update of what it showed.
type replica struct {
	t    *testing.T
	lock *LeaseLock
}

// testRetryPeriod is the replicas' retry period: how often a holder renews.
const testRetryPeriod = 2 * time.Second

func newReplica(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock, identity string, d time.Duration) *replica {
	return newReplicaRenewingEvery(t, client, clk, identity, d, testRetryPeriod)
}

func newReplicaRenewingEvery(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock, identity string, d, retry time.Duration) *replica {
	lease := Lease{Namespace: "system", Name: "slot-0", Identity: identity, Duration: d, RetryPeriod: retry}
	return &replica{t: t, lock: lease.NewLock(client, tenure.New(clk), LockOptions{Clock: clk})}
}

// read is what the elector sees.
func (r *replica) read() *resourcelock.LeaderElectionRecord {
	r.t.Helper()
	record, _, err := r.lock.Get(context.Background())
	if err != nil {
		r.t.Fatalf("%s: Get: %v", r.lock.Identity(), err)
	}
	return record
}

// acquire is the elector's step: it writes itself as the holder when what it read is
// free or its own, as client-go does (an expired other holder is shown free here).
func (r *replica) acquire() bool {
	r.t.Helper()
	record := r.read()
	if record.HolderIdentity != "" && record.HolderIdentity != r.lock.Identity() {
		return false
	}
	now := metav1.NewTime(r.lock.clock.Now())
	err := r.lock.Update(context.Background(), resourcelock.LeaderElectionRecord{
		HolderIdentity: r.lock.Identity(), LeaseDurationSeconds: int(r.lock.lease.Duration / time.Second),
		AcquireTime: now, RenewTime: now,
	})
	if err != nil {
		r.t.Fatalf("%s: Update: %v", r.lock.Identity(), err)
	}
	return true
}

func (r *replica) valid() bool { return r.lock.Tenure().Valid() }

// edit changes the stored Lease as another client would, with a new resourceVersion.
func edit(t *testing.T, client *fake.Clientset, change func(*coordinationv1.Lease)) {
	t.Helper()
	obj, err := client.Tracker().Get(leasesResource, "system", "slot-0")
	if err != nil {
		t.Fatal(err)
	}
	lease := obj.(*coordinationv1.Lease).DeepCopy()
	change(lease)
	lease.ResourceVersion = fakeapiserver.NextResourceVersion()
	if err := client.Tracker().Update(leasesResource, lease, "system"); err != nil {
		t.Fatal(err)
	}
}

// TestTakeoverWaitsForTheHoldersTenure drives two replicas' locks, a holding and b
// waiting, through what other clients and clocks do to a Lease, on one fake clock.
// At no instant may b hold a valid tenure while a's is valid, and b takes the Lease
// once, and only once, a's tenure must be over by a's own rules.
func TestTakeoverWaitsForTheHoldersTenure(t *testing.T) {
	const d = 15 * time.Second
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	// setupRenewingEvery has a, renewing every aRetry, create the Lease long ago and
	// hold it, and b, renewing every testRetryPeriod, see it held.
	setupRenewingEvery := func(t *testing.T, aRetry time.Duration) (*fake.Clientset, *clocktesting.FakeClock, *replica, *replica) {
		client := fake.NewClientset()
		fakeapiserver.Versioned(client, leasesResource)
		clk := clocktesting.NewFakeClock(start)
		a, b := newReplicaRenewingEvery(t, client, clk, "a", d, aRetry), newReplica(t, client, clk, "b", d)
		// a creates the Lease long ago, and holds it.
		if _, _, err := a.lock.Get(context.Background()); !apierrors.IsNotFound(err) {
			t.Fatalf("Get = %v, want NotFound", err)
		}
		now := metav1.NewTime(clk.Now())
		if err := a.lock.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}); err != nil {
			t.Fatal(err)
		}
		clk.Step(d)
		if !a.acquire() || !a.valid() {
			t.Fatal("a does not hold the Lease it created")
		}
		if b.acquire() {
			t.Fatal("b took a Lease a had just renewed")
		}
		return client, clk, a, b
	}
	setup := func(t *testing.T) (*fake.Clientset, *clocktesting.FakeClock, *replica, *replica) {
		return setupRenewingEvery(t, testRetryPeriod)
	}
	// step moves the clock on, a renewing when alive, b trying to take the Lease,
	// checking that the two tenures never overlap; it returns when b took it.
	step := func(t *testing.T, clk *clocktesting.FakeClock, a, b *replica, aAlive bool, until time.Duration) (took time.Duration, ok bool) {
		t.Helper()
		for at := time.Duration(0); at <= until; at += 500 * time.Millisecond {
			if aAlive {
				a.acquire()
			}
			took := b.acquire()
			if a.valid() && b.valid() {
				t.Fatalf("%v in: a's and b's tenures are both valid", at)
			}
			if took && b.valid() {
				return at, true
			}
			clk.Step(500 * time.Millisecond)
		}
		return 0, false
	}

	t.Run("a holder emptied by another client is waited out; its holder takes it back", func(t *testing.T) {
		client, clk, a, b := setup(t)
		edit(t, client, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })
		if record := b.read(); record.HolderIdentity != "a" {
			t.Errorf("b sees the emptied Lease held by %q, want a, its last holder", record.HolderIdentity)
		}
		if _, took := step(t, clk, a, b, true, 3*d); took {
			t.Error("b took the Lease while a kept renewing it")
		}
		if !a.valid() {
			t.Error("a lost its tenure to an edit that emptied the holder")
		}
	})

	t.Run("a holder emptied while it is frozen: taken a whole duration after the edit was seen", func(t *testing.T) {
		client, clk, a, b := setup(t)
		edit(t, client, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })
		took, ok := step(t, clk, a, b, false, 3*d)
		if !ok || took < d {
			t.Errorf("b took the emptied Lease %v after the edit (%v), want after a whole duration, %v", took, ok, d)
		}
	})

	t.Run("the standby named by another client waits the holder out", func(t *testing.T) {
		client, clk, a, b := setup(t)
		edit(t, client, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") })
		if record := b.read(); record.HolderIdentity != "a" || b.valid() {
			t.Errorf("b named by an edit sees holder %q, valid %v; want a, not valid", record.HolderIdentity, b.valid())
		}
		if record := a.read(); record.HolderIdentity != "b" || a.valid() {
			t.Errorf("a reading an edit naming b sees %q, valid %v; want b, and its tenure ended", record.HolderIdentity, a.valid())
		}
		took, ok := step(t, clk, a, b, false, 3*d)
		if !ok || took < d {
			t.Errorf("b took the Lease %v after it was named (%v), want a whole duration later, %v", took, ok, d)
		}
	})

	t.Run("a lowered duration shortens no wait", func(t *testing.T) {
		client, clk, a, b := setup(t)
		edit(t, client, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](1) })
		if record := b.read(); record.LeaseDurationSeconds != 15 {
			t.Errorf("b sees a duration of %ds, want the longest it saw, 15", record.LeaseDurationSeconds)
		}
		took, ok := step(t, clk, a, b, false, 3*d)
		if !ok || took < d {
			t.Errorf("b took the Lease %v after the edit (%v), want %v", took, ok, d)
		}
	})

	t.Run("a Lease deleted and recreated by another client is a change like any other", func(t *testing.T) {
		client, clk, a, b := setup(t)
		obj, err := client.Tracker().Get(leasesResource, "system", "slot-0")
		if err != nil {
			t.Fatal(err)
		}
		recreated := obj.(*coordinationv1.Lease).DeepCopy()
		if err := client.Tracker().Delete(leasesResource, "system", "slot-0"); err != nil {
			t.Fatal(err)
		}
		recreated.ResourceVersion, recreated.UID = fakeapiserver.NextResourceVersion(), "recreated"
		if err := client.Tracker().Create(leasesResource, recreated, "system"); err != nil {
			t.Fatal(err)
		}
		if _, took := step(t, clk, a, b, true, 3*d); took {
			t.Error("b took the recreated Lease while a renewed it")
		}
		// a's last renewal came half a second before it stopped.
		took, ok := step(t, clk, a, b, false, 3*d)
		if !ok || took < d-500*time.Millisecond {
			t.Errorf("b took the recreated Lease %v after a stopped (%v), want a duration after a's last renewal, %v", took, ok, d-500*time.Millisecond)
		}
	})

	t.Run("renewals inside one wall-clock second are each seen", func(t *testing.T) {
		_, clk, a, b := setup(t)
		// The wall clock stands still: a renews with the same time again and again,
		// for longer than the duration by its monotonic clock (the fake has one).
		for range 40 {
			a.acquire()
			if b.acquire() {
				t.Fatal("b took a Lease renewed within the last retry period")
			}
			clk.Step(500 * time.Millisecond)
		}
		if !a.valid() {
			t.Error("a renewing every half second lost its tenure")
		}
	})

	t.Run("a release by the holder is free a retry period and a flight later; a copy of one is not", func(t *testing.T) {
		client, clk, a, b := setup(t)
		if released, err := a.lock.Release(context.Background()); !released || err != nil || a.valid() {
			t.Fatalf("Release = %v, %v; valid %v", released, err, a.valid())
		}
		obj, err := client.Tracker().Get(leasesResource, "system", "slot-0")
		if err != nil {
			t.Fatal(err)
		}
		release := obj.(*coordinationv1.Lease).DeepCopy()
		if b.acquire() {
			t.Error("b took the release at once: a write a gave up on as it stopped may still land")
		}
		clk.Step(testRetryPeriod)
		if b.acquire() {
			t.Error("b took the release within a retry period: a holder alive would not have renewed yet")
		}
		clk.Step(time.Second)
		if !b.acquire() || !b.valid() {
			t.Fatal("b did not take a Lease a released, a retry period and a second after it saw the release")
		}
		// Someone writes the release record back (kubectl apply of a copy) while b
		// holds it: a may not take it at once, since it is not the record a wrote.
		edit(t, client, func(l *coordinationv1.Lease) {
			l.Spec, l.Annotations = release.Spec, release.Annotations
		})
		for range 4 {
			if a.acquire() {
				t.Fatal("a took a copy of its own release while b held the Lease")
			}
			clk.Step(500 * time.Millisecond)
		}
		// Nor may anyone take a release restored into a recreated Lease, whose UID
		// is not the one the release names.
		if err := client.Tracker().Delete(leasesResource, "system", "slot-0"); err != nil {
			t.Fatal(err)
		}
		restored := release.DeepCopy()
		restored.UID, restored.ResourceVersion = "restored", fakeapiserver.NextResourceVersion()
		if err := client.Tracker().Create(leasesResource, restored, "system"); err != nil {
			t.Fatal(err)
		}
		c := newReplica(t, client, clk, "c", d)
		clk.Step(time.Second)
		if c.acquire() {
			t.Error("c took a release restored into another Lease of the same name")
		}
	})

	t.Run("a release mark written by another client is waited out by a replica that never saw the holder", func(t *testing.T) {
		client, clk, a, _ := setup(t)
		// A merge patch as the issue tried it: the holder emptied, a duration of one
		// second, and the mark of a release by a, with the Lease's UID.
		edit(t, client, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
			metav1.SetMetaDataAnnotation(&l.ObjectMeta, ReleasedByAnnotation, "a "+string(l.UID))
		})
		// c starts now and sees the forged record first, trying every half second; a,
		// alive, renews every two seconds (a retry period), from one second on.
		c := newReplica(t, client, clk, "c", d)
		for at := time.Duration(0); at <= 2*d; at += 500 * time.Millisecond {
			if c.acquire() {
				t.Fatalf("c, which never saw a hold the Lease, took it %v after a forged release of a's", at)
			}
			if at%(2*time.Second) == time.Second {
				a.acquire()
			}
			if a.valid() && c.valid() {
				t.Fatalf("%v in: a's and c's tenures are both valid", at)
			}
			clk.Step(500 * time.Millisecond)
		}
		if !a.valid() {
			t.Error("a, renewing, lost its tenure to a forged release")
		}
	})

	t.Run("a release mark forged in the name of the holder a replica saw is taken back before that replica may take it", func(t *testing.T) {
		client, clk, a, b := setup(t)
		// Right after a's renewal, another client writes what a release by a writes.
		edit(t, client, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
			metav1.SetMetaDataAnnotation(&l.ObjectMeta, ReleasedByAnnotation, "a "+string(l.UID))
		})
		// b, which saw a hold the Lease, tries every half second; a, alive, renews every
		// retry period.
		for at := time.Duration(0); at <= 2*d; at += 500 * time.Millisecond {
			if at > 0 && at%testRetryPeriod == 0 {
				a.acquire()
			}
			if b.acquire() {
				t.Fatalf("b took the Lease %v after a release forged in the name of a, which renews", at)
			}
			if a.valid() && b.valid() {
				t.Fatalf("%v in: a's and b's tenures are both valid", at)
			}
			clk.Step(500 * time.Millisecond)
		}
		if record := b.read(); record.HolderIdentity != "a" || !a.valid() {
			t.Errorf("b sees the Lease held by %q, a's tenure valid: %v; want a, valid", record.HolderIdentity, a.valid())
		}
	})

	// watching is a new replica, c, with a watch of the Lease (LockOptions.Seen) whose
	// reports the subtest makes: watchSaw has it report the stored record, with the last
	// holder it saw, as first seen at at.
	watching := func(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock) (c *replica, watchSaw func(holder string, at time.Time)) {
		watched := map[string]Observation{}
		lease := Lease{Namespace: "system", Name: "slot-0", Identity: "c", Duration: d, RetryPeriod: testRetryPeriod}
		seen := func(version string) (Observation, bool) { o, ok := watched[version]; return o, ok }
		c = &replica{t: t, lock: lease.NewLock(client, tenure.New(clk), LockOptions{Clock: clk, Seen: seen})}
		return c, func(holder string, at time.Time) {
			t.Helper()
			obj, err := client.Tracker().Get(leasesResource, "system", "slot-0")
			if err != nil {
				t.Fatal(err)
			}
			watched[obj.(*coordinationv1.Lease).ResourceVersion] = Observation{At: at, Holder: holder, Longest: d, Slowest: testRetryPeriod}
		}
	}

	t.Run("a release the watch saw only after a standby's first read of it is taken a retry period later", func(t *testing.T) {
		client, clk, a, _ := setup(t)
		// c's watch listed the Lease held by a before c's elector read it: a rollout's
		// new replica, ready once it listed.
		c, watchSaw := watching(t, client, clk)
		if released, err := a.lock.Release(context.Background()); !released || err != nil {
			t.Fatalf("Release = %v, %v", released, err)
		}
		// c's first read comes before the watch's event of the release.
		released := clk.Now()
		if c.acquire() {
			t.Fatal("c took a release it could not tell from an edit")
		}
		watchSaw("a", released)
		took, ok := time.Duration(0), false
		for ; took <= d && !ok; took += 500 * time.Millisecond {
			clk.Step(500 * time.Millisecond)
			ok = c.acquire() && c.valid()
		}
		if want := ReleaseWait(testRetryPeriod, d) + 500*time.Millisecond; !ok || took > want {
			t.Errorf("c took the release of the holder its watch saw after %v (taken: %v), want within %v", took, ok, want)
		}
	})

	t.Run("a holder the watch reports late does not replace a newer one the replica read", func(t *testing.T) {
		client, clk, _, _ := setup(t)
		c, watchSaw := watching(t, client, clk)
		c.read() // held by a
		edit(t, client, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") })
		c.read() // held by b: the holder c saw last
		// A release marked as a's, forged or from before b (a watch that relisted past
		// b would say a was the last holder it saw).
		edit(t, client, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
			metav1.SetMetaDataAnnotation(&l.ObjectMeta, ReleasedByAnnotation, "a "+string(l.UID))
		})
		if c.acquire() {
			t.Fatal("c took a release marked by a holder other than the one it saw last")
		}
		watchSaw("a", clk.Now())
		for at := 500 * time.Millisecond; at < d; at += 500 * time.Millisecond {
			clk.Step(500 * time.Millisecond)
			if c.acquire() {
				t.Fatalf("c took a release marked as a's %v after it, though it saw b hold the Lease since", at)
			}
		}
	})

	t.Run("a standby waits for a release as long as the retry period its holder announced", func(t *testing.T) {
		// A rollout shortened the retry period: a, the holder, renews every 5 s; b, new,
		// every 2 s.
		const slow = 5 * time.Second
		client, clk, a, b := setupRenewingEvery(t, slow)
		edit(t, client, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
			metav1.SetMetaDataAnnotation(&l.ObjectMeta, ReleasedByAnnotation, "a "+string(l.UID))
			delete(l.Annotations, RetryPeriodAnnotation)
		})
		for at := time.Duration(0); at <= 2*d; at += 500 * time.Millisecond {
			if at > 0 && at%slow == 0 {
				a.acquire()
			}
			if b.acquire() {
				t.Fatalf("b took the Lease %v after a release forged in the name of a, which renews every %v", at, slow)
			}
			if a.valid() && b.valid() {
				t.Fatalf("%v in: a's and b's tenures are both valid", at)
			}
			clk.Step(500 * time.Millisecond)
		}
	})

	t.Run("a standby named by an edit releases nothing when it stops", func(t *testing.T) {
		client, clk, a, b := setup(t)
		edit(t, client, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") })
		c := newReplica(t, client, clk, "c", d)
		if record := c.read(); record.HolderIdentity != "b" {
			t.Fatalf("c sees %q, want b", record.HolderIdentity)
		}
		b.read()
		if released, err := b.lock.Release(context.Background()); released || err != nil {
			t.Errorf("b released a Lease it never wrote: %v, %v", released, err)
		}
		clk.Step(time.Second)
		if c.acquire() {
			t.Error("c took the Lease a second after the edit")
		}
		if a.valid() && c.valid() {
			t.Error("a's and c's tenures are both valid")
		}
	})

	t.Run("a created Lease edited by another client while its tenure is pending stays its creator's", func(t *testing.T) {
		client := fake.NewClientset()
		fakeapiserver.Versioned(client, leasesResource)
		clk := clocktesting.NewFakeClock(start)
		a := newReplica(t, client, clk, "a", d)
		if _, _, err := a.lock.Get(context.Background()); !apierrors.IsNotFound(err) {
			t.Fatalf("Get = %v, want NotFound", err)
		}
		now := metav1.NewTime(clk.Now())
		if err := a.lock.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}); err != nil {
			t.Fatal(err)
		}
		edit(t, client, func(l *coordinationv1.Lease) { l.Labels = map[string]string{"team": "x"} })
		clk.Step(time.Second)
		if record := a.read(); record.HolderIdentity != "a" {
			t.Errorf("a sees its pending Lease, labelled by another client, held by %q", record.HolderIdentity)
		}
	})

	t.Run("a Lease recreated with a shorter duration waits the longest", func(t *testing.T) {
		client, clk, a, _ := setup(t)
		// d runs a shorter duration (a rollout lowered it), and saw a's Lease.
		short := newReplica(t, client, clk, "d", 5*time.Second)
		if record := short.read(); record.HolderIdentity != "a" {
			t.Fatalf("d sees %q, want a", record.HolderIdentity)
		}
		if err := client.Tracker().Delete(leasesResource, "system", "slot-0"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := short.lock.Get(context.Background()); !apierrors.IsNotFound(err) {
			t.Fatalf("Get = %v, want NotFound", err)
		}
		now := metav1.NewTime(clk.Now())
		if err := short.lock.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "d", LeaseDurationSeconds: 5, AcquireTime: now, RenewTime: now}); err != nil {
			t.Fatal(err)
		}
		if wait := short.lock.Tenure().Pending(); wait != d {
			t.Errorf("the tenure of a recreated Lease is usable in %v, want the longest duration seen, %v", wait, d)
		}
		if a.valid() && short.lock.Tenure().Valid() {
			t.Error("both tenures valid")
		}
	})
}
