// Package tenure bounds a Lease holder's writes to the time it can prove, by its own
// clock, that no one else holds the Lease.
//
// A holder that renews its Lease with a request sent at time s knows that no other
// replica can take the Lease before s plus the Lease's duration: another replica counts
// the duration from its first sight of the renewed record, which comes after the write
// was committed, so after s. A Tenure is that interval, less a margin for the rate at
// which two clocks drift apart and for a write's own flight to the API server. It is
// measured on the monotonic clock, so a wall clock that is set back or forward does not
// move it, and a process that was frozen (a GC pause, a stopped VM, SIGSTOP) finds its
// tenure over the moment it runs again.
//
// A Gate (an http.RoundTripper) refuses every write whose context carries a Tenure that
// is not valid now, and gives every other write a deadline at which its tenure ends. It
// is the one place that the controller's writes pass through; Lock feeds the Tenure
// from the Lease writes and reads of client-go's leader election.
//
// The package is part of this controller and not meant for other programs to import.
package tenure

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ErrNotHeld is the error of a write held back because its tenure is not valid.
var ErrNotHeld = errors.New("write held back: this replica's tenure of the Lease is not valid now")

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
	// until is when the tenure ends; zero or past means not valid.
	until time.Time
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
	until := sent.Add(d - Margin(d))
	t.mu.Lock()
	defer t.mu.Unlock()
	if sent.Before(t.ended) {
		// Sent before the tenure was ended: whatever ended it came after.
		return
	}
	if until.After(t.until) {
		t.until = until
	}
}

// End ends the tenure now: the Lease was seen held by another, or is being released.
func (t *Tenure) End() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = t.clock.Now()
	t.until = time.Time{}
}

// Left is how long the tenure lasts from now, and whether it is valid now.
func (t *Tenure) Left() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	left := t.until.Sub(t.clock.Now())
	return left, !t.until.IsZero() && left > 0
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
