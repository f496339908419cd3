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

	"k8s.io/utils/ptr"
)

// results is everything measured, as written to results.json.
type results struct {
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Flags    map[string]string `json:"flags"`
	Runs     []runResult       `json:"runs"`
}

// runResult is what one session measured: one column of the table, at one size.
type runResult struct {
	Column    string           `json:"column"`
	Limit     bool             `json:"limit"`
	Driver    driver           `json:"driver"`
	Foos      int              `json:"foos"`
	ColdStart *coldStartResult `json:"coldStart,omitempty"`
	Steady    *steadyResult    `json:"steady,omitempty"`
	Memory    *memoryResult    `json:"memory,omitempty"`
	RSS       *rssResult       `json:"rss,omitempty"`
	Reactions []reactionResult `json:"reactions,omitempty"`
	Sharded   *shardedResult   `json:"sharded,omitempty"`
	// APIServerRestart is how the shared apiserver was made fresh for this run.
	APIServerRestart *apiserverRestart `json:"apiserverRestart,omitempty"`
	// Skipped says why the cases after the cold start did not run.
	Skipped string `json:"skipped,omitempty"`
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
	sectionReaction
)

// rowKey names a row and places it: by section, then size or rate, then its place in
// the case's figures, then name.
type rowKey struct {
	section, n, sub int
	name            string
}

// row is the key of a row, its name formatted from format and args.
func row(section, n, sub int, format string, args ...any) rowKey {
	return rowKey{section, n, sub, fmt.Sprintf(format, args...)}
}

// table is the report: one row per figure, one column per controller and per limit.
type table struct {
	columns []string // in the order of the runs
	limits  map[string]bool
	cells   map[rowKey]map[string]cell
	// ratios are rows whose cells are each controller's figure in another row
	// divided by a limit's figure there.
	ratios map[rowKey]ratioOf
}

type ratioOf struct {
	row   rowKey
	limit string
}

func (t *table) set(k rowKey, column string, c cell) {
	if t.cells[k] == nil {
		t.cells[k] = map[string]cell{}
	}
	t.cells[k][column] = c
}

// buildTable lays out every figure of res.
func buildTable(res *results) *table {
	t := &table{limits: map[string]bool{}, cells: map[rowKey]map[string]cell{}, ratios: map[rowKey]ratioOf{}}
	// Every cold start of a size shows every request key any of them made.
	keys := map[int][]string{}
	for _, r := range res.Runs {
		if _, ratio := r.Driver.(ratioSide); ratio {
			continue
		}
		if _, sharded := r.Driver.(replicaSet); sharded {
			continue
		}
		if cs := r.ColdStart; cs != nil {
			keys[cs.Foos] = slices.AppendSeq(keys[cs.Foos], maps.Keys(cs.PerFoo))
		}
	}
	for _, r := range res.Runs {
		if _, sharded := r.Driver.(replicaSet); sharded {
			continue // shardedMarkdown's
		}
		if _, tenure := r.Driver.(tenureVariant); tenure {
			continue // tenureMarkdown's
		}
		if _, ratio := r.Driver.(ratioSide); ratio {
			continue // ratioMarkdown's
		}
		if !slices.Contains(t.columns, r.Column) {
			t.columns = append(t.columns, r.Column)
			t.limits[r.Column] = r.Limit
		}
		if r.ColdStart != nil {
			r.ColdStart.addRows(t, r.Column, r.Limit, keys[r.ColdStart.Foos])
		}
		if r.Skipped != "" {
			t.set(row(sectionSteady, 0, -1, "steady state, memory and reaction, %d Foos", r.Foos), r.Column, text("skipped: "+r.Skipped))
		}
		if r.Steady != nil {
			t.set(row(sectionSteady, 0, 0, "steady state, %d Foos: writes per minute", r.Steady.Foos), r.Column, num(r.Steady.PerMinute))
		}
		if r.Memory != nil {
			r.Memory.addRows(t, r.Column)
		}
		for _, rr := range r.Reactions {
			rr.addRows(t, r.Column, r.Limit)
		}
	}
	return t
}

func (cs *coldStartResult) addRows(t *table, column string, limit bool, keys []string) {
	perFoo := func(v float64) cell { return figureOr(cs.Converged, v, "n/a (timed out)") }
	seconds := row(sectionColdStart, cs.Foos, 0, "cold start, %d Foos (s)", cs.Foos)
	t.set(seconds, column, figureOr(cs.Converged, cs.Seconds, cs.timedOutText()))
	if limit && cs.Converged && cs.Seconds > 0 {
		t.ratios[row(sectionColdStart, cs.Foos, 1, "cold start, %d Foos ÷ %s (×)", cs.Foos, column)] = ratioOf{seconds, column}
	}
	t.set(row(sectionColdStart, cs.Foos, 2, "requests per Foo, %d Foos: total", cs.Foos), column, perFoo(cs.PerFooTotal))
	for _, k := range keys {
		t.set(row(sectionColdStart, cs.Foos, 3, "requests per Foo, %d Foos: %s", cs.Foos, k), column, perFoo(cs.PerFoo[k]))
	}
	t.set(row(sectionColdStart, cs.Foos, 4, "events written per Foo, %d Foos", cs.Foos), column, perFoo(cs.EventWritesPerFoo))
}

