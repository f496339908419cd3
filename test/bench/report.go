package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// results is everything measured, as written to results.json.
type results struct {
	Started  time.Time   `json:"started"`
	Finished time.Time   `json:"finished"`
	Args     []string    `json:"args"`
	Runs     []runResult `json:"runs"`
}

// runResult is what one session measured: one side, at one size, in one pair.
type runResult struct {
	Column    string           `json:"column"`
	Limit     bool             `json:"limit"`
	Peer      bool             `json:"peer,omitempty"`
	Driver    driver           `json:"driver"`
	Foos      int              `json:"foos"`
	Pair      int              `json:"pair"`
	ColdStart *coldStartResult `json:"coldStart,omitempty"`
	Steady    *steadyResult    `json:"steady,omitempty"`
	Memory    *memoryResult    `json:"memory,omitempty"`
	Restart   *restartResult   `json:"restart,omitempty"`
	Relist    *relistResult    `json:"relist,omitempty"`
	Reactions []reactionResult `json:"reactions,omitempty"`
}

func writeResults(dir string, res *results) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "results.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return err
	}
	progressf("wrote %s", path)
	return nil
}

// The sections of the table, in the order of the cases.
const (
	sectionColdStart = iota
	sectionSteady
	sectionMemory
	sectionRestart
	sectionRelist
	sectionReaction
)

// rowKey names a row and places it: by section, size or rate, place, then name.
type rowKey struct {
	section, n, sub int
	name            string
}

func row(section, n, sub int, format string, args ...any) rowKey {
	return rowKey{section, n, sub, fmt.Sprintf(format, args...)}
}

// table is the report: one row per figure, one column per side.
type table struct {
	columns []string // in the order of the runs
	limits  map[string]bool
	cells   map[rowKey]map[string]*cell
	// ratios are rows of each side's figure in another row ÷ a limit's or a peer's,
	// pair by pair.
	ratios map[rowKey]ratioOf
}

// ratioOf is a ratio row: the figures of row ÷ those of the column to, for the
// columns before it.
type ratioOf struct {
	row rowKey
	to  string
}

// cell is one side's figures in one row, by pair, and the texts of the pairs that
// gave one instead ("timed out: ..."). A nil cell is empty.
type cell struct {
	pairs map[int]float64
	texts map[int]string
}

