package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// controllerStopGrace is how long a controller may take to exit after SIGTERM; ours
// gives its in-flight syncs up to 30 s.
const controllerStopGrace = 40 * time.Second

// controllerProcess is one run of a controller binary.
type controllerProcess struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// started is taken just before the process starts: the origin of a cold start.
	started time.Time
	exited  chan struct{}
	waitErr error

	mu          sync.Mutex
	metricsAddr string // from the log, if the controller serves metrics
}

// startController runs the controller with its output in logPath. It runs in its own
// process group, so that Ctrl-C in the terminal reaches only the bench, which stops it
// in order, and it is killed if the bench dies without stopping it.
func startController(c controllerSpec, kubeconfig, logPath string) (*controllerProcess, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &controllerProcess{name: c.name, logPath: logPath, exited: make(chan struct{})}
	out := io.MultiWriter(logFile, &lineWriter{onLine: p.scanLine})
	args := c.command(kubeconfig)
	fmt.Fprintf(logFile, "+ %s %s\n", c.binary, strings.Join(args, " "))

	p.cmd = exec.Command(c.binary, args...)
	// Foreign controllers that ignore flags may still read $KUBECONFIG.
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", c.binary, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// servingMetrics matches our controller's log line `"Serving metrics" address="..."`.
var servingMetrics = regexp.MustCompile(`"Serving metrics" address="([^"]+)"`)

// metricsAddress returns the address in a "Serving metrics" log line.
func metricsAddress(line string) (string, bool) {
	m := servingMetrics.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

func (p *controllerProcess) scanLine(line string) {
	if addr, ok := metricsAddress(line); ok {
		p.mu.Lock()
		p.metricsAddr = addr
		p.mu.Unlock()
	}
}

// metricsURL is the controller's /metrics, or empty when it announced none.
func (p *controllerProcess) metricsURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.metricsAddr == "" {
		return ""
	}
	return "http://" + p.metricsAddr + "/metrics"
}

// exitedErr returns an error if the process has exited.
func (p *controllerProcess) exitedErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v; see %s", p.name, p.waitErr, p.logPath)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after the grace period, and
// returns once the process has been reaped.
func (p *controllerProcess) stop() {
	pid := p.cmd.Process.Pid
	select {
	case <-p.exited:
	default:
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(controllerStopGrace):
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-p.exited
}

// rssBytes is the process's resident set size.
func (p *controllerProcess) rssBytes() (int64, error) {
	if err := p.exitedErr(); err != nil {
		return 0, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(status)
}

// parseVmRSS reads VmRSS from the text of /proc/PID/status.
func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected VmRSS line %q: %w", sc.Text(), err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// lineWriter calls onLine with every complete line written to it.
type lineWriter struct {
	buf    []byte
	onLine func(string)
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.onLine(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	// A line this long is no log line we look for; do not let it grow without end.
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[:0]
	}
	return len(b), nil
}
