package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReplaceBlock checks that a run's block replaces the block of an earlier run of
// the same command line, and that another command line's block goes at the end.
func TestReplaceBlock(t *testing.T) {
	at := time.Date(2026, 11, 24, 4, 30, 0, 0, time.UTC)
	first := docsBlock("--cases=tenure", "| a |\n", at, "linux/amd64, 2 cores", "abc")
	page := replaceBlock([]byte("# Performance\n\nText.\n"), "--cases=tenure", first)
	if !strings.HasPrefix(string(page), "# Performance\n\nText.\n\n<!-- bench: --cases=tenure -->\n") {
		t.Errorf("the first block is not at the end:\n%s", page)
	}
	for _, want := range []string{"`make bench BENCH_ARGS='--cases=tenure'` on 2026-11-24 04:30 UTC, linux/amd64, 2 cores, the controller from commit abc.", "| a |\n\n<!-- end of bench: --cases=tenure -->\n"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the block lacks %q:\n%s", want, page)
		}
	}
	page = append(page, "After.\n"...)
	page = replaceBlock(page, "--cases=tenure", docsBlock("--cases=tenure", "| b |", at, "m", "def"))
	page = replaceBlock(page, "--foos=100", docsBlock("--foos=100", "| c |", at, "m", "def"))
	got := string(page)
	if strings.Contains(got, "| a |") || strings.Count(got, "<!-- bench: --cases=tenure -->") != 1 {
		t.Errorf("the earlier run's block was not replaced:\n%s", got)
	}
	order := []int{strings.Index(got, "| b |"), strings.Index(got, "After."), strings.Index(got, "| c |")}
	if slices.Contains(order, -1) || !slices.IsSorted(order) {
		t.Errorf("blocks out of place (replaced one where it was, new one at the end):\n%s", got)
	}
}

// TestDocsArgs checks that the command line naming a block leaves out --docs, in
// either form.
func TestDocsArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--cases=tenure", "--docs=x.md"},
		{"--docs", "x.md", "--cases=tenure"},
		{"-docs=x.md", "--cases=tenure"},
	} {
		cfg, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.args, []string{"--cases=tenure"}) || cfg.docs != "x.md" {
			t.Errorf("parseFlags(%q): args %q, docs %q", args, cfg.args, cfg.docs)
		}
	}
}