func (m *memoryResult) addRows(t *table, column string) {
	heap := func(v *float64) cell { return figureOr(v != nil, mib(ptr.Deref(v, 0)), "n/a") }
	after := num(mib(m.RSSAfter))
	if m.TimedOut != "" {
		after.text = fmt.Sprintf("%s (%s)", formatNumber(mib(m.RSSAfter)), m.TimedOut)
	}
	t.set(row(sectionMemory, 0, 0, "RSS, %d Foos (MiB)", m.Foos), column, num(mib(m.RSSBefore)))
	t.set(row(sectionMemory, 0, 1, "RSS, %d Foos + %d unrelated Deployments (MiB)", m.Foos, m.Unrelated), column, after)
	t.set(row(sectionMemory, 0, 2, "RSS per 10000 unrelated Deployments (MiB)"), column, num(mib(m.RSSPer10k)))
	t.set(row(sectionMemory, 0, 3, "heap in use, %d Foos (MiB)", m.Foos), column, heap(m.HeapBefore))
	t.set(row(sectionMemory, 0, 4, "heap in use, %d Foos + %d unrelated Deployments (MiB)", m.Foos, m.Unrelated), column, heap(m.HeapAfter))
	t.set(row(sectionMemory, 0, 5, "heap in use per 10000 unrelated Deployments (MiB)"), column, heap(m.HeapPer10k))
}

func (r *reactionResult) addRows(t *table, column string, limit bool) {
	latency := func(v float64) cell { return figureOr(r.Delivered > 0, v, "none delivered") }
	delivered := num(float64(r.Delivered))
	delivered.text = fmt.Sprintf("%d of %d", r.Delivered, r.Sent-r.Failed)
	t.set(row(sectionReaction, r.Rate, 0, "reaction, %d changes/s: sent per second", r.Rate), column, num(r.AchievedRate))
	t.set(row(sectionReaction, r.Rate, 1, "reaction, %d changes/s: delivered within %.0f s", r.Rate, r.DeadlineSeconds), column, delivered)
	t.set(row(sectionReaction, r.Rate, 2, "reaction, %d changes/s: delivered with their own value (not superseded)", r.Rate), column, num(float64(r.Exact)))
	t.set(row(sectionReaction, r.Rate, 3, "reaction, %d changes/s: p50 (ms)", r.Rate), column, latency(r.P50Ms))
	p99 := row(sectionReaction, r.Rate, 4, "reaction, %d changes/s: p99 (ms)", r.Rate)
	t.set(p99, column, latency(r.P99Ms))
	t.set(row(sectionReaction, r.Rate, 5, "reaction, %d changes/s: max (ms)", r.Rate), column, latency(r.MaxMs))
	if limit && r.Delivered > 0 && r.P99Ms > 0 {
		t.ratios[row(sectionReaction, r.Rate, 6, "reaction, %d changes/s: p99 ÷ %s (×)", r.Rate, column)] = ratioOf{p99, column}
	}
	t.set(row(sectionReaction, r.Rate, 7, "reaction, %d changes/s: p50 from the patch's response (ms)", r.Rate), column, latency(r.AcceptedP50Ms))
	t.set(row(sectionReaction, r.Rate, 8, "reaction, %d changes/s: p99 from the patch's response (ms)", r.Rate), column, latency(r.AcceptedP99Ms))
}

// markdown renders the table: the figure, one column per controller, with two
// controllers the second's ratio to the first, then one column per limit.
func (t *table) markdown() string {
	var controllers, limits []string
	for _, c := range t.columns {
		if t.limits[c] {
			limits = append(limits, c)
		} else {
			controllers = append(controllers, c)
		}
	}
	header := append([]string{"case"}, controllers...)
	compare := len(controllers) == 2
	if compare {
		header = append(header, controllers[1]+" ÷ "+controllers[0])
	}
	header = append(header, limits...)

	var b strings.Builder
	writeLine := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	writeLine(header)
	sep := slices.Repeat([]string{"--:"}, len(header))
	sep[0] = "---"
	writeLine(sep)

	rows := slices.Collect(maps.Keys(t.cells))
	rows = slices.AppendSeq(rows, maps.Keys(t.ratios))
	slices.SortFunc(rows, func(a, b rowKey) int {
		return cmp.Or(cmp.Compare(a.section, b.section), cmp.Compare(a.n, b.n), cmp.Compare(a.sub, b.sub), strings.Compare(a.name, b.name))
	})
	for _, k := range rows {
		cells := t.cells[k]
		if r, ok := t.ratios[k]; ok {
			cells = map[string]cell{}
			for _, c := range controllers {
				cells[c] = divide(t.cells[r.row][c], t.cells[r.row][r.limit])
			}
		}
		line := []string{k.name}
		for _, c := range controllers {
			line = append(line, escapeCell(cells[c].String()))
		}
		if compare {
			line = append(line, ratio(cells[controllers[1]], cells[controllers[0]]))
		}
		for _, c := range limits {
			line = append(line, escapeCell(cells[c].String()))
		}
		writeLine(line)
	}
	return b.String()
}

// cell is one figure of the table: a number, a text in place of one (such as
// "timed out: ..."), or nothing.
type cell struct {
	value float64
	ok    bool   // value holds a figure
	text  string // shown instead of value when set
}

func num(v float64) cell { return cell{value: v, ok: true} }
func text(s string) cell { return cell{text: s} }

// figureOr is v when ok holds, and otherwise says why there is no figure.
func figureOr(ok bool, v float64, otherwise string) cell {
	if ok {
		return num(v)
	}
	return text(otherwise)
}

func (c cell) String() string {
	if c.text == "" && c.ok {
		return formatNumber(c.value)
	}
	return c.text
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

// divide is a ÷ b as a figure, or nothing when either is missing or b is 0.
func divide(a, b cell) cell {
	if !a.ok || !b.ok || b.value == 0 {
		return cell{}
	}
	return num(a.value / b.value)
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
