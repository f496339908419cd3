// Gate: the HTTP round tripper that sends a write only inside a valid tenure.

package tenure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Reasons a Gate holds a write back, as it reports them.
const (
	// ReasonExpired: the write's tenure is over, or not begun.
	ReasonExpired = "expired"
	// ReasonNone: the write carries no tenure, where every write must.
	ReasonNone = "none"
	// ReasonStalled: the tenure was valid when the write was let through and had
	// ended at a read of its body to send it: the process stalled in between (a GC
	// pause, SIGSTOP, a starved CPU), or the tenure was ended meanwhile (End, a wall
	// clock set forward). The body never arrived whole.
	ReasonStalled = "stalled"
)

// Gate holds the writes (POST, PUT, PATCH, DELETE) that pass through it to their
// tenures. A write whose context carries a Tenure is sent only while it is valid, with
// a deadline at its end, also on the API server (the request's timeout parameter), so
// that neither the client nor the server works on it after the tenure. Reads pass.
//
// The tenure is checked again each time the transport reads the write's body to send
// it: a process frozen after the first check wakes with its timers not yet fired, and
// its transport would send the write before the deadline cancels it. A read that finds
// the tenure over fails, the transport abandons the request, and its body never
// arrives whole, so the API server does not act on it; the headers may have gone
// already. The last of the body's bytes comes with io.EOF and nothing is checked
// after it: HTTP/1.1 reads once more when the body has been sent, and a failure then
// would report as held back a write that landed. A write without a body (none of this
// controller's: a delete carries its options) has only the first check. Over HTTP/1.1
// the headers and the body leave in two writes, not one: the transport does not see
// an in-memory body behind the wrapper.
type Gate struct {
	// Required holds back a write that carries no Tenure: set it where every write
	// must happen inside one (leader election, sharded mode), so that a write that
	// escaped its context fails instead of landing unchecked.
	Required bool
	// HeldBack, if set, is told each write held back, with the reason.
	HeldBack func(reason string)
	// Identity is this process's identity in Leases, if it has one: the fencing
	// policy's refusal naming another holder ends the write's tenure, one naming this
	// process does not.
	Identity string
}

// Wrap returns next behind the gate, for rest.Config.Wrap.
func (g *Gate) Wrap(next http.RoundTripper) http.RoundTripper {
	return &gatedTransport{gate: g, next: next}
}

