// Child processes: each component and controller runs in a process group of its own,
// with its output in a log, and is stopped, paused or killed as a whole.

package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// groupGoneTimeout bounds the wait for the rest of a killed process group to be reaped.
const groupGoneTimeout = 5 * time.Second

// ProcessOptions says what StartProcess runs and where its output goes.
type ProcessOptions struct {
	// Name names the process in errors and its log: <LogDir>/<Name>.log.
	Name string
	Bin  string
	Args []string
	// Env is added to this program's environment.
	Env []string
	// Dir is the working directory; empty means this program's.
	Dir    string
	LogDir string
	// Stdout, if set, also receives the output, for example to show it on a terminal.
	Stdout io.Writer
}

// Process is a running child program. It runs in its own process group so that a signal
// sent to the program that started it (Ctrl-C in a terminal, a test timeout) does not
// reach it, and so that stopping it also stops anything it started.
type Process struct {
	opts    ProcessOptions
	cmd     *exec.Cmd
	logPath string

	// exited is closed once the process has exited and been reaped; waitErr is set then.
	exited  chan struct{}
	waitErr error

	stopMu  sync.Mutex
	stopped bool
}

// StartProcess starts opts.Bin, appending its stdout and stderr to its log after a line
// with the command. The process is killed when this program dies (Pdeathsig), so that
// nothing runs on unowned when a test binary or a terminal program dies without Stop.
func StartProcess(opts ProcessOptions) (*Process, error) {
	logPath := filepath.Join(opts.LogDir, opts.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", opts.Name, err)
	}
	// With Stdout the output is copied through a pipe, so the log stays open until the
	// process has exited; the waiter closes it.
	var out io.Writer = logFile
	if opts.Stdout != nil {
		out = io.MultiWriter(logFile, opts.Stdout)
	}

	// No context ends the process: it lives until Stop or Kill, which signal its whole
	// group, with a grace period first for Stop.
	cmd := exec.CommandContext(context.Background(), opts.Bin, opts.Args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Dir = opts.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Children that outlive the process keep a copied output's pipe open; Stop kills
	// them, and this bounds the wait for them in any case.
	cmd.WaitDelay = time.Second
	fmt.Fprintf(logFile, "+ %s %s\n", opts.Bin, quoteArgs(opts.Args))
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", opts.Name, err)
	}
	p := &Process{opts: opts, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Name is ProcessOptions.Name.
func (p *Process) Name() string { return p.opts.Name }

// Pid is the process's id, which is also its process group's.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file holding the process's output.
func (p *Process) LogPath() string { return p.logPath }

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited, as exec.Cmd.Wait reports it; valid once Exited is
// closed, nil before.
func (p *Process) Err() error {
	if !p.hasExited() {
		return nil
	}
	return p.waitErr
}

func (p *Process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// ExitError describes an unexpected exit with the end of the log, which usually says why.
func (p *Process) ExitError() error {
	if err := p.Err(); err != nil {
		return fmt.Errorf("%s exited: %w; last lines of %s:\n%s", p.Name(), err, p.logPath, tailFile(p.logPath, 20))
	}
	// Wait reports a clean exit as nil: there is no error to wrap.
	return fmt.Errorf("%s exited: exit status 0; last lines of %s:\n%s", p.Name(), p.logPath, tailFile(p.logPath, 20))
}

// Signal sends sig to the process group, so that whatever the process started gets it too.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.hasExited() {
		return fmt.Errorf("signalling %s: %w", p.Name(), os.ErrProcessDone)
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil {
		return fmt.Errorf("signalling %s: %w", p.Name(), err)
	}
	return nil
}

// Pause stops the process group with SIGSTOP, as a hung process would look from outside.
func (p *Process) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process group.
func (p *Process) Resume() error { return p.Signal(syscall.SIGCONT) }

// Stop sends SIGTERM to the process group, waits up to grace for the process to exit,
// then kills the group. It returns once the process and its group are gone, with Err;
// calling it again returns the same.
func (p *Process) Stop(grace time.Duration) error { return p.stop(&grace) }

// Kill kills the process group at once, without a SIGTERM first, as a crash or an OOM
// kill would, and returns once the process has been reaped, with Err.
func (p *Process) Kill() error { return p.stop(nil) }

// stop ends the process group, with a SIGTERM and a grace period first unless grace is
// nil.
func (p *Process) stop(grace *time.Duration) error {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	if p.stopped {
		return p.Err()
	}
	p.stopped = true
	if grace != nil && !p.hasExited() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		// A paused process would keep the SIGTERM pending until the grace is over.
		_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
		timer := time.NewTimer(*grace)
		select {
		case <-p.exited:
		case <-timer.C:
		}
		timer.Stop()
	}
	// Children the process started may outlive it; the group still names them.
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.exited
	// Orphaned children are reaped by init, a moment after they die.
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, groupGoneTimeout, true, func(context.Context) (bool, error) {
		return errors.Is(syscall.Kill(-p.Pid(), 0), syscall.ESRCH), nil
	})
	return p.Err()
}

