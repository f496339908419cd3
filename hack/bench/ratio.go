package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// ratioSide is one run of a pair in the ratio case: our controller, with its default
// flags and watching only its session's namespace, or the limit with events. Both
// make the same three writes per Foo (a Deployment, a status, a DeploymentCreated
// Event), and a run is done when the bench has seen all three for every Foo: the
// controller writes its Events in the background, so they count too. The runs share
// one cluster, each on Foos created for it in a namespace of its own, and alternate,
// AB BA AB..., so that a drift of the machine, or the objects earlier runs left on
// the cluster, fall on both sides alike.
type ratioSide struct {
	Ours *controller `json:"ours,omitempty"` // nil: the limit with events
	Pair int         `json:"pair"`
}

func (r ratioSide) side() string {
	if r.Ours != nil {
		return ourName
	}
	return "limit"
}

func (r ratioSide) column() string   { return fmt.Sprintf("ratio %s %d", r.side(), r.Pair) }
func (r ratioSide) rule() statusRule { return ruleReady }

func (r ratioSide) start(ctx context.Context, s *session) error {
	if r.Ours == nil {
		return limit{Events: true, Inflight: s.cfg.ratioInflight}.start(ctx, s)
	}
	c := *r.Ours
	c.Args = append(slices.Clone(c.Args), "--namespace="+s.namespace)
	return c.start(ctx, s)
}

// ratioPlan is the ratio case's sessions: for every size, pairs of our controller and
// the limit in alternating order, all on one cluster.
func ratioPlan(ours controller, sizes []int, pairs int) []sessionPlan {
	shared := &sharedCluster{}
	var out []sessionPlan
	for _, n := range sizes {
		for pair := 1; pair <= pairs; pair++ {
			order := []*controller{&ours, nil}
			if pair%2 == 0 {
				order = []*controller{nil, &ours}
			}
			for _, c := range order {
				out = append(out, sessionPlan{
					driver: ratioSide{Ours: c, Pair: pair},
					foos:   n,
					cases:  []benchCase{coldStartCase{record: true, events: true}},
					shared: shared,
				})
			}
		}
	}
	return out
}

// ratioMarkdown is the ratio case's table: for every size, each pair's cold starts
// and their ratio, then the median and range of the ratios.
func ratioMarkdown(res *results, inflight int) string {
	type key struct{ foos, pair int }
	seconds := map[key]map[bool]float64{} // ours?
	var keys []key
	for _, r := range res.Runs {
		side, ok := r.Driver.(ratioSide)
		if !ok || r.ColdStart == nil || !r.ColdStart.Converged {
			continue
		}
		k := key{r.Foos, side.Pair}
		if seconds[k] == nil {
			seconds[k] = map[bool]float64{}
			keys = append(keys, k)
		}
		seconds[k][side.Ours != nil] = r.ColdStart.Seconds
	}
	if len(keys) == 0 {
		return ""
	}
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	writeLine("cold start, Foos", "pair", "ours (s)", fmt.Sprintf("limit with events, %d in flight (s)", inflight), "ours ÷ limit")
	writeLine(slices.Repeat([]string{"--:"}, 5)...)
	ratios := map[int][]float64{}
	var sizes []int
	for _, k := range keys {
		ours, oursOK := seconds[k][true]
		lim, limOK := seconds[k][false]
		if !oursOK || !limOK {
			continue
		}
		if !slices.Contains(sizes, k.foos) {
			sizes = append(sizes, k.foos)
		}
		ratios[k.foos] = append(ratios[k.foos], ours/lim)
		writeLine(fmt.Sprint(k.foos), fmt.Sprint(k.pair), formatNumber(ours), formatNumber(lim), formatRatio(ours/lim))
	}
	for _, n := range sizes {
		writeLine(fmt.Sprint(n), "median of the pairs (range)", "", "", spread(ratios[n]))
	}
	return b.String()
}

// spread is the median of ratios and their range, e.g. "1.21 (1.08-1.40)".
func spread(ratios []float64) string {
	if len(ratios) == 0 {
		return "n/a"
	}
	sorted := slices.Sorted(slices.Values(ratios))
	return fmt.Sprintf("%s (%s-%s)", formatRatio(percentile(sorted, 50)), formatRatio(sorted[0]), formatRatio(sorted[len(sorted)-1]))
}
