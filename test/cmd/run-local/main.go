// Command run-local is `make run`: it runs the controller against the cluster named by
// --kubeconfig or $KUBECONFIG, or else against a local control plane it starts under
// _output/local with the example CRD and Foo applied. Ctrl-C stops the controller,
// then the cluster.
//
//	go run ./cmd/run-local (in test/) [--kubeconfig=PATH] [--nodes=N] [-- CONTROLLER-ARGS...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	crdManifest     = "artifacts/examples/crd.yaml"
	exampleManifest = "artifacts/examples/example-foo.yaml"
	controllerBin   = "_output/bin/sample-controller"
	clusterDir      = "_output/local"

	// Where `make run` serves, as the README says: metrics over plain HTTP (the
	// harness passes --metrics-secure=false) on :8080, the probes on :8081.
	metricsAddress = ":8080"
	probeAddress   = ":8081"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "run against this cluster instead of a local one (default $KUBECONFIG)")
	nodes := flag.Int("nodes", localcluster.DefaultNodes, "number of simulated nodes in the local cluster")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags] [-- controller args...]\n", filepath.Base(os.Args[0]))
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// A second Ctrl-C ends this program at once; the components die with it.
		stopSignals()
	}()
	ctx = klog.NewContext(ctx, klog.Background())

	if err := run(ctx, *kubeconfig, *nodes, flag.Args()); err != nil {
		say("%v", err)
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && exitErr.ExitCode() > 0 {
			os.Exit(exitErr.ExitCode())
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string, nodes int, controllerArgs []string) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	if fromArgs, rest := kubeconfigFromArgs(controllerArgs); fromArgs != "" {
		// `make run ARGS=--kubeconfig=PATH`: the controller's flag names the cluster.
		kubeconfig, controllerArgs = fromArgs, rest
	}
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if strings.Contains(kubeconfig, string(os.PathListSeparator)) {
		return fmt.Errorf("KUBECONFIG lists several files (%s); name one with --kubeconfig", kubeconfig)
	}

	if err := buildController(ctx, root); err != nil {
		return err
	}
	if kubeconfig != "" {
		say("running the controller against %s", kubeconfig)
		return runController(ctx, root, kubeconfig, filepath.Join(root, "_output"), controllerArgs)
	}

	binDir, err := localcluster.DefaultBinDir()
	if err != nil {
		return err
	}
	if err := buildTools(ctx, root, binDir); err != nil {
		return err
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		Dir:    filepath.Join(root, clusterDir),
		BinDir: binDir,
		Nodes:  nodes,
	})
	if err != nil {
		return fmt.Errorf("starting the local cluster: %w", err)
	}
	defer func() {
		say("stopping the local cluster")
		if err := cluster.Stop(); err != nil {
			say("%v", err)
		}
	}()

	if err := localcluster.InstallCRD(ctx, cluster.RESTConfig(), filepath.Join(root, crdManifest)); err != nil {
		return fmt.Errorf("installing the CRD: %w", err)
	}
	kubectl := filepath.Join(binDir, "kubectl")
	if err := runCommand(ctx, root, kubectl, "--kubeconfig="+cluster.KubeconfigPath(), "apply", "-f", exampleManifest); err != nil {
		return fmt.Errorf("applying the example: %w", err)
	}

	say("local cluster is up; component logs are in %s", cluster.LogDir())
	say("in another terminal:\n\n    export KUBECONFIG=%s\n    %s get foos,deployments,pods\n",
		cluster.KubeconfigPath(), kubectl)
	return runController(ctx, root, cluster.KubeconfigPath(), cluster.LogDir(), controllerArgs)
}

// buildTools runs hack/build-tools.sh, which returns at once when everything is built.
func buildTools(ctx context.Context, root, binDir string) error {
	if err := localcluster.CheckBinaries(binDir); err != nil {
		say("%v", err)
		say("building them now; the first build takes several minutes")
	}
	if err := runCommand(ctx, root, filepath.Join(root, "hack", "build-tools.sh")); err != nil {
		return fmt.Errorf("building the local control plane: %w", err)
	}
	return nil
}

func buildController(ctx context.Context, root string) error {
	say("building the controller")
	return localcluster.BuildController(ctx, root, filepath.Join(root, controllerBin))
}

// runController runs the controller in the foreground, its output on the terminal and
// in <logDir>/sample-controller.log, until it exits or ctx ends; then it stops the
// controller and waits for it, so that the cluster outlives it.
func runController(ctx context.Context, root, kubeconfig, logDir string, args []string) error {
	controller, err := localcluster.StartController(ctx, localcluster.ControllerOptions{
		Bin:            filepath.Join(root, controllerBin),
		Kubeconfig:     kubeconfig,
		LogDir:         logDir,
		Name:           "sample-controller",
		Args:           args,
		Stdout:         os.Stderr,
		MetricsAddress: metricsAddress,
		ProbeAddress:   probeAddress,
	})
	if err != nil {
		return err
	}
	select {
	case <-controller.Exited():
		if err := controller.Err(); err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	say("stopping the controller; press Ctrl-C again to kill everything at once")
	err = controller.Stop(localcluster.ControllerStopGrace)
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
		say("the controller did not exit within %v; killed it", localcluster.ControllerStopGrace)
	}
	return nil
}

// runCommand runs a command in dir with this program's output, stopping it when ctx ends.
func runCommand(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	return cmd.Run()
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "run-local: "+format+"\n", args...)
}

// kubeconfigFromArgs finds the controller's --kubeconfig flag among args, in any of the
// forms Go's flag package accepts, and returns its value and args without it; the
// last one wins, as it does for the controller.
func kubeconfigFromArgs(args []string) (string, []string) {
	var kubeconfig string
	var rest []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") || name != "kubeconfig" {
			rest = append(rest, arg)
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		kubeconfig = value
	}
	return kubeconfig, rest
}
