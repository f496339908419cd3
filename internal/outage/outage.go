// Package outage has a client's requests wait while the API server cannot be reached,
// and sends them as soon as it answers again.
//
// client-go's reflectors retry a failed list or watch after a delay that doubles from
// 0.8 s to 30 s, with up to as much again of jitter, and informers do not let that be
// set (kubernetes/kubernetes#136943). An outage of ten seconds, spent failing a watch
// at every step, leaves an informer asleep for tens of seconds after the API server is
// back. Behind a Waiter, the first request that finds the server unreachable marks it
// down; from then on every request waits, as long as its own context allows, while one
// probe asks the server's /readyz at a fixed interval, and all of them go the moment it
// answers. A reflector sees one failure per outage instead of one per backoff step, and
// the server gets one probe per interval instead of every client's retries.
//
// A request waits as long as its own context allows, and whatever checks it when it
// is sent (package tenure's gate) sits behind the Waiter and checks it after the wait.
package outage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// DefaultInterval is how often a Waiter asks /readyz while the server is down: the
// longest a request waits after the server is ready again.
const DefaultInterval = 500 * time.Millisecond

// probeTimeout bounds each /readyz request.
const probeTimeout = 2 * time.Second

// ErrDown is the error of a request whose context ended while it waited for the API
// server to answer again.
var ErrDown = errors.New("the API server cannot be reached")

// Waiter has requests wait while the API server is down. Its zero value is not usable: see
// New.
type Waiter struct {
	ctx      context.Context
	probe    *http.Client
	readyz   string
	interval time.Duration
	// changed, if set, is told each time the server goes down or comes back.
	changed func(down bool)

	mu sync.Mutex
	// back is nil while the server is up; while it is down, a channel that is closed
	// when it answers again.
	back chan struct{}
	// suspecting is set while suspect's probe runs.
	suspecting atomic.Bool
}

// New returns a Waiter for the API server of cfg, which it probes with cfg's own
// credentials: call it before cfg.Wrap(waiter.Wrap). Probing stops when ctx ends, and
// requests waiting then are let go. changed, if not nil, is called with true when the
// server is found unreachable and with false when it answers again, never two calls
// at once.
func New(ctx context.Context, cfg *rest.Config, interval time.Duration, changed func(down bool)) (*Waiter, error) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the client that probes the API server: %w", err)
	}
	// A copy: for a config without TLS or credentials, client-go returns
	// http.DefaultClient itself, which the rest of the process shares.
	probe := *client
	probe.Timeout = probeTimeout
	// The server's address with its path, if any, which prefixes every API path.
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's address: %w", err)
	}
	base.Path = strings.TrimSuffix(base.Path, "/") + "/readyz"
	return &Waiter{
		ctx:      ctx,
		probe:    &probe,
		readyz:   base.String(),
		interval: interval,
		changed:  changed,
	}, nil
}

// Wrap returns next behind the Waiter, for rest.Config.Wrap: one Waiter for every client
// of the server. Wrap it outside of anything that checks a request when it is sent
// (the tenure gate), so that the check is made when the request goes, not before it
// waited.
func (h *Waiter) Wrap(next http.RoundTripper) http.RoundTripper {
	return &waitingTransport{waiter: h, next: next}
}

// Down reports whether requests wait for the API server.
func (h *Waiter) Down() bool {
	return h.waiting() != nil
}

func (h *Waiter) waiting() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.back
}

type waitingTransport struct {
	waiter *Waiter
	next   http.RoundTripper
}

func (t *waitingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if back := t.waiter.waiting(); back != nil {
		select {
		case <-back:
		case <-req.Context().Done():
			// A RoundTripper closes the body of a request it does not send.
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, fmt.Errorf("%w: %s %s gave up waiting: %w", ErrDown, req.Method, req.URL.Path, context.Cause(req.Context()))
		}
	}
	resp, err := t.next.RoundTrip(req)
	switch {
	case unreachable(req, resp, err):
		t.waiter.down()
	case errors.Is(err, tenure.ErrCutOff) && req.Context().Err() == nil:
		// Cut off at its tenure's end: the server did not answer in time, or this
		// process stalled. Only a probe can tell.
		t.waiter.suspect()
	}
	return resp, err
}

// unreachable reports whether an attempt says the server cannot be reached: no answer
// at all (refused, reset, a TLS or dial timeout) when the caller did not cancel it, or
// a 502 Bad Gateway, which the API server never sends and the proxies and load
// balancers in front of it do when it is gone. A write that the tenure gate behind the
// Waiter held back says nothing about the server; one it cut off at its tenure's end
// may (see suspect).
func unreachable(req *http.Request, resp *http.Response, err error) bool {
	if err != nil {
		return req.Context().Err() == nil && !errors.Is(err, tenure.ErrHeldBack) && !errors.Is(err, tenure.ErrCutOff)
	}
	return resp.StatusCode == http.StatusBadGateway
}

// suspect asks /readyz once, unless a probe of suspect's runs already, and marks the
// server down if it does not answer: a write cut off at its tenure's end may mean a
// server that hangs (a partition) or only a process that stalled, which a thawed
// replica's first moments are full of.
func (h *Waiter) suspect() {
	if !h.suspecting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer h.suspecting.Store(false)
		if h.waiting() == nil && !h.answers() {
			h.down()
		}
	}()
}

// down marks the server down, once per outage, and starts the probe that ends it.
func (h *Waiter) down() {
	h.mu.Lock()
	if h.back != nil || h.ctx.Err() != nil {
		h.mu.Unlock()
		return
	}
	back := make(chan struct{})
	h.back = back
	h.mu.Unlock()
	if h.changed != nil {
		h.changed(true)
	}
	go h.waitBack(back)
}

// waitBack asks /readyz every interval, the first time at once, until the server
// answers, and then lets the held requests go.
func (h *Waiter) waitBack(back chan struct{}) {
	logger := klog.FromContext(h.ctx)
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	for !h.answers() {
		select {
		case <-ticker.C:
		case <-h.ctx.Done():
		}
		if h.ctx.Err() != nil {
			logger.V(4).Info("Stopped probing the API server", "reason", context.Cause(h.ctx))
			break
		}
	}
	// Told before the requests go: the next outage, which only requests that go can
	// begin, is told after this one's end.
	if h.changed != nil && h.ctx.Err() == nil {
		h.changed(false)
	}
	h.mu.Lock()
	h.back = nil
	h.mu.Unlock()
	close(back)
}

// answers reports whether the server answered /readyz with less than 500: ready
// (200), or running and refusing this client the endpoint (401, 403, or a 404 from a
// proxy that does not pass it on), which keeping every request waiting for ever would be
// worse than. It stays down while the server answers 500 (still starting, or its
// storage down) or a proxy answers 502-504 for it.
func (h *Waiter) answers() bool {
	req, err := http.NewRequestWithContext(h.ctx, http.MethodGet, h.readyz, nil)
	if err != nil {
		return false
	}
	resp, err := h.probe.Do(req)
	if err != nil {
		klog.FromContext(h.ctx).V(4).Info("The API server does not answer", "url", h.readyz, "err", err)
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode < http.StatusInternalServerError
}
