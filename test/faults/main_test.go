//go:build faults

// Package faults puts the controller through faults on a real local control plane:
// killed right after each of its writes, fought over its Deployments, its leader
// killed, stopped and cut off. Every case ends with the invariants of checkInvariants
// and prints what it measured on lines that start with "faults:". Run it with
// `make test-faults`.
package faults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// env is the cluster every case shares; each case has its own namespaces and
// controllers, each controller behind its own API proxy.
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
	if env, err = framework.Setup(ctx, "faults"); err != nil {
		fmt.Fprintf(os.Stderr, "faults: setting up: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.TearDown(); err != nil {
			fmt.Fprintf(os.Stderr, "faults: stopping the cluster: %v\n", err)
		}
	}()
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "faults: logs of the cluster, the controllers and their API proxies are in %s\n", env.OutDir)
	}
	return code
}
