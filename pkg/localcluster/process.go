package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// process is one running component. It runs in its own process group so that a signal
// sent to the program that started it (Ctrl-C in a terminal, a test timeout) does not
// reach it, and so that stopping it also stops anything it started.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// exited is closed once the process has exited and been reaped; waitErr is set then.
	exited  chan struct{}
	waitErr error
}

// startProcess runs bin with args, appending stdout and stderr to <logDir>/<name>.log.
func startProcess(name, bin string, args, env []string, logDir string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor

	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the program that started the cluster dies without calling Stop, the
		// components die with it instead of running on unowned.
		Pdeathsig: syscall.SIGKILL,
	}
	fmt.Fprintf(logFile, "+ %s %s\n", bin, quoteArgs(args))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitError describes an unexpected exit, with the end of the log, which usually says why.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.name, p.waitErr, p.logPath, tailFile(p.logPath, 20))
}

// stop sends SIGTERM to the process group, waits up to grace for the process to exit,
// then sends SIGKILL. It returns once the process has been reaped and the group is gone.
func (p *process) stop(grace time.Duration) {
	if !p.hasExited() {
		_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
		}
	}
	// Children the component started may outlive it; the group still names them.
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.exited
}

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
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(a))
	}
	return b.String()
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago. All
// listeners stay open until every port is chosen so that no port is handed out twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// processGone reports whether neither the process nor its group exist any more.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) && errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH)
}
