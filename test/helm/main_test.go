//go:build e2e

// Package helm installs the controller the ways a release ships it (`make release`):
// its install.yaml with kubectl, and its chart with helm, installed, upgraded and
// uninstalled. The suite's control plane emulates the oldest Kubernetes the chart
// claims (its Chart.yaml's kubeVersion), so that the CRD's CEL, the APIs and the
// controller are proven there and not only on the binaries' own release. It has a
// cluster of its own, because both installs own cluster-scoped objects that the other
// suites' install already holds. Run it with `make e2e`, after `make release`.
package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// ReleaseDirEnv names the directory of `make release` (default _output/release).
const ReleaseDirEnv = "E2E_RELEASE_DIR"

var (
	env *framework.Env
	// minimum is the oldest Kubernetes the chart claims, "MAJOR.MINOR".
	minimum string
)

func TestMain(m *testing.M) {
	var err error
	if minimum, err = chartMinimum(); err != nil {
		fmt.Fprintln(os.Stderr, "helm:", err)
		os.Exit(1)
	}
	os.Exit(framework.RunSuite(m, "helm", &env, framework.WithoutInstall(), framework.WithEmulatedVersion(minimum)))
}

// chartMinimum reads the oldest release the chart installs on from its kubeVersion,
// the one place that says it.
func chartMinimum() (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "artifacts", "chart", "sample-controller", "Chart.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^kubeVersion: ">= ?(\d+\.\d+)\.0-0"$`).FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s: no kubeVersion of the form \">= MAJOR.MINOR.0-0\"", path)
	}
	return string(m[1]), nil
}
