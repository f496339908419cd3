package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// cell is one figure of the table: a number, a text in place of one (such as
// "timed out: ..."), or nothing.
type cell struct {
	value float64
	ok    bool   // value holds a figure
	text  string // shown instead of value when set
}

func num(v float64) cell               { return cell{value: v, ok: true} }
func text(s string) cell               { return cell{text: s} }
func numText(v float64, s string) cell { return cell{value: v, ok: true, text: s} }

func (c cell) String() string {
	switch {
	case c.text != "":
		return c.text
	case c.ok:
		return formatNumber(c.value)
	}
	return ""
}

// formatNumber prints about three significant digits.
func formatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// row is one figure for each controller, and for the limit where there is one.
type row struct {
	name  string
	cells []cell // one per controller, in results order
	limit cell
}

// buildRows lays out every figure of res, one row each.
func buildRows(res *results) []row {
	var rows []row
	add := func(name string, limit cell, f func(c *controllerResults) cell) {
		r := row{name: name, limit: limit}
		for i := range res.Controllers {
			r.cells = append(r.cells, f(&res.Controllers[i]))
		}
		rows = append(rows, r)
	}

	for _, n := range coldStartSizes(res) {
		lim := findColdStart(res.Limit, n)
		add(fmt.Sprintf("cold start, %d Foos (s)", n), coldStartCell(lim), func(c *controllerResults) cell {
			return coldStartCell(findColdStart(c.ColdStarts, n))
		})
		if lim != nil && lim.Converged {
			add(fmt.Sprintf("cold start, %d Foos ÷ limit (×)", n), cell{}, func(c *controllerResults) cell {
				cs := findColdStart(c.ColdStarts, n)
				if cs == nil || !cs.Converged || lim.Seconds == 0 {
					return cell{}
				}
				return num(cs.Seconds / lim.Seconds)
			})
		}
		add(fmt.Sprintf("requests per Foo, %d Foos: total", n), perFooCell(lim, func(cs *coldStart) float64 { return cs.PerFooTotal }), func(c *controllerResults) cell {
			return perFooCell(findColdStart(c.ColdStarts, n), func(cs *coldStart) float64 { return cs.PerFooTotal })
		})
		for _, key := range requestKeys(res, n) {
			get := func(cs *coldStart) float64 { return cs.PerFoo[key] }
			add(fmt.Sprintf("requests per Foo, %d Foos: %s", n, key), perFooCell(lim, get), func(c *controllerResults) cell {
				return perFooCell(findColdStart(c.ColdStarts, n), get)
			})
		}
		add(fmt.Sprintf("events written per Foo, %d Foos", n), cell{}, func(c *controllerResults) cell {
			return perFooCell(findColdStart(c.ColdStarts, n), func(cs *coldStart) float64 { return cs.EventWritesPerFoo })
		})
	}

	if hasAny(res, func(c *controllerResults) bool { return c.Steady != nil }) {
		add(fmt.Sprintf("steady state, %d Foos: writes per minute", res.Settings.SteadyFoos), cell{}, func(c *controllerResults) cell {
			if c.Steady == nil {
				return skipped(c)
			}
			return num(c.Steady.PerMinute)
		})
	}

	if hasAny(res, func(c *controllerResults) bool { return c.Memory != nil }) {
		memRow := func(name string, f func(m *memory) cell) {
			add(name, cell{}, func(c *controllerResults) cell {
				if c.Memory == nil {
					return skipped(c)
				}
				return f(c.Memory)
			})
		}
		n, m := res.Settings.SteadyFoos, res.Settings.UnrelatedDeployments
		memRow(fmt.Sprintf("RSS, %d Foos (MiB)", n), func(m *memory) cell { return num(mib(m.RSSBefore)) })
		memRow(fmt.Sprintf("RSS, %d Foos + %d unrelated Deployments (MiB)", n, m), func(m *memory) cell {
			if m.TimedOut != "" {
				return numText(mib(m.RSSAfter), fmt.Sprintf("%s (%s)", formatNumber(mib(m.RSSAfter)), m.TimedOut))
			}
			return num(mib(m.RSSAfter))
		})
		memRow("RSS per 10000 unrelated Deployments (MiB)", func(m *memory) cell { return num(m.RSSPer10k / (1 << 20)) })
		heap := func(v *float64) cell {
			if v == nil {
				return text("n/a")
			}
			return num(*v / (1 << 20))
		}
		memRow(fmt.Sprintf("heap in use, %d Foos (MiB)", n), func(m *memory) cell { return heap(m.HeapBefore) })
		memRow(fmt.Sprintf("heap in use, %d Foos + %d unrelated Deployments (MiB)", n, m), func(m *memory) cell { return heap(m.HeapAfter) })
		memRow("heap in use per 10000 unrelated Deployments (MiB)", func(m *memory) cell { return heap(m.HeapPer10k) })
	}

	for _, rate := range res.Settings.Rates {
		if !hasAny(res, func(c *controllerResults) bool { return findReaction(c, rate) != nil }) {
			continue
		}
		lim := findRate(res.LimitReactions, rate)
		reactRow := func(name string, f func(r *reaction) cell) {
			var limit cell
			if lim != nil {
				limit = f(lim)
			}
			add(fmt.Sprintf("reaction, %d changes/s: %s", rate, name), limit, func(c *controllerResults) cell {
				r := findReaction(c, rate)
				if r == nil {
					return skipped(c)
				}
				return f(r)
			})
		}
		reactRow("sent per second", func(r *reaction) cell { return num(r.AchievedRate) })
		reactRow(fmt.Sprintf("delivered within %.0f s", res.Settings.ReactionDeadlineSecs), func(r *reaction) cell {
			return numText(float64(r.Delivered), fmt.Sprintf("%d of %d", r.Delivered, r.Sent-r.Failed))
		})
		reactRow("delivered with their own value (not superseded)", func(r *reaction) cell { return num(float64(r.Exact)) })
		reactRow("p50 (ms)", func(r *reaction) cell { return latencyCell(r, r.P50Ms) })
		reactRow("p99 (ms)", func(r *reaction) cell { return latencyCell(r, r.P99Ms) })
		reactRow("max (ms)", func(r *reaction) cell { return latencyCell(r, r.MaxMs) })
		if lim != nil && lim.Delivered > 0 && lim.P99Ms > 0 {
			add(fmt.Sprintf("reaction, %d changes/s: p99 ÷ limit (×)", rate), cell{}, func(c *controllerResults) cell {
				r := findReaction(c, rate)
				if r == nil || r.Delivered == 0 {
					return cell{}
				}
				return num(r.P99Ms / lim.P99Ms)
			})
		}
		reactRow("p50 from the patch's response (ms)", func(r *reaction) cell { return latencyCell(r, r.AcceptedP50Ms) })
		reactRow("p99 from the patch's response (ms)", func(r *reaction) cell { return latencyCell(r, r.AcceptedP99Ms) })
	}
	return rows
}

