package localcluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestStopLeavesNoProcessOrGroup(t *testing.T) {
	var terminal bytes.Buffer
	// The child starts a grandchild in its group and waits for it, as a wrapper
	// script would.
	p, err := StartProcess(ProcessOptions{
		Name:   "sleeper",
		Bin:    "sh",
		Args:   []string{"-c", "echo started; sleep 100 & sleep 100"},
		LogDir: t.TempDir(),
		Stdout: &terminal,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "started\n")

	began := time.Now()
	err = p.Stop(5 * time.Second)
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("Stop = %v, want the process ended by SIGTERM", err)
	}
	if d := time.Since(began); d > 4*time.Second {
		t.Errorf("Stop took %v for a process that exits on SIGTERM", d)
	}
	if !processGone(p.Pid()) {
		t.Errorf("pid %d or its process group is still there after Stop", p.Pid())
	}
	if again := p.Stop(time.Second); !errors.Is(again, err) {
		t.Errorf("second Stop = %v, want the first result %v", again, err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("Exited is not closed after Stop")
	}

	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(log), `+ sh "-c"`) || !strings.Contains(string(log), "started\n") {
		t.Errorf("log = %q, want the command line, then the output", log)
	}
	if terminal.String() != "started\n" {
		t.Errorf("output copied to Stdout = %q, want %q", terminal.String(), "started\n")
	}
}

func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	p, err := StartProcess(ProcessOptions{
		Name:   "stubborn",
		Bin:    "sh",
		Args:   []string{"-c", "trap '' TERM; echo trapped; sleep 100"},
		LogDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "trapped\n")
	began := time.Now()
	_ = p.Stop(200 * time.Millisecond)
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("Stop returned after %v, before the grace period was over", d)
	}
	if !processGone(p.Pid()) {
		t.Errorf("pid %d or its process group is still there after Stop", p.Pid())
	}
}

func TestPauseAndResume(t *testing.T) {
	p, err := StartProcess(ProcessOptions{Name: "sleeper", Bin: "sleep", Args: []string{"100"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "stopped", func(state byte) bool { return state == 'T' })
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "running again", func(state byte) bool { return state != 'T' })

	// A paused process still gets its SIGTERM: Stop continues it.
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "stopped", func(state byte) bool { return state == 'T' })
	began := time.Now()
	_ = p.Stop(10 * time.Second)
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("stopping a paused process took %v: it waited for the grace period", d)
	}
	if err := p.Resume(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Resume after Stop = %v, want os.ErrProcessDone", err)
	}
}

func TestExitErrorShowsTheLog(t *testing.T) {
	p, err := StartProcess(ProcessOptions{Name: "failing", Bin: "sh", Args: []string{"-c", "echo cannot bind; exit 3"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	msg := p.ExitError().Error()
	if !strings.Contains(msg, "failing exited: exit status 3") || !strings.Contains(msg, "cannot bind") {
		t.Errorf("ExitError = %q, want the exit status and the end of the log", msg)
	}
	if _, err := p.RSSBytes(); err == nil {
		t.Error("RSSBytes of an exited process succeeded")
	}
}

func TestRSSBytes(t *testing.T) {
	p, err := StartProcess(ProcessOptions{Name: "sleeper", Bin: "sleep", Args: []string{"100"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	rss, err := p.RSSBytes()
	if err != nil {
		t.Fatal(err)
	}
	if rss < 4096 || rss > 1<<30 {
		t.Errorf("RSSBytes = %d, want a few hundred kB for sleep", rss)
	}
	// Read apart from the RSS, and maybe before the process mapped its binary: only
	// its range is known.
	if file, err := p.RSSFileBytes(); err != nil || file < 0 || file > 1<<30 {
		t.Errorf("RSSFileBytes = %d, %v; want at most a few hundred kB for sleep", file, err)
	}

	if err := p.ResetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	if peak, err := p.PeakRSSBytes(); err != nil || peak < 4096 || peak > 1<<30 {
		t.Errorf("PeakRSSBytes after ResetPeakRSS = %d, %v; want a few hundred kB for sleep", peak, err)
	}

	for _, bad := range []string{"Name:\tsleep\n", "VmRSS:\t12 MB\n"} {
		if _, err := statusSize(strings.NewReader(bad), "VmRSS"); err == nil {
			t.Errorf("statusSize(%q) succeeded", bad)
		}
	}
}

func TestCPUTime(t *testing.T) {
	// A shell loop that only counts uses the CPU it gets.
	p, err := StartProcess(ProcessOptions{Name: "spinner", Bin: "sh", Args: []string{"-c", "while :; do :; done"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	var used time.Duration
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		used, err = p.CPUTime()
		return err == nil && used >= 200*time.Millisecond, err
	})
	if err != nil {
		t.Fatalf("CPUTime = %v, %v; want it to pass 200 ms while the process spins", used, err)
	}

	// The command name may hold spaces and parentheses.
	line := "4242 (a) b (c)) R 1 4242 4242 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1 0 12345 1000 100\n"
	if got, err := statCPUTime(line); err != nil || got != 2800*time.Millisecond {
		t.Errorf("statCPUTime(%q) = %v, %v; want 2.8s", line, got, err)
	}
	for _, bad := range []string{"4242 sleep R 1", "4242 (sleep) R 1 2 3", "4242 (sleep) R 1 4242 4242 0 -1 4194560 100 0 0 0 x 30 0"} {
		if _, err := statCPUTime(bad); err == nil {
			t.Errorf("statCPUTime(%q) succeeded", bad)
		}
	}
}

func TestReadBytes(t *testing.T) {
	// tail reads the whole file, then waits for more.
	const size = 1 << 20
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, bytes.Repeat([]byte("x"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := StartProcess(ProcessOptions{Name: "reader", Bin: "tail", Args: []string{"-c", "+1", "-f", file}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	var read int64
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		read, err = p.ReadBytes()
		return err == nil && read >= size, err
	})
	if err != nil {
		t.Fatalf("ReadBytes = %d, %v; want at least the %d bytes of the file", read, err, size)
	}
	if read > 2*size {
		t.Errorf("ReadBytes = %d, want about the %d bytes of the file", read, size)
	}
	if _, err := procField(strings.NewReader("rchar: lots\n"), "rchar", ""); err == nil {
		t.Error("procField of a non-number succeeded")
	}
	if n, err := procField(strings.NewReader("wchar: 3\nrchar: 1234\n"), "rchar", ""); err != nil || n != 1234 {
		t.Errorf("procField = %d, %v; want 1234", n, err)
	}
}

// waitLog waits until the process's log contains s.
func waitLog(t *testing.T, p *Process, s string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		log, err := os.ReadFile(p.LogPath())
		return strings.Contains(string(log), s), err
	})
	if err != nil {
		t.Fatalf("waiting for %q in the log of %s: %v", s, p.Name(), err)
	}
}
