//go:build e2e

// Package container runs the controller's image the way a cluster does: as the
// containers of artifacts/deploy's Deployment, under runc with the security context,
// ServiceAccount token and Service environment that a kubelet would give them, and on a
// real node, where a kubelet and containerd do it all. It has a cluster of its own,
// because its controllers watch every namespace. Run it with `make e2e` (it needs root,
// runc, containerd, the CNI plugins and the image of `make image`).
package container

import (
	"os"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, "container", &env, framework.WithRealNode()))
}