// buildTable lays out every figure of res.
func buildTable(res *results) *table {
	t := &table{limits: map[string]bool{}, cells: map[rowKey]map[string]*cell{}, ratios: map[rowKey]ratioOf{}}
	// Every cold start of a size shows every request key any of them made.
	keys := map[int][]string{}
	for _, r := range res.Runs {
		if cs := r.ColdStart; cs != nil {
			keys[cs.Foos] = slices.AppendSeq(keys[cs.Foos], maps.Keys(cs.PerFoo))
		}
	}
	// The bench's CPU on ours' side is what it spends watching a side; on a limit's
	// side it spends that and the limit's own, by size and pair.
	type sizePair struct{ n, pair int }
	watching := map[sizePair]float64{}
	for _, r := range res.Runs {
		if cs := r.ColdStart; cs != nil && r.Column == ourName && cs.Converged && cs.BenchCPUSeconds > 0 {
			watching[sizePair{cs.Foos, r.Pair}] = cs.BenchCPUSeconds
		}
	}
	for _, r := range res.Runs {
		if !slices.Contains(t.columns, r.Column) {
			t.columns = append(t.columns, r.Column)
			t.limits[r.Column] = r.Limit
		}
		// set records pair's figure in row k, or when ok is false, why there is none.
		set := func(k rowKey, v float64, ok bool, otherwise string) {
			c := t.cells[k][r.Column]
			if c == nil {
				c = &cell{pairs: map[int]float64{}, texts: map[int]string{}}
				if t.cells[k] == nil {
					t.cells[k] = map[string]*cell{}
				}
				t.cells[k][r.Column] = c
			}
			if ok {
				c.pairs[r.Pair] = v
			} else {
				c.texts[r.Pair] = otherwise
			}
		}
		// ratio makes k the ratio row of row of to this side, a limit; toPeer, to a peer.
		ratio := func(k, of rowKey) {
			if r.Limit {
				t.ratios[k] = ratioOf{of, r.Column}
			}
		}
		toPeer := func(k, of rowKey) {
			if r.Peer {
				t.ratios[k] = ratioOf{of, r.Column}
			}
		}
		if cs := r.ColdStart; cs != nil {
			n := cs.Foos
			seconds := row(sectionColdStart, n, 0, "cold start, %d Foos (s)", n)
			set(seconds, cs.Seconds, cs.Converged, cs.timedOutText())
			if cs.Converged && cs.Seconds > 0 {
				ratio(row(sectionColdStart, n, 1, "cold start, %d Foos ÷ %s (×)", n, r.Column), seconds)
			}
			lastDeployment := row(sectionColdStart, n, 2, "cold start, %d Foos: the last Deployment (s)", n)
			set(lastDeployment, cs.DeploymentsSeconds, cs.Converged, "n/a (timed out)")
			lastStatus := row(sectionColdStart, n, 3, "cold start, %d Foos: the last status (s)", n)
			set(lastStatus, cs.StatusesSeconds, cs.Converged, "n/a (timed out)")
			if cs.Converged {
				toPeer(row(sectionColdStart, n, 2, "cold start, %d Foos: the last Deployment ÷ %s (×)", n, r.Column), lastDeployment)
				toPeer(row(sectionColdStart, n, 3, "cold start, %d Foos: the last status ÷ %s (×)", n, r.Column), lastStatus)
			}
			set(row(sectionColdStart, n, 4, "requests per Foo, %d Foos: total", n), cs.PerFooTotal, cs.Converged, "n/a (timed out)")
			for _, k := range keys[n] {
				set(row(sectionColdStart, n, 5, "requests per Foo, %d Foos: %s", n, k), cs.PerFoo[k], cs.Converged, "n/a (timed out)")
			}
			set(row(sectionColdStart, n, 6, "events written per Foo, %d Foos", n), cs.EventWritesPerFoo, cs.Converged, "n/a (timed out)")
			// The side's own CPU: the controller's, or the limit's, which the bench spent
			// beyond what it spends watching.
			own := cs.ControllerCPUSeconds
			if w, ok := watching[sizePair{n, r.Pair}]; ok && r.Limit && cs.BenchCPUSeconds > 0 {
				own = cs.BenchCPUSeconds - w
			}
			if own != 0 {
				ownCPU := row(sectionColdStart, n, 7, "CPU per Foo, %d Foos: the controller, or the limit's writes and informers (ms)", n)
				set(ownCPU, 1000*own/float64(n), cs.Converged, "n/a (timed out)")
				if cs.Converged {
					ratio(row(sectionColdStart, n, 8, "CPU per Foo, %d Foos: the controller ÷ %s (×)", n, r.Column), ownCPU)
				}
				// Every process's CPU moves with the pace of the round; beside
				// kube-apiserver's of the same session, much less.
				set(row(sectionColdStart, n, 9, "CPU per Foo, %d Foos: the controller, or the limit's own, ÷ kube-apiserver's (×)", n), own/cs.APIServerCPUSeconds, cs.Converged && cs.APIServerCPUSeconds > 0, "n/a")
			}
			if cs.BenchCPUSeconds > 0 {
				set(row(sectionColdStart, n, 10, "CPU per Foo, %d Foos: the bench, which watches every side and runs the limits (ms)", n), 1000*cs.BenchCPUSeconds/float64(n), cs.Converged, "n/a (timed out)")
			}
			if cs.APIServerCPUSeconds > 0 {
				apiserverCPU := row(sectionColdStart, n, 11, "CPU per Foo, %d Foos: kube-apiserver (ms)", n)
				set(apiserverCPU, 1000*cs.APIServerCPUSeconds/float64(n), cs.Converged, "n/a (timed out)")
				if cs.Converged {
					ratio(row(sectionColdStart, n, 12, "CPU per Foo, %d Foos: kube-apiserver ÷ %s (×)", n, r.Column), apiserverCPU)
				}
			}
		}
		if st := r.Steady; st != nil {
			set(row(sectionSteady, 0, 0, "steady state, %d Foos: writes per minute", st.Foos), st.PerMinute, true, "")
		}
		if m := r.Memory; m != nil {
			set(row(sectionMemory, 0, 0, "RSS, %d Foos (MiB)", m.Foos), mib(m.RSSBefore), true, "")
			if len(m.RSSReplicas) > 1 {
				set(row(sectionMemory, 0, 0, "RSS, %d Foos: the largest replica (MiB)", m.Foos), mib(slices.Max(m.RSSReplicas)), true, "")
			}
			if m.RSSFileBefore > 0 {
				set(row(sectionMemory, 0, 0, "RSS, %d Foos: of it mapped from files, the binary mostly (MiB)", m.Foos), mib(m.RSSFileBefore), true, "")
			}
			set(row(sectionMemory, 0, 1, "RSS, %d Foos + %d unrelated Deployments (MiB)", m.Foos, m.Unrelated), mib(m.RSSAfter), true, "")
			set(row(sectionMemory, 0, 2, "RSS per 10000 unrelated Deployments (MiB)"), mib(m.RSSPer10k), true, "")
			if m.APIServerRSS > 0 && m.EtcdRSS > 0 {
				set(row(sectionMemory, 0, 3, "RSS of kube-apiserver, %d Foos (MiB)", m.Foos), mib(m.APIServerRSS), true, "")
				set(row(sectionMemory, 0, 4, "RSS of etcd, %d Foos (MiB)", m.Foos), mib(m.EtcdRSS), true, "")
			}
		}
		if rs := r.Restart; rs != nil {
			set(row(sectionRestart, 0, 0, "restart, %d Foos converged: writes in the steady-state window after it", rs.Foos), rs.WritesTotal, true, "")
			set(row(sectionRestart, 0, 1, "restart, %d Foos converged: /readyz (s)", rs.Foos), rs.ReadySeconds, rs.ReadySeconds > 0, "no /readyz")
			set(row(sectionRestart, 0, 2, "restart, %d Foos converged: the same informers filled (s)", rs.Foos), rs.CacheSyncSeconds, true, "")
			set(row(sectionRestart, 0, 3, "restart, %d Foos converged: /readyz ÷ informers filled (×)", rs.Foos), rs.ReadySeconds/rs.CacheSyncSeconds, rs.ReadySeconds > 0 && rs.CacheSyncSeconds > 0, "")
		}
		if rl := r.Relist; rl != nil {
			at := func(sub int, format string) rowKey {
				return row(sectionRelist, 0, sub, "kube-apiserver restarted, %d Foos converged: %s", rl.Foos, format)
			}
			set(at(0, "writes in the steady-state window after it"), rl.WritesTotal, true, "")
			set(at(1, "kube-apiserver ready (s)"), rl.APIServerReadySeconds, true, "")
			set(at(2, "the controller's CPU in the window (s)"), rl.CPUSeconds, true, "")
			set(at(3, "the controller's peak RSS ÷ its RSS before (×)"), float64(rl.RSSPeak)/float64(rl.RSSBefore), rl.RSSBefore > 0, "")
		}
		for _, rr := range r.Reactions {
			at := func(sub int, format string, args ...any) rowKey {
				return row(sectionReaction, rr.Rate, sub, "reaction, %d changes/s: %s", rr.Rate, fmt.Sprintf(format, args...))
			}
			delivered, sent := rr.Delivered > 0, rr.Sent-rr.Failed
			set(at(0, "sent per second"), rr.AchievedRate, true, "")
			set(at(1, "delivered within %.0f s (%%)", rr.DeadlineSeconds), 100*float64(rr.Delivered)/float64(max(sent, 1)), sent > 0, "none sent")
			set(at(2, "p50 (ms)"), rr.P50Ms, delivered, "none delivered")
			p99 := at(3, "p99 (ms)")
			set(p99, rr.P99Ms, delivered, "none delivered")
			set(at(4, "max (ms)"), rr.MaxMs, delivered, "none delivered")
			if delivered && rr.P99Ms > 0 {
				ratio(at(5, "p99 ÷ %s (×)", r.Column), p99)
			}
			set(at(6, "p50 from the patch's response (ms)"), rr.AcceptedP50Ms, delivered, "none delivered")
			set(at(7, "p99 from the patch's response (ms)"), rr.AcceptedP99Ms, delivered, "none delivered")
		}
	}
	return t
}