type gatedTransport struct {
	gate *Gate
	next http.RoundTripper
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isWrite(req.Method) {
		return t.next.RoundTrip(req)
	}
	tenure := FromContext(req.Context())
	if tenure == nil {
		if !t.gate.Required {
			return t.next.RoundTrip(req)
		}
		return nil, t.heldBack(req, ReasonNone, fmt.Errorf("%w: %s %s carries no tenure", ErrHeldBack, req.Method, req.URL.Path))
	}
	left, ok := tenure.Left()
	if !ok {
		return nil, t.heldBack(req, ReasonExpired, fmt.Errorf("%w: %s %s", ErrHeldBack, req.Method, req.URL.Path))
	}
	ctx, cancel := context.WithTimeout(req.Context(), left)
	gated := req.Clone(ctx)
	// The body is held to the tenure as it was let through: one ended and begun
	// anew (the Lease lost and taken again) does not extend this write's.
	check := &bodyCheck{tenure: tenure, until: tenure.clock.Now().Add(left)}
	if gated.Body != nil && gated.Body != http.NoBody {
		gated.Body = check.body(gated.Body, gated.ContentLength)
	}
	if getBody := gated.GetBody; getBody != nil {
		// A transport that sends the write again (a connection lost before the
		// answer) reads a new body: it is checked too.
		gated.GetBody = func() (io.ReadCloser, error) {
			body, err := getBody()
			if err != nil || body == nil || body == http.NoBody {
				return body, err
			}
			return check.body(body, gated.ContentLength), nil
		}
	}
	// The server stops working on the request at the same moment: a write that waits
	// in its queues past the tenure fails instead of landing late. Whole milliseconds,
	// rounded down.
	if remaining := left.Truncate(time.Millisecond); remaining > 0 {
		query := gated.URL.Query()
		if current, err := time.ParseDuration(query.Get("timeout")); err != nil || current > remaining {
			query.Set("timeout", remaining.String())
			gated.URL.RawQuery = query.Encode()
		}
	}
	resp, err := t.next.RoundTrip(gated)
	if err != nil {
		cancel()
		switch {
		case check.failed():
			// Transports wrap a body's error their own way, some without Unwrap.
			return nil, t.heldBack(req, ReasonStalled, fmt.Errorf("%w: %s %s: the tenure ended before the body was sent: %w", ErrHeldBack, req.Method, req.URL.Path, err))
		case errors.Is(ctx.Err(), context.DeadlineExceeded) && req.Context().Err() == nil:
			// The tenure's deadline, not the caller's, ended it (cancel above leaves
			// an expired deadline's error as it was): whether the server acted on it
			// is not known.
			return nil, fmt.Errorf("%w: %s %s: %w", ErrCutOff, req.Method, req.URL.Path, err)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusForbidden {
		resp.Body = endIfFenced(tenure, resp.Body, t.gate.Identity)
	}
	// The deadline must outlive the response until its body is read.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// endIfFenced ends tenure when a refusal's body is the fencing policy's saying that
// another Pod holds the Lease: the API server has seen it change hands, which this
// process has not, or its tenure would be over. The next renewal that succeeds begins
// a new one (after a change the policy saw before the Lease's own watch did, say); a
// renewal that finds the Lease taken ends the process. It reads the body's first 64
// KiB (a Status is far shorter) and returns the body whole.
func endIfFenced(tenure *Tenure, body io.ReadCloser, self string) io.ReadCloser {
	peeked, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	if heldByAnother(peeked, self) {
		tenure.End()
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(peeked), body), body}
}

func (t *gatedTransport) heldBack(req *http.Request, reason string, err error) error {
	if req.Body != nil && reason != ReasonStalled {
		_ = req.Body.Close()
	}
	if t.gate.HeldBack != nil {
		t.gate.HeldBack(reason)
	}
	return err
}

// cancelOnClose cancels a request's context once its response body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// bodyCheck checks a write's tenure as the transport reads its body, and remembers
// whether a read found it over.
type bodyCheck struct {
	tenure *Tenure
	// until is when the tenure the write was let through in ends, by the monotonic
	// clock.
	until time.Time

	mu    sync.Mutex
	ended bool
}

func (c *bodyCheck) valid() bool {
	_, ok := c.tenure.Left()
	ok = ok && c.tenure.clock.Now().Before(c.until)
	if !ok {
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
	}
	return ok
}

func (c *bodyCheck) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// errTenureEnded is what a checked body's read returns once the tenure is over; the
// gate reports the write as held back (ErrHeldBack) whatever the transport made of it.
var errTenureEnded = errors.New("the tenure ended")

// body is body, of length bytes (-1 or 0: unknown), checked against the tenure.
func (c *bodyCheck) body(body io.ReadCloser, length int64) io.ReadCloser {
	if length <= 0 {
		length = -1
	}
	return &checkedBody{ReadCloser: body, check: c, left: length}
}

// checkedBody is a write's body that yields nothing once the write's tenure is over.
// Of a body of known length, the last bytes come with io.EOF, and the reads after
// them are not checked.
type checkedBody struct {
	io.ReadCloser
	check *bodyCheck
	// left is how many bytes are still to be read; -1 when the length is unknown.
	left int64
}

func (b *checkedBody) Read(data []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if !b.check.valid() {
		return 0, errTenureEnded
	}
	n, err := b.ReadCloser.Read(data)
	if b.left > 0 {
		b.left = max(b.left-int64(n), 0)
		if b.left == 0 && err == nil {
			err = io.EOF
		}
	}
	return n, err
}