// RSSBytes is the resident set size of the process (not of its children).
func (p *Process) RSSBytes() (int64, error) { return p.statusBytes("VmRSS") }

// RSSFileBytes is the part of RSSBytes that maps files: mostly the binary's own pages.
func (p *Process) RSSFileBytes() (int64, error) { return p.statusBytes("RssFile") }

// PeakRSSBytes is the highest resident set size of the process since it started, or
// since ResetPeakRSS (VmHWM).
func (p *Process) PeakRSSBytes() (int64, error) { return p.statusBytes("VmHWM") }

// ResetPeakRSS makes the process's present RSS its peak, so that PeakRSSBytes tells
// the highest from then on (5 written to /proc/<pid>/clear_refs).
func (p *Process) ResetPeakRSS() error {
	if p.hasExited() {
		return p.ExitError()
	}
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.Pid()), []byte("5"), 0)
}

// statusBytes reads a size of the process's /proc/<pid>/status.
func (p *Process) statusBytes(key string) (int64, error) {
	if p.hasExited() {
		return 0, p.ExitError()
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return statusSize(f, key)
}

// statusSize reads the key line of a /proc/<pid>/status file, a size the kernel
// writes in kB.
func statusSize(status io.Reader, key string) (int64, error) {
	kb, err := procField(status, key, " kB")
	return kb << 10, err
}

// procField reads the number of the "key: value" line of a /proc file such as
// status or io, whose value ends in unit.
func procField(r io.Reader, key, unit string) (int64, error) {
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		k, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok || k != key {
			continue
		}
		number, found := strings.CutSuffix(strings.TrimSpace(value), unit)
		n, err := strconv.ParseInt(number, 10, 64)
		if !found || err != nil {
			return 0, fmt.Errorf("reading %s %q", key, value)
		}
		return n, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in the process's file", key)
}

// ReadBytes is how many bytes the process has read, by read(2) and its kin, since it
// started (rchar of /proc/<pid>/io). For a controller nearly all of it is what its
// apiserver connections brought: lists, watch events, answers.
func (p *Process) ReadBytes() (int64, error) {
	if p.hasExited() {
		return 0, p.ExitError()
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", p.Pid()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return procField(f, "rchar", "")
}

// clockTicks is the kernel's USER_HZ, the unit of the times in /proc/<pid>/stat: 100
// on every architecture Linux runs Kubernetes on.
const clockTicks = 100

// CPUTime is the CPU time the process has used, in user and kernel mode, since it
// started (utime and stime of /proc/<pid>/stat), to the kernel's 10 ms tick.
func (p *Process) CPUTime() (time.Duration, error) {
	if p.hasExited() {
		return 0, p.ExitError()
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return 0, err
	}
	return statCPUTime(string(stat))
}

// statCPUTime reads utime + stime from a /proc/<pid>/stat line. The command name,
// field 2, is in parentheses and may hold spaces and parentheses itself: the fields
// are counted from the last ")".
func statCPUTime(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading /proc/<pid>/stat %q", stat)
	}
	// After the ")", field 3 (state) comes first: utime and stime, fields 14 and 15,
	// are the 12th and 13th.
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("reading /proc/<pid>/stat %q: too few fields", stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading /proc/<pid>/stat %q: %w", stat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return tailFile(p.logPath, n) }

// tailFile returns the last n lines of a file, for error messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func quoteArgs(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return strings.Join(quoted, " ")
}

// processGone reports whether neither the process nor its group exist any more.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) && errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH)
}