// markdown renders the table: the figure, one column per controller (ours, the peers,
// another), then one per limit. A ratio to a limit or a peer is given for the columns
// before it: to a limit, the controllers, and the watching limit against the plain
// one; to a peer, ours (and a peer before it).
func (t *table) markdown() string {
	isLimit := func(c string) bool { return t.limits[c] }
	notLimit := func(c string) bool { return !t.limits[c] }
	columns := slices.Concat(slices.DeleteFunc(slices.Clone(t.columns), isLimit), slices.DeleteFunc(slices.Clone(t.columns), notLimit))
	var b strings.Builder
	writeLine := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	writeLine(append([]string{"case"}, columns...))
	writeLine(append([]string{"---"}, slices.Repeat([]string{"--:"}, len(columns))...))

	rows := slices.AppendSeq(slices.Collect(maps.Keys(t.cells)), maps.Keys(t.ratios))
	slices.SortFunc(rows, func(a, b rowKey) int {
		return cmp.Or(cmp.Compare(a.section, b.section), cmp.Compare(a.n, b.n), cmp.Compare(a.sub, b.sub), strings.Compare(a.name, b.name))
	})
	for _, k := range rows {
		cells := t.cells[k]
		if r, ok := t.ratios[k]; ok {
			cells = map[string]*cell{}
			for _, c := range columns[:slices.Index(columns, r.to)] {
				cells[c] = divide(t.cells[r.row][c], t.cells[r.row][r.to])
			}
		}
		line := []string{k.name}
		for _, c := range columns {
			line = append(line, strings.ReplaceAll(cells[c].String(), "|", `\|`))
		}
		writeLine(line)
	}
	return b.String()
}

