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
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// env is the cluster every case shares; each case has its own namespaces and
// controllers, each controller behind its own API proxy.
var env *framework.Env

// timeout bounds each wait for the controller and the cluster to converge.
const timeout = framework.Timeout

// conflictBackoff spaces a case's retries of a read and write back that lost to a
// controller's own write. Replicas renew every half second and, on a loaded machine, a
// read and a write back can take as long: client-go's DefaultRetry (five tries 10ms
// apart) ran out in CI.
var conflictBackoff = wait.Backoff{Steps: 10, Duration: 50 * time.Millisecond, Factor: 1.5, Jitter: 1}

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, "faults", &env))
}
