package main

import (
	"bufio"
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

// The bench writes what it printed into a page of the docs itself, so that nobody
// retypes a figure: one block per command line, between markers that name it, replaced
// by the next run of the same command line and added at the end of the page otherwise.
const (
	docsBegin = "<!-- bench: %s -->"
	docsEnd   = "<!-- end of bench: %s -->"
)

// docsBlock is the block for a run: what was run, when, on what and from which commit,
// then the tables as printed.
func docsBlock(args, tables string, finished time.Time, machine, commit string) string {
	var b strings.Builder
	fmt.Fprintf(&b, docsBegin+"\n\n", args)
	fmt.Fprintf(&b, "`make bench BENCH_ARGS='%s'` on %s, %s, the controller from commit %s. Written by the bench; run it again to replace it.\n\n",
		args, finished.UTC().Format("2006-01-02 15:04 MST"), machine, commit)
	b.WriteString(strings.TrimRight(tables, "\n"))
	fmt.Fprintf(&b, "\n\n"+docsEnd+"\n", args)
	return b.String()
}

// replaceBlock puts block into page in place of the block of the same args, or at the
// end.
func replaceBlock(page []byte, args, block string) []byte {
	begin, end := fmt.Sprintf(docsBegin, args), fmt.Sprintf(docsEnd, args)
	i := bytes.Index(page, []byte(begin))
	j := bytes.Index(page, []byte(end))
	if i < 0 || j < i {
		out := bytes.TrimRight(page, "\n")
		return append(append(out, "\n\n"...), block...)
	}
	j += len(end)
	if j < len(page) && page[j] == '\n' {
		j++
	}
	return slices.Concat(page[:i], []byte(block), page[j:])
}

// writeDocs writes the run's tables into the page at path; commit is the repository's
// when the run began, the one its controller was built from.
func writeDocs(path, args, tables string, finished time.Time, commit string) error {
	page, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	block := docsBlock(args, tables, finished, machine(), commit)
	if err := os.WriteFile(path, replaceBlock(page, args, block), 0o644); err != nil {
		return err
	}
	progressf("wrote the tables into %s", path)
	return nil
}

// machine says what the bench ran on: the CPU model, cores and memory.
func machine() string {
	model, memory := "", ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kib int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kib); err == nil {
			memory = fmt.Sprintf(", %.0f GiB", float64(kib)/(1<<20))
		}
	}
	cores := fmt.Sprintf("%d cores", runtime.NumCPU())
	if model != "" {
		cores += " (" + model + ")"
	}
	return runtime.GOOS + "/" + runtime.GOARCH + ", " + cores + memory
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