// String is the median of the pairs' figures and their range, "1.21 (1.08-1.40)" (no
// range when they agree), then the texts, named by their pairs when there is more.
func (c *cell) String() string {
	if c == nil {
		return ""
	}
	var parts []string
	if len(c.pairs) > 0 {
		sorted := slices.Sorted(maps.Values(c.pairs))
		n := len(sorted)
		median := (sorted[(n-1)/2] + sorted[n/2]) / 2
		parts = append(parts, formatNumber(median))
		if sorted[0] != sorted[n-1] {
			parts[0] += fmt.Sprintf(" (%s-%s)", formatNumber(sorted[0]), formatNumber(sorted[n-1]))
		}
	}
	for _, pair := range slices.Sorted(maps.Keys(c.texts)) {
		if len(c.pairs)+len(c.texts) > 1 {
			parts = append(parts, fmt.Sprintf("pair %d: %s", pair, c.texts[pair]))
		} else {
			parts = append(parts, c.texts[pair])
		}
	}
	return strings.Join(parts, "; ")
}

// divide is a ÷ b pair by pair, where both have a figure and b's is not 0.
func divide(a, b *cell) *cell {
	out := &cell{pairs: map[int]float64{}}
	if a != nil && b != nil {
		for pair, v := range a.pairs {
			if d, ok := b.pairs[pair]; ok && d != 0 {
				out.pairs[pair] = v / d
			}
		}
	}
	if len(out.pairs) == 0 {
		return nil
	}
	return out
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
