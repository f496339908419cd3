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
// one cluster, each on Foos created for it in a namespace of its own, which it empties
// when it ends (session.clearNamespace), and alternate, AB BA AB..., so that a drift
// of the machine falls on both sides alike. With --ratio-also, a third side, our
// controller with those flags added, joins each pair (a triple then), and the order
// rotates: ABC BCA CAB. With --ratio-watching-limit, so does the limit with events
// that first fills and then keeps informers as our controller's.
type ratioSide struct {
	Ours *controller `json:"ours,omitempty"` // nil: the limit with events
	// Also is what the variant adds to ours: flags, and NAME=value words, which go to
	// its environment (GOGC=100); empty for ours as it is.
	Also []string `json:"also,omitempty"`
	// Watching, for the limit, starts it with informers (limit.Watching).
	Watching bool `json:"watching,omitempty"`
	Pair     int  `json:"pair"`
}

// watchingSide names the watching limit's side.
const watchingSide = "limit watching"

func (r ratioSide) side() string {
	switch {
	case r.Ours == nil && r.Watching:
		return watchingSide
	case r.Ours == nil:
		return "limit"
	case len(r.Also) > 0:
		return ourName + " " + strings.Join(r.Also, " ")
	}
	return ourName
}

func (r ratioSide) column() string   { return fmt.Sprintf("ratio %s %d", r.side(), r.Pair) }
func (r ratioSide) rule() statusRule { return ruleReady }

func (r ratioSide) start(ctx context.Context, s *session) error {
	if r.Ours == nil {
		return limit{Events: true, Inflight: s.cfg.ratioInflight, Watching: r.Watching}.start(ctx, s)
	}
	c := *r.Ours
	flags, env := splitAlso(r.Also)
	c.Args = append(slices.Concat(c.Args, flags), "--namespace="+s.namespace)
	c.Env = env
	return c.start(ctx, s)
}

// splitAlso splits a variant's words into flags and NAME=value environment variables.
func splitAlso(also []string) (flags, env []string) {
	for _, w := range also {
		if name, _, ok := strings.Cut(w, "="); ok && name != "" && !strings.HasPrefix(name, "-") {
			env = append(env, w)
			continue
		}
		flags = append(flags, w)
	}
	return flags, env
}

// ratioPlan is the ratio case's sessions: for every size, pairs of our controller and
// the limit (triples with our controller with the flags also, when there are any) in
// rotating order, all on one cluster. After its cold start, every side reacts to spec
// changes at each of rates; our controller's sides first have their RSS read. In the
// first pair of each size, ours then has its writes counted at steady state, which the
// limit, doing nothing once done, has no counterpart of: after its reactions, so that
// every side's reactions follow its cold start alike (a window 65 s later would find
// the apiserver's watch caches resized, its cold start's events having aged). A
// watching limit reacts to its Foo informer's events, as a controller does.
func ratioPlan(ours controller, sizes []int, pairs int, also []string, watchingLimit bool, rates []int) []sessionPlan {
	shared := &sharedCluster{}
	sides := []ratioSide{{Ours: &ours}}
	if len(also) > 0 {
		sides = append(sides, ratioSide{Ours: &ours, Also: also})
	}
	if watchingLimit {
		sides = append(sides, ratioSide{Watching: true})
	}
	sides = append(sides, ratioSide{})
	var reactions []benchCase
	for _, rate := range rates {
		reactions = append(reactions, reactionCase{rate: rate})
	}
	var out []sessionPlan
	for _, n := range sizes {
		for pair := 1; pair <= pairs; pair++ {
			first := (pair - 1) % len(sides)
			for _, side := range slices.Concat(sides[first:], sides[:first]) {
				side.Pair = pair
				cases := []benchCase{coldStartCase{record: true, events: true}}
				if side.Ours != nil {
					cases = append(cases, rssCase{})
				}
				cases = append(cases, reactions...)
				if side.Ours != nil && pair == 1 {
					cases = append(cases, steadyCase{})
				}
				out = append(out, sessionPlan{
					driver: side,
					foos:   n,
					cases:  cases,
					shared: shared,
				})
			}
		}
	}
	return out
}

