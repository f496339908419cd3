//go:build e2e

// Package e2e drives a real local control plane the way a user does: kubectl with the
// manifests in artifacts/, and the controller as a separate process built from this
// repository. Run it with `make test` (or `go test -tags e2e ./test/e2e/` once
// hack/build-tools.sh has built the control plane).
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// env is the cluster every test shares; each test that needs a controller starts its
// own, watching only the test's namespace, so that tests can run in parallel.
var env *framework.Env

// timeout bounds each wait for the controller and the cluster to converge.
const timeout = framework.Timeout

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if env, err = framework.Setup(ctx, "e2e"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: setting up: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.TearDown(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: stopping the cluster: %v\n", err)
		}
	}()
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: logs of the cluster and the controllers are in %s\n", env.OutDir)
	}
	return code
}
