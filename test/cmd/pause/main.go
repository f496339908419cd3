// Command pause is the sandbox (infrastructure) container of the local node's Pods: it
// holds the Pod's namespaces and does nothing else until it is told to stop, as
// registry.k8s.io/pause does. The real node (test/container/node) builds it, packs it
// with hack/image and imports it into containerd, because the node cannot pull images.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As the first process of a shared PID namespace it would inherit orphans; reaping
	// them keeps zombies from piling up.
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
