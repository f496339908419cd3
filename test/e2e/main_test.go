//go:build e2e

// Package e2e drives a real local control plane the way a user does: kubectl with the
// manifests in artifacts/, and the controller as a separate process built from this
// repository. Run it with `make test` (or `go test -tags e2e ./e2e/` in test/ once
// hack/build-tools.sh has built the control plane).
package e2e

import (
	"os"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// env is the cluster every test shares; each test that needs a controller starts its
// own, watching only the test's namespace, so that tests can run in parallel.
var env *framework.Env

// timeout bounds each wait for the controller and the cluster to converge.
const timeout = framework.Timeout

func TestMain(m *testing.M) {
	suite := "e2e"
	if os.Getenv("E2E_HOSTILE") == "full" {
		// Run alone after the suite (hack/test.sh): its logs stay beside the suite's.
		suite = "e2e-hostile"
	}
	os.Exit(framework.RunSuite(m, suite, &env))
}