// ratioMarkdown is the ratio case's table: for every size, each pair's cold starts
// and the ratio of each other side (ours, its variant, the watching limit) to the
// limit, then the ratios' medians and ranges.
func ratioMarkdown(res *results, inflight int) string {
	type key struct{ foos, pair int }
	seconds := map[key]map[string]float64{} // by side
	var keys []key
	var ours []string // the sides other than the limit, as they first ran
	for _, r := range res.Runs {
		side, ok := r.Driver.(ratioSide)
		if !ok || r.ColdStart == nil || !r.ColdStart.Converged {
			continue
		}
		k := key{r.Foos, side.Pair}
		if seconds[k] == nil {
			seconds[k] = map[string]float64{}
			keys = append(keys, k)
		}
		seconds[k][side.side()] = r.ColdStart.Seconds
		if side.side() != "limit" && !slices.Contains(ours, side.side()) {
			ours = append(ours, side.side())
		}
	}
	if len(keys) == 0 {
		return ""
	}
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	header := []string{"cold start, Foos", "pair"}
	for _, side := range ours {
		header = append(header, side+" (s)")
	}
	header = append(header, fmt.Sprintf("limit with events, %d in flight (s)", inflight))
	for _, side := range ours {
		header = append(header, side+" ÷ limit")
	}
	// With a watching limit, our sides are also measured against it: what the
	// controller costs beyond its informers.
	var againstWatching []string
	if slices.Contains(ours, watchingSide) {
		againstWatching = slices.DeleteFunc(slices.Clone(ours), func(side string) bool { return side == watchingSide })
	}
	for _, side := range againstWatching {
		header = append(header, side+" ÷ "+watchingSide)
	}
	writeLine(header...)
	writeLine(slices.Repeat([]string{"--:"}, len(header))...)
	ratios := map[int]map[string][]float64{} // by size, then side
	var sizes []int
	for _, k := range keys {
		lim, limOK := seconds[k]["limit"]
		complete := limOK && !slices.ContainsFunc(ours, func(side string) bool { _, ok := seconds[k][side]; return !ok })
		if !complete {
			continue
		}
		if !slices.Contains(sizes, k.foos) {
			sizes = append(sizes, k.foos)
			ratios[k.foos] = map[string][]float64{}
		}
		line := []string{fmt.Sprint(k.foos), fmt.Sprint(k.pair)}
		for _, side := range ours {
			line = append(line, formatNumber(seconds[k][side]))
		}
		line = append(line, formatNumber(lim))
		for _, side := range ours {
			ratios[k.foos][side] = append(ratios[k.foos][side], seconds[k][side]/lim)
			line = append(line, formatRatio(seconds[k][side]/lim))
		}
		for _, side := range againstWatching {
			r := seconds[k][side] / seconds[k][watchingSide]
			ratios[k.foos][side+" ÷ watching"] = append(ratios[k.foos][side+" ÷ watching"], r)
			line = append(line, formatRatio(r))
		}
		writeLine(line...)
	}
	for _, n := range sizes {
		line := []string{fmt.Sprint(n), "median of the pairs (range)"}
		line = append(line, slices.Repeat([]string{""}, len(ours)+1)...)
		for _, side := range ours {
			line = append(line, spread(ratios[n][side]))
		}
		for _, side := range againstWatching {
			line = append(line, spread(ratios[n][side+" ÷ watching"]))
		}
		writeLine(line...)
	}
	return b.String()
}

// spread is the median of ratios and their range, e.g. "1.21 (1.08-1.40)".
func spread(ratios []float64) string {
	if len(ratios) == 0 {
		return "n/a"
	}
	sorted := slices.Sorted(slices.Values(ratios))
	return fmt.Sprintf("%s (%s-%s)", formatRatio(median(ratios)), formatRatio(sorted[0]), formatRatio(sorted[len(sorted)-1]))
}

