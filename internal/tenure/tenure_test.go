package tenure

import (
	"testing"
	"time"

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
