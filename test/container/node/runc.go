// Containers run by hand: runc runs one container of a Pod, configured by ContainerSpec,
// in the foreground, as a CRI runtime's shim would.

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	// runcRoot keeps runc's state of the harness's containers apart from any other user
	// of runc on the machine.
	runcRoot = "/run/localcluster-runc"
	// runcExitTimeout bounds the wait for runc to exit after its container was killed.
	runcExitTimeout = 5 * time.Second
)

// Container is a container that runc runs in the foreground: the runc process lives as
// long as the container and exits with its status.
type Container struct {
	id   string
	runc string
	proc *localcluster.Process
}

// StartContainer writes the bundle's config.json (ContainerSpec) and starts the
// container under runc, its output in <LogDir>/<ID>.log. It needs root and runc.
func StartContainer(ctx context.Context, opts ContainerOptions) (*Container, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, errors.New("running a container needs runc: apt-get install runc")
	}
	spec, err := ContainerSpec(opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	config, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, "config.json"), config, 0o644); err != nil {
		return nil, err
	}
	if opts.Container.TerminationMessagePath != "" {
		// Writable by the container's user, whoever that is, as the kubelet makes it.
		log := filepath.Join(opts.Dir, "termination-log")
		if err := os.WriteFile(log, nil, 0o666); err != nil {
			return nil, err
		}
		if err := os.Chmod(log, 0o666); err != nil {
			return nil, err
		}
	}
	c := &Container{id: opts.ID, runc: runc}
	// A container of this name that a killed test left running goes first.
	_ = c.runcCommand(ctx, "delete", "--force", opts.ID)
	c.proc, err = localcluster.StartProcess(localcluster.ProcessOptions{
		Name:   opts.ID,
		Bin:    runc,
		Args:   []string{"--root", runcRoot, "run", "--bundle", opts.Dir, opts.ID},
		LogDir: opts.LogDir,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ID is the container's name for runc.
func (c *Container) ID() string { return c.id }

// LogPath is the file holding the container's output.
func (c *Container) LogPath() string { return c.proc.LogPath() }

// Exited is closed once the container has exited.
func (c *Container) Exited() <-chan struct{} { return c.proc.Exited() }

// Err is how the container exited (runc passes its status on); nil before it has.
func (c *Container) Err() error { return c.proc.Err() }

// Signal sends sig to the container's first process only, as a runtime does when the
// kubelet stops a container. (Signalling runc's process group would reach it twice: once
// directly, once forwarded by runc.)
func (c *Container) Signal(ctx context.Context, sig syscall.Signal) error {
	return c.runcCommand(ctx, "kill", c.id, fmt.Sprint(int(sig)))
}

// Stop sends SIGTERM, waits up to grace for the container to exit, then kills it, as
// the kubelet does with terminationGracePeriodSeconds. It returns once the container is
// gone, with Err.
func (c *Container) Stop(grace time.Duration) error {
	ctx := context.Background()
	if err := c.Signal(ctx, syscall.SIGTERM); err == nil {
		timer := time.NewTimer(grace)
		select {
		case <-c.Exited():
		case <-timer.C:
		}
		timer.Stop()
	}
	select {
	case <-c.Exited():
	default:
		_ = c.Signal(ctx, syscall.SIGKILL)
	}
	// runc exits with the container; Kill only reaps it, or ends a runc that hangs.
	timer := time.NewTimer(runcExitTimeout)
	select {
	case <-c.Exited():
	case <-timer.C:
	}
	timer.Stop()
	err := c.proc.Kill()
	_ = c.runcCommand(ctx, "delete", "--force", c.id)
	return err
}

// Pid is the container's first process, as this machine numbers it.
func (c *Container) Pid(ctx context.Context) (int, error) {
	out, err := exec.CommandContext(ctx, c.runc, "--root", runcRoot, "state", c.id).Output()
	if err != nil {
		return 0, fmt.Errorf("runc state %s: %w", c.id, err)
	}
	var state struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &state); err != nil {
		return 0, fmt.Errorf("runc state %s: %w", c.id, err)
	}
	if state.Status != "running" {
		return 0, fmt.Errorf("container %s is %s", c.id, state.Status)
	}
	return state.Pid, nil
}

func (c *Container) runcCommand(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, c.runc, append([]string{"--root", runcRoot}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
