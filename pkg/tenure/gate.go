package tenure

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Reasons a Gate holds a write back, as it reports them.
const (
	// ReasonExpired: the write's tenure is over, or not begun.
	ReasonExpired = "expired"
	// ReasonNone: the write carries no tenure, where every write must.
	ReasonNone = "none"
)

// Gate holds the writes (POST, PUT, PATCH, DELETE) that pass through it to their
// tenures. A write whose context carries a Tenure is sent only while it is valid, with
// a deadline at its end, also on the API server (the request's timeout parameter), so
// that neither the client nor the server works on it after the tenure. Reads pass.
type Gate struct {
	// Required holds back a write that carries no Tenure: set it where every write
	// must happen inside one (leader election, sharded mode), so that a write that
	// escaped its context fails instead of landing unchecked.
	Required bool
	// HeldBack, if set, is told each write held back, with the reason.
	HeldBack func(reason string)
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
		return nil, t.heldBack(req, ReasonNone, fmt.Errorf("%w: %s %s carries no tenure", ErrNotHeld, req.Method, req.URL.Path))
	}
	left, ok := tenure.Left()
	if !ok {
		return nil, t.heldBack(req, ReasonExpired, fmt.Errorf("%w: %s %s", ErrNotHeld, req.Method, req.URL.Path))
	}
	ctx, cancel := context.WithTimeout(req.Context(), left)
	gated := req.Clone(ctx)
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
		return nil, err
	}
	// The deadline must outlive the response until its body is read.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

func (t *gatedTransport) heldBack(req *http.Request, reason string, err error) error {
	if req.Body != nil {
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
