package main

import (
	"context"
	"fmt"
	"time"
)

// progressInterval is how often a long wait reports how far it got.
const progressInterval = 10 * time.Second

// coldStart is one cold start (or its limit): n Foos exist, then the controller starts.
type coldStart struct {
	Foos      int  `json:"foos"`
	Converged bool `json:"converged"`
	// Seconds is the time to converge, or the time waited when it did not.
	Seconds float64 `json:"seconds"`
	// DeploymentsDone and StatusesDone say how far it got.
	DeploymentsDone int `json:"deploymentsDone"`
	StatusesDone    int `json:"statusesDone"`
	// Arrivals are the seconds since the start at which each Deployment appeared.
	Arrivals []float64 `json:"arrivalSeconds"`
	// Requests counts the requests on Foos, Deployments and Events (but watches) from
	// the start until convergence plus --settle, by "VERB resource[/subresource]".
	Requests      requestCounts      `json:"requests"`
	RequestsTotal float64            `json:"requestsTotal"`
	PerFoo        map[string]float64 `json:"requestsPerFoo"`
	PerFooTotal   float64            `json:"requestsPerFooTotal"`
	// EventWrites is the number of events created or updated.
	EventWrites       float64 `json:"eventWrites"`
	EventWritesPerFoo float64 `json:"eventWritesPerFoo"`
}

// timedOutText says how far a cold start got, e.g. "timed out: 812 of 1000 after 600 s".
func (c coldStart) timedOutText() string {
	return fmt.Sprintf("timed out: %d of %d after %.0f s", min(c.DeploymentsDone, c.StatusesDone), c.Foos, c.Seconds)
}

// runColdStart creates n Foos, then starts the controller, and waits until every
// Foo has its Deployment and its status. The controller keeps running for the later
// cases; the caller stops it.
func runColdStart(ctx context.Context, g *group, c controllerSpec, n int) (coldStart, *controllerProcess, error) {
	cs := coldStart{Foos: n}
	foos, before, err := g.seedFoos(ctx, n)
	if err != nil {
		return cs, nil, err
	}

	progressf("%s: starting %s with %d Foos", g.name, c.name, n)
	// The handlers are in place before the controller can write anything.
	conv := newConvergence(foos, c.rule)
	g.watch.setHandlers(conv.observeDeployment, conv.observeFoo)
	defer g.watch.setHandlers(nil, nil)
	proc, err := startController(c, g.cluster.KubeconfigPath(), g.logPath("controller"))
	if err != nil {
		return cs, nil, err
	}
	conv.begin(proc.started)

	waitErr := waitConverged(ctx, g, conv, proc, g.env.cfg.coldStartTimeout)
	cs.fill(conv, time.Since(proc.started))
	if waitErr != nil {
		return cs, proc, waitErr
	}
	if cs.Converged {
		progressf("%s: %s converged %d Foos in %.2f s", g.name, c.name, n, cs.Seconds)
	} else {
		progressf("%s: %s %s", g.name, c.name, cs.timedOutText())
	}
	if err := cs.countRequests(ctx, g, before); err != nil {
		return cs, proc, err
	}
	return cs, proc, nil
}

// waitConverged waits for conv, the timeout, or the controller's exit (an error).
// A timeout is no error: the result says how far it got.
func waitConverged(ctx context.Context, g *group, conv *convergence, proc *controllerProcess, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	var exited <-chan struct{}
	if proc != nil {
		exited = proc.exited
	}
	for {
		select {
		case <-conv.done:
			return nil
		case <-deadline.C:
			return nil
		case <-exited:
			return proc.exitedErr()
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			deps, statuses := conv.progress()
			progressf("%s: %d of %d Deployments, %d of %d statuses", g.name, deps, len(conv.want), statuses, len(conv.fooUIDs))
		}
	}
}

// fill records the outcome of conv; waited is the time waited if it did not converge.
func (cs *coldStart) fill(conv *convergence, waited time.Duration) {
	cs.DeploymentsDone, cs.StatusesDone = conv.progress()
	cs.Arrivals = conv.arrivalSeconds()
	select {
	case <-conv.done:
		cs.Converged = true
		cs.Seconds = conv.doneAfter.Seconds()
	default:
		cs.Seconds = waited.Seconds()
	}
}

// countRequests waits --settle for trailing requests (events are sent in the
// background), then counts the requests since before.
func (cs *coldStart) countRequests(ctx context.Context, g *group, before requestCounts) error {
	if err := sleep(ctx, g.env.cfg.settle); err != nil {
		return err
	}
	after, err := scrapeAPIServer(ctx, g.kube)
	if err != nil {
		return err
	}
	cs.Requests = after.minus(before)
	cs.RequestsTotal = cs.Requests.total()
	cs.PerFoo = cs.Requests.perFoo(cs.Foos)
	cs.PerFooTotal = cs.RequestsTotal / float64(cs.Foos)
	cs.EventWrites = cs.Requests.eventWrites().total()
	cs.EventWritesPerFoo = cs.EventWrites / float64(cs.Foos)
	return nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
