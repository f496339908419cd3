//go:build faults

// Package faults puts the controller through faults on a real local control plane:
// killed right after each of its writes, fought over its Deployments, its leader
// killed, stopped and cut off. Every case ends with the invariants of checkInvariants
// and prints what it measured on lines that start with "faults:". Run it with
// `make test-faults`.
package faults

import (
	"os"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// env is the cluster every case shares; each case has its own namespaces and
// controllers, each controller behind its own API proxy.
var env *framework.Env

// timeout bounds each wait for the controller and the cluster to converge.
const timeout = framework.Timeout

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, "faults", &env))
}
