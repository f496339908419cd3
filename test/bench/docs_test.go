package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReplaceBlock checks that a run's block replaces whatever is between the markers,
// whatever the command line, and leaves the rest of the page as it was.
func TestReplaceBlock(t *testing.T) {
	at := time.Date(2026, 11, 24, 4, 30, 0, 0, time.UTC)
	page := []byte("# Performance\n\nText.\n\n<!-- bench -->\nan old table\n<!-- end of bench -->\n\nAfter.\n")
	page, err := replaceBlock(page, docsBlock("--foos=100", "| a |\n", at, "linux/amd64, 2 cores", "abc", "performance.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Performance\n\nText.\n\n<!-- bench -->\n\n" +
		"`make bench BENCH_ARGS='--foos=100'` on 2026-11-24 04:30 UTC, linux/amd64, 2 cores, commit abc; each figure is the median of its rounds (--pairs), with their range; every figure of the run is in performance.json beside this page. Written by the bench; run it again to replace it.\n\n" +
		"| a |\n\n<!-- end of bench -->\n\nAfter.\n"
	if string(page) != want {
		t.Errorf("page =\n%s\nwant\n%s", page, want)
	}

	// Another command line replaces the block too: there is one table.
	page, err = replaceBlock(page, docsBlock("", "| b |", at, "m", "def", "performance.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(page)
	if strings.Contains(got, "| a |") || strings.Count(got, "<!-- bench -->") != 1 || !strings.Contains(got, "\n`make bench` on 2026-11-24 04:30 UTC, m, commit def;") {
		t.Errorf("the earlier run's block was not replaced:\n%s", got)
	}
	order := []int{strings.Index(got, "Text."), strings.Index(got, "| b |"), strings.Index(got, "After.")}
	if slices.Contains(order, -1) || !slices.IsSorted(order) {
		t.Errorf("block out of place:\n%s", got)
	}
}

// A page without its markers, once each and in order, is an error: nothing is added.
func TestReplaceBlockNeedsTheMarkers(t *testing.T) {
	for name, page := range map[string]string{
		"no markers":             "# Performance\n",
		"no end":                 "<!-- bench -->\ntable\n",
		"no beginning":           "table\n<!-- end of bench -->\n",
		"not a line of its own":  "see <!-- bench --> here\n<!-- end of bench -->\n",
		"two beginnings":         "<!-- bench -->\n<!-- bench -->\n<!-- end of bench -->\n",
		"the end first":          "<!-- end of bench -->\n<!-- bench -->\n",
		"an old block's markers": "<!-- bench: --foos=100 -->\n<!-- end of bench: --foos=100 -->\n",
	} {
		if out, err := replaceBlock([]byte(page), "x"); err == nil {
			t.Errorf("%s: replaceBlock gave %q, want an error", name, out)
		}
	}
	// The end may end the page, and lines may end in CRLF.
	out, err := replaceBlock([]byte("<!-- bench -->\r\nold\r\n<!-- end of bench -->"), "new\n")
	if err != nil || string(out) != "<!-- bench -->\r\nnew\n<!-- end of bench -->" {
		t.Errorf("replaceBlock = %q, %v", out, err)
	}
}

// TestDocsArgs checks that the command line written into the page leaves out --docs,
// in either form.
func TestDocsArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--cases=memory", "--docs=x.md"},
		{"--docs", "x.md", "--cases=memory"},
		{"-docs=x.md", "--cases=memory"},
	} {
		cfg, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.args, []string{"--cases=memory"}) || cfg.docs != "x.md" {
			t.Errorf("parseFlags(%q): args %q, docs %q", args, cfg.args, cfg.docs)
		}
	}
}

func TestResultsBeside(t *testing.T) {
	if got := resultsBeside("../docs/performance.md"); got != "../docs/performance.json" {
		t.Errorf("resultsBeside = %q, want ../docs/performance.json", got)
	}
}