func coldStartCell(cs *coldStart) cell {
	switch {
	case cs == nil:
		return cell{}
	case !cs.Converged:
		return text(cs.timedOutText())
	}
	return num(cs.Seconds)
}

// perFooCell is a per-Foo figure of a converged cold start.
func perFooCell(cs *coldStart, f func(*coldStart) float64) cell {
	switch {
	case cs == nil:
		return cell{}
	case !cs.Converged:
		return text("n/a (timed out)")
	}
	return num(f(cs))
}

func latencyCell(r *reaction, v float64) cell {
	if r.Delivered == 0 {
		return text("none delivered")
	}
	return num(v)
}

func skipped(c *controllerResults) cell {
	if c.Skipped != "" {
		return text("skipped: " + c.Skipped)
	}
	return cell{}
}

func hasAny(res *results, f func(c *controllerResults) bool) bool {
	return slices.ContainsFunc(res.Controllers, func(c controllerResults) bool { return f(&c) })
}

func findColdStart(list []coldStart, n int) *coldStart {
	for i := range list {
		if list[i].Foos == n {
			return &list[i]
		}
	}
	return nil
}

func findReaction(c *controllerResults, rate int) *reaction {
	return findRate(c.Reactions, rate)
}

func findRate(list []reaction, rate int) *reaction {
	for i := range list {
		if list[i].Rate == rate {
			return &list[i]
		}
	}
	return nil
}

// coldStartSizes are the cold-start sizes anything was measured for, in order.
func coldStartSizes(res *results) []int {
	var sizes []int
	for _, cs := range res.Limit {
		sizes = append(sizes, cs.Foos)
	}
	for _, c := range res.Controllers {
		for _, cs := range c.ColdStarts {
			sizes = append(sizes, cs.Foos)
		}
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// requestKeys are the "VERB resource" keys any cold start of n Foos made requests
// with, sorted.
func requestKeys(res *results, n int) []string {
	keys := map[string]bool{}
	collect := func(cs *coldStart) {
		if cs != nil {
			for k := range cs.PerFoo {
				keys[k] = true
			}
		}
	}
	collect(findColdStart(res.Limit, n))
	for _, c := range res.Controllers {
		collect(findColdStart(c.ColdStarts, n))
	}
	return slices.Sorted(maps.Keys(keys))
}

// renderMarkdown renders the rows as a markdown table: the figure, one column per
// controller, with a second controller its ratio to ours, and the limit when any row
// has one.
func renderMarkdown(res *results, rows []row) string {
	header := []string{"case"}
	for _, c := range res.Controllers {
		header = append(header, c.Name)
	}
	compare := len(res.Controllers) == 2
	if compare {
		header = append(header, res.Controllers[1].Name+" ÷ "+res.Controllers[0].Name)
	}
	withLimit := slices.ContainsFunc(rows, func(r row) bool { return r.limit != cell{} })
	if withLimit {
		header = append(header, limitName)
	}

	var b strings.Builder
	writeLine := func(cells []string) {
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	writeLine(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if i > 0 {
			sep[i] = "--:"
		}
	}
	writeLine(sep)
	for _, r := range rows {
		line := []string{r.name}
		for _, c := range r.cells {
			line = append(line, escapeCell(c.String()))
		}
		if compare {
			line = append(line, ratio(r.cells[1], r.cells[0]))
		}
		if withLimit {
			line = append(line, escapeCell(r.limit.String()))
		}
		writeLine(line)
	}
	return b.String()
}

// ratio is a ÷ b, as "12×", or empty when either is missing.
func ratio(a, b cell) string {
	switch {
	case !a.ok || !b.ok:
		return ""
	case b.value == 0 && a.value == 0:
		return "="
	case b.value == 0:
		return "∞"
	}
	return formatNumber(a.value/b.value) + "×"
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
