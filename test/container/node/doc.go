// Package node stands in for a Kubernetes node for the container suite, which runs the
// controller's image as a cluster would, in two ways:
//
//   - by hand, as a kubelet and a CRI runtime would: ContainerSpec translates a Pod's
//     container into the OCI runtime configuration they would write, StartContainer
//     runs it under runc, PodNetwork gives it a network namespace on a bridge, and
//     WriteServiceAccountVolume its ServiceAccount token;
//   - for real: Start adds a node to a local cluster (test/localcluster) with
//     containerd and a kubelet, which run the Pods scheduled there.
//
// Either way Pods reach the apiserver at the kubernetes Service's address, through a
// ServiceRelay. Running anything here needs root.
package node
