//go:build e2e

// Package container runs the controller's image the way a cluster does: as the
// containers of artifacts/deploy's Deployment, under runc with the security context,
// ServiceAccount token and Service environment that a kubelet would give them, and on a
// real node, where a kubelet and containerd do it all; test/container/node stands in
// for the node both ways. It has a cluster of its own, because its controllers watch
// every namespace. Run it with `make e2e` (it needs root, runc, containerd, the CNI
// plugins and the image of `make image`).
package container

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/seed-e6610ed6/sample-controller/test/container/node"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

var (
	env *framework.Env
	// realNode is the cluster's node with a kubelet and containerd; its Service relay
	// also serves the Pods run under runc.
	realNode *node.Node
)

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, "container", &env, framework.WithAfterStart(startRealNode)))
}

// startRealNode adds the real node to the suite's cluster, with the suite's image
// imported into its containerd.
func startRealNode(ctx context.Context, e *framework.Env) (func() error, error) {
	if e.ImageArchive == "" {
		return nil, fmt.Errorf("a real node runs the image: set %s to the archive of `make image`, as `make e2e` does", framework.ImageArchiveEnv)
	}
	n, err := node.Start(ctx, e.Cluster, node.Options{Images: []string{e.ImageArchive}})
	if err != nil {
		return nil, err
	}
	realNode = n
	return n.Stop, nil
}
