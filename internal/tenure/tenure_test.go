package tenure

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestMargin(t *testing.T) {
	for _, tc := range []struct {
		duration, want time.Duration
	}{
		// 1% for drift, plus a second of flight.
		{15 * time.Second, 150*time.Millisecond + time.Second},
		{60 * time.Second, 600*time.Millisecond + time.Second},
		// Short Leases keep a tenth for flight, so that most of the Lease stays usable.
		{4 * time.Second, 40*time.Millisecond + 400*time.Millisecond},
	} {
		if got := Margin(tc.duration); got != tc.want {
			t.Errorf("Margin(%v) = %v, want %v", tc.duration, got, tc.want)
		}
	}
}

func TestTenure(t *testing.T) {
	start := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	const d = 15 * time.Second
	usable := d - Margin(d)

	t.Run("not valid before a Lease write", func(t *testing.T) {
		tenure := New(clocktesting.NewFakePassiveClock(start))
		if tenure.Valid() {
			t.Error("a new tenure is valid")
		}
	})

	t.Run("lasts the duration less the margin from when the renewal was sent", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		tenure := New(clk)
		sent := clk.Now()
		// The answer took two seconds: the tenure still counts from the send.
		clk.SetTime(start.Add(2 * time.Second))
		tenure.Extend(sent, d)
		left, ok := tenure.Left()
		if !ok || left != usable-2*time.Second {
			t.Errorf("Left() = %v, %v; want %v, true", left, ok, usable-2*time.Second)
		}
		clk.SetTime(start.Add(usable - time.Nanosecond))
		if !tenure.Valid() {
			t.Error("not valid just before its end")
		}
		clk.SetTime(start.Add(usable))
		if tenure.Valid() {
			t.Error("valid at its end")
		}
	})

	t.Run("a process frozen past its end finds it over when it runs again", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		tenure := New(clk)
		tenure.Extend(clk.Now(), d)
		// The monotonic clock runs on while the process is stopped.
		clk.SetTime(start.Add(d))
		if tenure.Valid() {
			t.Error("valid after a freeze as long as the Lease")
		}
	})

	t.Run("an earlier renewal answered late does not shorten it", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		tenure := New(clk)
		tenure.Extend(start.Add(time.Second), d)
		tenure.Extend(start, d)
		clk.SetTime(start.Add(usable + time.Second/2))
		if !tenure.Valid() {
			t.Error("the later renewal's tenure was cut short by an earlier one")
		}
	})

	t.Run("ended at once, and a renewal sent before the end does not revive it", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		tenure := New(clk)
		tenure.Extend(start, d)
		sentBefore := clk.Now()
		clk.SetTime(start.Add(time.Second))
		tenure.End()
		if tenure.Valid() {
			t.Error("valid after End")
		}
		tenure.Extend(sentBefore, d)
		if tenure.Valid() {
			t.Error("revived by a renewal sent before End")
		}
		clk.SetTime(start.Add(2 * time.Second))
		tenure.Extend(clk.Now(), d)
		if !tenure.Valid() {
			t.Error("not valid after a Lease write sent after End")
		}
	})
}

// TestTenureUnderClockSkew checks the tenure against another replica's view of the
// same Lease: that replica takes over once it has seen the record unchanged for the
// Lease's duration by its own clock, which may run faster than this one's and whose
// wall time may be far off. Whatever the offset, and with a rate up to DriftRatio
// faster, the tenure ends before the other may take over, with the flight allowance
// to spare.
func TestTenureUnderClockSkew(t *testing.T) {
	const d = 15 * time.Second
	for _, tc := range []struct {
		name string
		// offset is the other replica's wall clock minus this one's.
		offset time.Duration
		// rate is how fast the other's clock runs against this one's.
		rate float64
		// seenAfter is how long after this process sent its renewal the other saw it.
		seenAfter time.Duration
	}{
		{name: "same clocks, seen at once", rate: 1},
		{name: "the other's wall clock an hour ahead", offset: time.Hour, rate: 1},
		{name: "the other's wall clock an hour behind", offset: -time.Hour, rate: 1},
		{name: "the other's clock runs 1% fast", rate: 1 + DriftRatio},
		{name: "the other's clock runs 1% fast and is ahead", offset: 10 * time.Minute, rate: 1 + DriftRatio, seenAfter: 0},
		{name: "seen late", rate: 1 + DriftRatio, seenAfter: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakePassiveClock(start)
			tenure := New(clk)
			tenure.Extend(clk.Now(), d)
			left, _ := tenure.Left()
			ends := start.Add(left)

			// The other replica's clock reads other(x) at this process's time x.
			other := func(x time.Time) time.Time {
				return start.Add(tc.offset).Add(time.Duration(float64(x.Sub(start)) * tc.rate))
			}
			seen := start.Add(tc.seenAfter)
			// It may take over once its own clock has advanced d since it saw the record;
			// back in this process's time, that is:
			takeover := start.Add(time.Duration(float64(other(seen).Add(d).Sub(start.Add(tc.offset))) / tc.rate))
			if spare := takeover.Sub(ends); spare < min(MaxFlight, d/10) {
				t.Errorf("the tenure ends %v before the other may take over, want at least the flight allowance %v", spare, min(MaxFlight, d/10))
			}
		})
	}
}

