package main

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// driver makes the writes a session's cases wait for: a controller, or the limit.
type driver interface {
	column() string
	// rule decides when a Foo's status counts as done.
	rule() statusRule
	// start sets the cold start's writes going on s.
	start(ctx context.Context, s *session) error
}

const (
	// kubeconfigPlaceholder in --controller-args stands for the admin kubeconfig of the
	// cluster the controller runs against.
	kubeconfigPlaceholder = "{kubeconfig}"
	// ourName is the column of our controller.
	ourName = "ours"
)

// controller is a controller binary and how to run it.
type controller struct {
	Name   string     `json:"name"`
	Binary string     `json:"binary"`
	Args   []string   `json:"args"` // may hold kubeconfigPlaceholder
	Rule   statusRule `json:"statusRule"`
	// Ours serves metrics and probes, on ports the bench passes it.
	Ours bool `json:"-"`
	// Env is added to ours's environment (NAME=value).
	Env []string `json:"env,omitempty"`
}

func (c controller) column() string   { return c.Name }
func (c controller) rule() statusRule { return c.Rule }

// command returns the arguments for a cluster whose admin kubeconfig is kubeconfig.
func (c controller) command(kubeconfig string) []string {
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = strings.ReplaceAll(a, kubeconfigPlaceholder, kubeconfig)
	}
	return out
}

// start starts the controller process. Its exit ends the session's cases with an
// error; the session stops it when they are done.
func (c controller) start(ctx context.Context, s *session) error {
	kubeconfig := s.cluster.KubeconfigPath()
	name := s.name + "-controller"
	if c.Ours {
		ctrl, err := localcluster.StartController(ctx, localcluster.ControllerOptions{Bin: c.Binary, Kubeconfig: kubeconfig, LogDir: s.cfg.outDir, Name: name, Args: c.command(kubeconfig), Env: c.Env})
		if err != nil {
			return err
		}
		s.ctrl, s.proc = ctrl, ctrl.Process
	} else {
		// A controller that ignores flags may still read $KUBECONFIG.
		proc, err := localcluster.StartProcess(localcluster.ProcessOptions{Name: name, Bin: c.Binary, Args: c.command(kubeconfig), Env: []string{"KUBECONFIG=" + kubeconfig}, LogDir: s.cfg.outDir})
		if err != nil {
			return err
		}
		s.proc = proc
	}
	go func() {
		<-s.proc.Exited()
		s.fail(s.proc.ExitError())
	}()
	return nil
}

// ourController builds our controller from the repository root (unless --our-binary
// names a build) and returns how to run it: with a resync period short enough that the
// steady-state window covers a resync, and --controller-args unless they are another
// controller's.
func ourController(ctx context.Context, cfg config, root string) (controller, error) {
	binary := cfg.ourBinary
	if binary == "" {
		binary = filepath.Join(cfg.outDir, "sample-controller")
		progressf("building the controller into %s", binary)
		if err := localcluster.BuildController(ctx, root, binary); err != nil {
			return controller{}, err
		}
	}
	args := []string{"--resync-period=30s"}
	if cfg.profile {
		args = append(args, "--profiling")
	}
	if cfg.controllerBinary == "" {
		args = append(args, strings.Fields(cfg.controllerArgs)...)
	}
	return controller{Name: ourName, Binary: binary, Args: args, Rule: ruleReady, Ours: true}, nil
}

// foreignController is --controller-binary. Its flags are unknown, so --controller-args
// are its whole command line. It may write neither observedGeneration nor conditions,
// so a Foo counts as done once its status was written at all.
func foreignController(cfg config) controller {
	args := strings.Fields(cfg.controllerArgs)
	if len(args) == 0 {
		args = []string{"-kubeconfig=" + kubeconfigPlaceholder}
	}
	return controller{Name: cfg.controllerName, Binary: cfg.controllerBinary, Args: args, Rule: ruleWritten}
}
