package main

import (
	"context"
	"time"
)

// steady is what a converged controller writes while nothing changes.
type steady struct {
	Foos          int     `json:"foos"`
	WindowSeconds float64 `json:"windowSeconds"`
	// Mutating counts the writes on Foos, Deployments and Events in the window.
	Mutating      requestCounts `json:"mutating"`
	MutatingTotal float64       `json:"mutatingTotal"`
	PerMinute     float64       `json:"mutatingPerMinute"`
}

// runSteady counts the controller's writes over --steady-window, right after the cold
// start converged and settled. Our controller runs with --resync-period=30s (the
// classic one resyncs every 30 s itself), so the window covers at least one resync of
// every Foo and Deployment.
func runSteady(ctx context.Context, g *group, c controllerSpec) (steady, error) {
	window := g.env.cfg.steadyWindow
	progressf("%s: counting %s's writes for %v", g.name, c.name, window)
	from, err := scrapeAPIServer(ctx, g.kube)
	if err != nil {
		return steady{}, err
	}
	begin := time.Now()
	if err := sleep(ctx, window); err != nil {
		return steady{}, err
	}
	to, err := scrapeAPIServer(ctx, g.kube)
	if err != nil {
		return steady{}, err
	}
	elapsed := time.Since(begin)
	st := steady{Foos: g.env.cfg.steadyFoos, WindowSeconds: elapsed.Seconds()}
	st.Mutating = to.minus(from).mutating()
	st.MutatingTotal = st.Mutating.total()
	st.PerMinute = st.MutatingTotal / elapsed.Minutes()
	progressf("%s: %s wrote %.0f times in %.0f s", g.name, c.name, st.MutatingTotal, st.WindowSeconds)
	return st, nil
}