// fakeLock is an election lock whose record is held in memory, as the API server
// would hold the Lease.
type fakeLock struct {
	identity string
	record   resourcelock.LeaderElectionRecord
	writeErr error
	// missing makes Get find no Lease, as after someone deleted it.
	missing bool
}

func (l *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if l.missing {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "lease")
	}
	r := l.record
	return &r, []byte(r.HolderIdentity), nil
}

func (l *fakeLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, r)
}

func (l *fakeLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	if l.writeErr != nil {
		return l.writeErr
	}
	l.record = r
	return nil
}

func (l *fakeLock) RecordEvent(string) {}
func (l *fakeLock) Identity() string   { return l.identity }
func (l *fakeLock) Describe() string   { return "fake" }
func (l *fakeLock) holder(name string) { l.record.HolderIdentity = name }
func (l *fakeLock) failWrites(e error) { l.writeErr = e }

func TestLock(t *testing.T) {
	start := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 15}

	t.Run("an update naming this process extends the tenure from its send", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		inner := &fakeLock{identity: "me"}
		lock := &Lock{Interface: inner, Tenure: New(clk)}
		if err := lock.Update(t.Context(), mine); err != nil {
			t.Fatal(err)
		}
		left, ok := lock.Tenure.Left()
		if want := 15*time.Second - Margin(15*time.Second); !ok || left != want {
			t.Errorf("after Update: Left() = %v, %v; want %v, true", left, ok, want)
		}
	})

	t.Run("a tenure begun by creating the Lease is usable a whole duration later", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		inner := &fakeLock{identity: "me"}
		lock := &Lock{Interface: inner, Tenure: New(clk)}
		if err := lock.Create(t.Context(), mine); err != nil {
			t.Fatal(err)
		}
		if lock.Tenure.Valid() || lock.Tenure.Pending() != 15*time.Second {
			t.Errorf("right after Create: valid %v, pending %v; want false, 15s", lock.Tenure.Valid(), lock.Tenure.Pending())
		}
		// Renewed every two seconds meanwhile.
		for range 7 {
			clk.SetTime(clk.Now().Add(2 * time.Second))
			if err := lock.Update(t.Context(), mine); err != nil {
				t.Fatal(err)
			}
			if lock.Tenure.Valid() {
				t.Errorf("valid %v after the Lease was created, before its duration", clk.Now().Sub(start))
			}
		}
		clk.SetTime(start.Add(15 * time.Second))
		if !lock.Tenure.Valid() || lock.Tenure.Pending() > 0 {
			t.Errorf("a duration after Create, renewed since: valid %v, pending %v; want true, 0", lock.Tenure.Valid(), lock.Tenure.Pending())
		}
	})

	t.Run("a read finding no Lease ends it at once and says so", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		inner := &fakeLock{identity: "me"}
		foreign := 0
		lock := &Lock{Interface: inner, Tenure: New(clk), OnForeign: func() { foreign++ }}
		if err := lock.Update(t.Context(), mine); err != nil {
			t.Fatal(err)
		}
		inner.missing = true
		if _, _, err := lock.Get(t.Context()); !apierrors.IsNotFound(err) {
			t.Fatalf("Get = %v, want NotFound", err)
		}
		if lock.Tenure.Valid() || foreign != 1 {
			t.Errorf("after the Lease was found deleted: valid %v, foreign %d; want false, 1", lock.Tenure.Valid(), foreign)
		}
	})

	t.Run("a failed write extends nothing", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		inner := &fakeLock{identity: "me"}
		inner.failWrites(errors.New("conflict"))
		lock := &Lock{Interface: inner, Tenure: New(clk)}
		if err := lock.Update(t.Context(), mine); err == nil {
			t.Fatal("the failing write succeeded")
		}
		if lock.Tenure.Valid() {
			t.Error("valid after a failed write")
		}
	})

	t.Run("a read showing another holder ends it at once and says so", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		inner := &fakeLock{identity: "me"}
		foreign := 0
		lock := &Lock{Interface: inner, Tenure: New(clk), OnForeign: func() { foreign++ }}
		if err := lock.Update(t.Context(), mine); err != nil {
			t.Fatal(err)
		}
		if _, _, err := lock.Get(t.Context()); err != nil || !lock.Tenure.Valid() || foreign != 0 {
			t.Fatalf("reading its own record: err %v, valid %v, foreign %d; want nil, true, 0", err, lock.Tenure.Valid(), foreign)
		}
		inner.holder("other")
		if _, _, err := lock.Get(t.Context()); err != nil {
			t.Fatal(err)
		}
		if lock.Tenure.Valid() || foreign != 1 {
			t.Errorf("after reading another holder: valid %v, foreign %d; want false, 1", lock.Tenure.Valid(), foreign)
		}
	})

	t.Run("a release ends it before it is sent", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(start)
		inner := &fakeLock{identity: "me"}
		lock := &Lock{Interface: inner, Tenure: New(clk)}
		if err := lock.Update(t.Context(), mine); err != nil {
			t.Fatal(err)
		}
		inner.failWrites(errors.New("apiserver down"))
		_ = lock.Update(t.Context(), resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1})
		if lock.Tenure.Valid() {
			t.Error("valid after a release, even one that failed")
		}
	})
}