// ratioTargetsMarkdown is the ratio case's second table, of our controller with its
// default flags (not a --ratio-also variant) against the limit in the same pairs: its
// RSS once converged, its writes at steady state (first pairs only), and each rate's
// reaction p99, ours, the limit's and their ratio, with the ratios' median and range
// for each size; with a watching limit, its p99, its ratio to the limit's, and ours to
// its own, the fair one for reactions (both learn of a change from the Foo's watch).
// A p99 of changes not all delivered says how many were. Beside the
// RSS, the CPU the controller had used when it was read; a variant's RSS and CPU, read
// the same way in the same triple, have columns beside ours.
func ratioTargetsMarkdown(res *results) string {
	type key struct{ foos, pair int }
	ours, limits, watching := map[key]runResult{}, map[key]runResult{}, map[key]runResult{}
	variantRSS := map[string]map[key]*rssResult{} // by side
	var variants []string
	var keys []key
	var rates []int
	for _, r := range res.Runs {
		side, ok := r.Driver.(ratioSide)
		if !ok || r.ColdStart == nil || !r.ColdStart.Converged {
			continue
		}
		k := key{r.Foos, side.Pair}
		if side.Watching {
			watching[k] = r
			continue
		}
		if len(side.Also) > 0 {
			if r.RSS != nil {
				if variantRSS[side.side()] == nil {
					variantRSS[side.side()] = map[key]*rssResult{}
					variants = append(variants, side.side())
				}
				variantRSS[side.side()][k] = r.RSS
			}
			continue
		}
		if side.Ours != nil {
			ours[k] = r
		} else {
			limits[k] = r
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		for _, rr := range r.Reactions {
			if !slices.Contains(rates, rr.Rate) {
				rates = append(rates, rr.Rate)
			}
		}
	}
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	header := []string{"at the limit, Foos", "pair"}
	for _, side := range append([]string{ourName}, variants...) {
		header = append(header, side+": RSS (MiB)", "CPU used (s)")
	}
	header = append(header, "writes per minute at steady state")
	withWatching := len(watching) > 0
	for _, rate := range rates {
		header = append(header, fmt.Sprintf("p99 at %d changes/s (ms): %s", rate, ourName), "limit", "÷")
		if withWatching {
			header = append(header, watchingSide, watchingSide+" ÷ limit", ourName+" ÷ "+watchingSide)
		}
	}
	ratios := map[int]map[int][]float64{}          // by size, then rate
	watchingRatios := map[int]map[int][]float64{}  // the watching limit's, alike
	againstWatching := map[int]map[int][]float64{} // ours ÷ the watching limit's
	var sizes []int
	rows := 0
	for _, k := range keys {
		o, ook := ours[k]
		l, lok := limits[k]
		if !ook || !lok || o.RSS == nil {
			continue
		}
		if rows == 0 {
			writeLine(header...)
			writeLine(slices.Repeat([]string{"--:"}, len(header))...)
		}
		rows++
		if !slices.Contains(sizes, k.foos) {
			sizes = append(sizes, k.foos)
			ratios[k.foos] = map[int][]float64{}
			watchingRatios[k.foos] = map[int][]float64{}
			againstWatching[k.foos] = map[int][]float64{}
		}
		steady := ""
		if o.Steady != nil {
			steady = formatNumber(o.Steady.PerMinute)
		}
		line := append([]string{fmt.Sprint(k.foos), fmt.Sprint(k.pair)}, memoryCells(o.RSS)...)
		for _, v := range variants {
			line = append(line, memoryCells(variantRSS[v][k])...)
		}
		line = append(line, steady)
		for _, rate := range rates {
			or, oyes := reactionAt(o, rate)
			lr, lyes := reactionAt(l, rate)
			if !oyes || !lyes {
				line = append(line, "", "", "")
			} else {
				ratios[k.foos][rate] = append(ratios[k.foos][rate], or.P99Ms/lr.P99Ms)
				line = append(line, p99Text(or), p99Text(lr), formatRatio(or.P99Ms/lr.P99Ms))
			}
			if !withWatching {
				continue
			}
			wr, wyes := reactionAt(watching[k], rate)
			if !wyes {
				line = append(line, "", "", "")
				continue
			}
			line = append(line, p99Text(wr))
			if lyes {
				watchingRatios[k.foos][rate] = append(watchingRatios[k.foos][rate], wr.P99Ms/lr.P99Ms)
				line = append(line, formatRatio(wr.P99Ms/lr.P99Ms))
			} else {
				line = append(line, "")
			}
			if oyes {
				againstWatching[k.foos][rate] = append(againstWatching[k.foos][rate], or.P99Ms/wr.P99Ms)
				line = append(line, formatRatio(or.P99Ms/wr.P99Ms))
			} else {
				line = append(line, "")
			}
		}
		writeLine(line...)
	}
	for _, n := range sizes {
		line := append([]string{fmt.Sprint(n), "median of the pairs (range)"}, slices.Repeat([]string{""}, 2*(len(variants)+1)+1)...)
		for _, rate := range rates {
			line = append(line, "", "", spread(ratios[n][rate]))
			if withWatching {
				line = append(line, "", spread(watchingRatios[n][rate]), spread(againstWatching[n][rate]))
			}
		}
		writeLine(line...)
	}
	return b.String()
}

// memoryCells are a side's RSS and the CPU it had used when that was read, each empty
// when not known.
func memoryCells(r *rssResult) []string {
	if r == nil {
		return []string{"", ""}
	}
	cpu := ""
	if r.CPU != nil {
		cpu = formatNumber(*r.CPU)
	}
	return []string{formatNumber(mib(r.Bytes)), cpu}
}

// reactionAt is the run's reaction case at rate, if it ran.
func reactionAt(r runResult, rate int) (reactionResult, bool) {
	for _, rr := range r.Reactions {
		if rr.Rate == rate {
			return rr, true
		}
	}
	return reactionResult{}, false
}

// p99Text is a reaction's p99, with how many of its changes were delivered when not all.
func p99Text(r reactionResult) string {
	if want := r.Sent - r.Failed; r.Delivered < want {
		return fmt.Sprintf("%s (%d of %d)", formatNumber(r.P99Ms), r.Delivered, want)
	}
	return formatNumber(r.P99Ms)
}

// ratioCPUMarkdown is the ratio case's third table: for every size and side, the CPU
// time each process used per Foo through the cold start, the median of the pairs,
// and all of them together. On cores the processes share, it says where a side's
// extra time goes: to the controller's own work, or to what its watches cost the
// apiserver.
func ratioCPUMarkdown(res *results) string {
	type key struct {
		foos int
		side string
	}
	perFoo := map[key]map[string][]float64{} // by process, one per pair
	var keys []key
	for _, r := range res.Runs {
		side, ok := r.Driver.(ratioSide)
		if !ok || r.ColdStart == nil || !r.ColdStart.Converged || len(r.ColdStart.CPUSeconds) == 0 {
			continue
		}
		k := key{r.Foos, side.side()}
		if perFoo[k] == nil {
			perFoo[k] = map[string][]float64{}
			keys = append(keys, k)
		}
		all := 0.0
		for name, seconds := range r.ColdStart.CPUSeconds {
			perFoo[k][name] = append(perFoo[k][name], seconds/float64(r.Foos)*1000)
			all += seconds
		}
		perFoo[k]["all"] = append(perFoo[k]["all"], all/float64(r.Foos)*1000)
	}
	if len(keys) == 0 {
		return ""
	}
	slices.SortStableFunc(keys, func(a, b key) int { return a.foos - b.foos })
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	header := []string{"CPU per Foo through the cold start (ms), median of the pairs: Foos", "side"}
	header = append(append(header, cpuProcesses...), "all")
	writeLine(header...)
	writeLine(slices.Repeat([]string{"--:"}, len(header))...)
	for _, k := range keys {
		line := []string{fmt.Sprint(k.foos), k.side}
		for _, name := range append(slices.Clone(cpuProcesses), "all") {
			cell := ""
			if v := perFoo[k][name]; len(v) > 0 {
				cell = fmt.Sprintf("%.2f", median(v))
			}
			line = append(line, cell)
		}
		writeLine(line...)
	}
	return b.String()
}

// median is the middle of values, or the mean of the two in the middle.
func median(values []float64) float64 {
	sorted := slices.Sorted(slices.Values(values))
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
