package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kubeconfigPlaceholder in --controller-args stands for the admin kubeconfig of the
// cluster the controller runs against.
const kubeconfigPlaceholder = "{kubeconfig}"

// ourName is the column of our controller.
const ourName = "ours"

// controllerSpec is a controller binary and how to run it.
type controllerSpec struct {
	name   string
	binary string
	// args may hold kubeconfigPlaceholder.
	args []string
	// rule decides when a Foo's status counts as written; see statusRule.
	rule statusRule
}

// command returns the arguments for a cluster whose admin kubeconfig is kubeconfig.
func (c controllerSpec) command(kubeconfig string) []string {
	out := make([]string, len(c.args))
	for i, a := range c.args {
		out[i] = strings.ReplaceAll(a, kubeconfigPlaceholder, kubeconfig)
	}
	return out
}

// ourController builds our controller from the repository root (unless --our-binary
// names a build) and returns how to run it: as an admin, with metrics and probes on
// free loopback ports, and a resync period short enough that the steady-state window
// covers a resync.
func ourController(ctx context.Context, cfg config, root string) (controllerSpec, error) {
	binary := cfg.ourBinary
	if binary == "" {
		binary = filepath.Join(cfg.outDir, "sample-controller")
		progressf("building the controller into %s", binary)
		build := exec.CommandContext(ctx, "go", "build", "-o", binary, ".")
		build.Dir = root
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return controllerSpec{}, fmt.Errorf("building the controller: %w", err)
		}
	}
	args := []string{
		"--kubeconfig=" + kubeconfigPlaceholder,
		"--metrics-bind-address=127.0.0.1:0",
		"--health-probe-bind-address=127.0.0.1:0",
		"--resync-period=30s",
	}
	if cfg.profile {
		args = append(args, "--profiling")
	}
	if cfg.controllerBinary == "" {
		args = append(args, strings.Fields(cfg.controllerArgs)...)
	}
	return controllerSpec{name: ourName, binary: binary, args: args, rule: ruleReady}, nil
}

// foreignController is --controller-binary. Its flags are unknown, so --controller-args
// replace ours rather than add to them. It may not report observedGeneration or
// conditions, so a Foo counts as done once its status was written at all.
func foreignController(cfg config) controllerSpec {
	args := strings.Fields(cfg.controllerArgs)
	if len(args) == 0 {
		args = []string{"-kubeconfig=" + kubeconfigPlaceholder}
	}
	return controllerSpec{name: cfg.controllerName, binary: cfg.controllerBinary, args: args, rule: ruleWritten}
}
