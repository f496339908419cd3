// Package tenure bounds a Lease holder's writes to the time it can prove, by its own
// clock, that no one else holds the Lease.
//
// A holder that renews its Lease with a request sent at time s knows that no other
// replica can take the Lease before s plus the Lease's duration: another replica counts
// the duration from its first sight of the renewed record, which comes after the write
// was committed, so after s. A Tenure is that interval, less a margin for the rate at
// which two clocks drift apart and for a write's own flight to the API server. It is
// measured on the monotonic clock, so a wall clock that is set back does not lengthen
// it, and a process that was frozen (a GC pause, SIGSTOP, a node swapping) finds its
// tenure over the moment it runs again; the wall clock is read too, and the earlier of
// the two ends counts, so that time the monotonic clock does not see (a machine
// suspended, a VM paused) shortens the tenure once the wall clock is corrected.
//
// A Gate (an http.RoundTripper) refuses every write whose context carries a Tenure that
// is not valid now, and gives every other write a deadline at which its tenure ends. It
// is the one place that the controller's writes pass through; the election's Lease lock
// (package election) feeds the Tenure from its Lease writes and reads.
package tenure

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ErrHeldBack is the error of a write held back because its tenure is not valid.
var ErrHeldBack = errors.New("write held back: this replica's tenure of the Lease is not valid now")

// ErrCutOff is the error of a write cut off in flight at the end of its tenure: the
// server may or may not have acted on it. It wraps the transport's own error (the
// deadline exceeded).
var ErrCutOff = errors.New("write cut off: this replica's tenure of the Lease ended while it was in flight")

// Margins taken off the Lease's duration.
const (
	// DriftRatio is how much faster, at most, another replica's clock may run than
	// this one's, as a share of the duration: NTP keeps real clocks within a
	// thousandth of that, a busy VM's within a hundredth.
	DriftRatio = 0.01
	// MaxFlight bounds the allowance for a write to reach the API server and be
	// committed after it was let through; a tenth of the duration when that is less.
	MaxFlight = time.Second
)

// Margin is what a Tenure leaves unused of a Lease of duration d.
func Margin(d time.Duration) time.Duration {
	return time.Duration(float64(d)*DriftRatio) + min(MaxFlight, d/10)
}

// Tenure is the time in which this process may write on behalf of one Lease. The zero
// value is not usable; see New. Its methods are safe for concurrent use.
type Tenure struct {
	clock clock.PassiveClock

	mu sync.Mutex
	// until is when the tenure ends; zero or past means not valid. It carries the
	// monotonic reading of the clock, and untilWall the wall time of the same end.
	until, untilWall time.Time
	// notBefore is when a tenure that began with the Lease's creation may first be
	// used (see Created).
	notBefore time.Time
	// ended is when it was last ended: a renewal sent before then does not extend it.
	ended time.Time
}

// New returns a tenure, not valid until a Lease write extends it.
func New(clk clock.PassiveClock) *Tenure {
	return &Tenure{clock: clk}
}

// Extend records that a write of the Lease naming this process as its holder, sent at
// sent (by this process's clock, before the request left) with duration d, succeeded.
func (t *Tenure) Extend(sent time.Time, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.extendLocked(sent, d)
}

func (t *Tenure) extendLocked(sent time.Time, d time.Duration) {
	if sent.Before(t.ended) {
		// Sent before the tenure was ended: whatever ended it came after.
		return
	}
	if until := sent.Add(d - Margin(d)); until.After(t.until) {
		t.until = until
		// Round(0) drops the monotonic reading: the same end by the wall clock.
		t.untilWall = sent.Round(0).Add(d - Margin(d))
	}
}

// Created records that this process created the Lease, naming itself, with a request
// sent at sent with duration d. The tenure it begins may be used only wait after that:
// a Lease that is missing may have been deleted (by hand, say) under a holder that has
// not noticed yet and writes until its own tenure ends, which is within its duration of
// its last renewal, itself before the Lease was deleted; wait is the longest duration
// that holder may have used.
func (t *Tenure) Created(sent time.Time, d, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sent.Before(t.ended) {
		return
	}
	if notBefore := sent.Add(max(d, wait)); notBefore.After(t.notBefore) {
		t.notBefore = notBefore
	}
	t.extendLocked(sent, d)
}

// End ends the tenure now: the Lease was seen held by another, or gone, or is being
// released.
func (t *Tenure) End() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = t.clock.Now()
	t.until, t.untilWall = time.Time{}, time.Time{}
}

// Left is how long the tenure lasts from now, and whether it is valid now. It is the
// shorter of the two clocks' answers: the monotonic clock is not moved by a wall clock
// that is set, and the wall clock, once corrected, counts time the monotonic clock
// missed (a machine suspended, a VM paused and resumed).
func (t *Tenure) Left() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.until.IsZero() {
		return 0, false
	}
	now := t.clock.Now()
	left := min(t.until.Sub(now), t.untilWall.Sub(now.Round(0)))
	return left, left > 0 && !now.Before(t.notBefore)
}

// Pending is how long until a tenure that began with the Lease's creation may be used;
// zero or less when it may now.
func (t *Tenure) Pending() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.notBefore.Sub(t.clock.Now())
}

// Valid tells whether the tenure is valid now.
func (t *Tenure) Valid() bool {
	_, ok := t.Left()
	return ok
}

type contextKey struct{}

// NewContext returns ctx carrying t: the writes made with it are held to t.
func NewContext(ctx context.Context, t *Tenure) context.Context {
	return context.WithValue(ctx, contextKey{}, t)
}

// FromContext is the tenure ctx carries, or nil.
func FromContext(ctx context.Context) *Tenure {
	t, _ := ctx.Value(contextKey{}).(*Tenure)
	return t
}
