package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The bench writes its table into a page itself, so that nobody retypes a figure:
// between these two lines of the page, replacing whatever was there.
const (
	docsBegin = "<!-- bench -->"
	docsEnd   = "<!-- end of bench -->"
)

// docsBlock is what was run, when, on what and from which commit, then the table.
func docsBlock(args, table string, finished time.Time, machine, commit string) string {
	command := "make bench"
	if args != "" {
		command += " BENCH_ARGS='" + args + "'"
	}
	return fmt.Sprintf("\n`%s` on %s, %s, commit %s; each figure is the median of its rounds (--pairs), with their range. Written by the bench; run it again to replace it.\n\n%s\n\n",
		command, finished.UTC().Format("2006-01-02 15:04 MST"), machine, commit, strings.TrimRight(table, "\n"))
}

// replaceBlock puts block into page between the marker lines, in place of what was
// there. The page must hold each marker once, as a line of its own, the beginning
// first.
func replaceBlock(page []byte, block string) ([]byte, error) {
	lines := bytes.SplitAfter(page, []byte("\n"))
	var begins, ends []int
	for i, line := range lines {
		switch string(bytes.TrimRight(line, "\r\n")) {
		case docsBegin:
			begins = append(begins, i)
		case docsEnd:
			ends = append(ends, i)
		}
	}
	if len(begins) != 1 || len(ends) != 1 || ends[0] < begins[0] {
		return nil, fmt.Errorf("the bench writes its table only between the lines %s and %s, once each and in this order; the page has %d and %d",
			docsBegin, docsEnd, len(begins), len(ends))
	}
	return slices.Concat(slices.Concat(lines[:begins[0]+1]...), []byte(block), slices.Concat(lines[ends[0]:]...)), nil
}

// writeDocs writes the run's table into the page at path; commit is the one the
// controller was built from.
func writeDocs(path, args, table string, finished time.Time, commit string) error {
	page, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceBlock(page, docsBlock(args, table, finished, machine(), commit))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	progressf("wrote the table into %s", path)
	return nil
}

// machine says what the bench ran on: the cores, the memory and the CPU model.
func machine() string {
	model, memory := "", ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if _, rest, ok := strings.Cut(string(data), "\nmodel name"); ok {
			line, _, _ := strings.Cut(rest, "\n")
			model = " (" + strings.TrimSpace(strings.TrimLeft(line, " \t:")) + ")"
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kib int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kib); err == nil {
			memory = fmt.Sprintf(", %.0f GiB", float64(kib)/(1<<20))
		}
	}
	return fmt.Sprintf("%s/%s, %d cores%s%s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, memory)
}

// commit is the repository's commit, with "-dirty" for uncommitted changes.
func commit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if exec.CommandContext(ctx, "git", "-C", root, "diff", "--quiet", "HEAD", "--").Run() != nil {
		c += "-dirty"
	}
	return c
}
