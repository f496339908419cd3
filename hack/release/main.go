// Command release writes what a release of the controller ships, from artifacts/:
//
//	release chart [--out DIR] [--image NAME@DIGEST]
//	    the Helm chart, generated from artifacts/deploy (its components are values) and
//	    artifacts/examples (the CRD, a template kept on uninstall); by default into
//	    artifacts/chart/sample-controller, where hack/update-codegen.sh keeps it.
//	release install --image NAME@DIGEST
//	    the single-file install on stdout: the CRD, then the controller as
//	    artifacts/deploy installs it (with the Foo roles), running the image by digest.
//
// Both take --repo-root (default: the repository this runs in).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: release chart|install [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	repoRoot := fs.String("repo-root", "", "the repository's root (default: the git work tree this runs in)")
	image := fs.String("image", "", "the image, NAME@sha256:DIGEST")
	out := fs.String("out", "", "chart: the directory to write the chart into (default artifacts/chart/sample-controller)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *repoRoot == "" {
		top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("finding the repository (or pass --repo-root): %w", err)
		}
		*repoRoot = strings.TrimSpace(string(top))
	}
	a, err := loadArtifacts(*repoRoot)
	if err != nil {
		return err
	}

	switch args[0] {
	case "chart":
		dir := *out
		if dir == "" {
			dir = filepath.Join(*repoRoot, "artifacts", "chart", chartName)
		}
		return writeChart(a, dir, chartOptions{image: *image})
	case "install":
		if *image == "" {
			return fmt.Errorf("install: --image NAME@sha256:DIGEST is required: a release installs its image by digest")
		}
		y, err := a.installYAML(*image)
		if err != nil {
			return err
		}
		_, err = os.Stdout.WriteString(y)
		return err
	default:
		return fmt.Errorf("unknown command %q: want chart or install", args[0])
	}
}

// installYAML is the whole install in one file: the API first (the CRD), then the
// controller with image, as `kubectl apply -k artifacts/examples` and
// `make deploy IMAGE=...` would apply them.
func (a *artifacts) installYAML(image string) (string, error) {
	var docs []string
	for _, dir := range []struct{ dir, image string }{{"examples", ""}, {"deploy", image}} {
		r, err := a.renderDir(dir.dir, dir.image)
		if err != nil {
			return "", err
		}
		for _, id := range r.order {
			docs = append(docs, r.objects[id])
		}
	}
	if n := strings.Count(strings.Join(docs, ""), "image: "+image+"\n"); n != 1 {
		return "", fmt.Errorf("the install runs %s in %d places, want 1", image, n)
	}
	return strings.Join(docs, "---\n"), nil
}
