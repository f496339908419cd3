// Pod networks by hand: what a CNI bridge plugin gives a Pod, for containers run under
// runc without a kubelet, and the ServiceAccount volume a kubelet would mount.

package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

const (
	// podBridge and the names below are fixed, so that a run can clear what a run that
	// died left behind; one pod network runs on a machine at a time.
	podBridge     = "lcpods0"
	podNetNSName  = "lcpod-"
	podVethPrefix = "lcveth"
	// podSubnet holds the gateway (.1, on the bridge) and the Pods (.2 and up). It is
	// outside the simulated nodes' Pod CIDR, whose addresses lead nowhere.
	podSubnet = "10.245.0.0/24"

	// ServiceAccountMountPath is where the kubelet mounts a Pod's ServiceAccount token,
	// and where client-go's in-cluster configuration reads it.
	ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// PodNetwork gives Pods run without a kubelet their own network namespaces on a bridge of
// this machine, as a CNI bridge plugin does, with the kubernetes Service reachable
// through a ServiceRelay. It needs root and the ip command (iproute2).
type PodNetwork struct {
	*ServiceRelay
	gateway net.IP

	mu   sync.Mutex
	pods []*PodSandbox
}

// PodSandbox is one Pod's network: its namespace and address.
type PodSandbox struct {
	Name  string
	IP    net.IP
	NetNS string // the namespace's path, for the runtime
	veth  string
	netns string
}

// StartPodNetwork sets up the bridge, for Pods that reach the apiserver through relay.
// Close it when done.
func StartPodNetwork(ctx context.Context, relay *ServiceRelay) (_ *PodNetwork, err error) {
	_, subnet, _ := net.ParseCIDR(podSubnet)
	n := &PodNetwork{ServiceRelay: relay, gateway: nthAddress(subnet, 1)}
	removeStalePodNetwork(ctx)
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
		}
	}()
	ones, _ := subnet.Mask.Size()
	for _, args := range [][]string{
		{"link", "add", podBridge, "type", "bridge"},
		{"addr", "add", n.gateway.String() + "/" + strconv.Itoa(ones), "dev", podBridge},
		{"link", "set", podBridge, "up"},
	} {
		if err := ipCommand(ctx, args...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// AddPod makes a network namespace for the Pod named name, joined to the bridge with
// the next free address and a default route through the bridge.
func (n *PodNetwork) AddPod(ctx context.Context, name string) (*PodSandbox, error) {
	n.mu.Lock()
	index := len(n.pods)
	_, subnet, _ := net.ParseCIDR(podSubnet)
	p := &PodSandbox{
		Name:  name,
		IP:    nthAddress(subnet, 2+index),
		netns: podNetNSName + strconv.Itoa(index),
		veth:  podVethPrefix + strconv.Itoa(index),
	}
	p.NetNS = filepath.Join("/var/run/netns", p.netns)
	n.pods = append(n.pods, p)
	n.mu.Unlock()

	ones, _ := subnet.Mask.Size()
	for _, args := range [][]string{
		{"netns", "add", p.netns},
		{"link", "add", p.veth, "type", "veth", "peer", "name", "eth0", "netns", p.netns},
		{"link", "set", p.veth, "master", podBridge, "up"},
		{"-n", p.netns, "addr", "add", p.IP.String() + "/" + strconv.Itoa(ones), "dev", "eth0"},
		{"-n", p.netns, "link", "set", "eth0", "up"},
		{"-n", p.netns, "link", "set", "lo", "up"},
		{"-n", p.netns, "route", "add", "default", "via", n.gateway.String()},
	} {
		if err := ipCommand(ctx, args...); err != nil {
			return nil, fmt.Errorf("the network of Pod %s: %w", name, err)
		}
	}
	return p, nil
}

// Close removes the Pods' namespaces and the bridge; the relay is its owner's.
func (n *PodNetwork) Close() error {
	// A cleanup, also of a start that failed because its context ended: it runs to its
	// end.
	ctx := context.Background()
	var errs []error
	n.mu.Lock()
	pods := n.pods
	n.mu.Unlock()
	for _, p := range pods {
		errs = append(errs, ipCommand(ctx, "netns", "delete", p.netns))
	}
	errs = append(errs, ipCommand(ctx, "link", "delete", podBridge))
	return errors.Join(errs...)
}

// removeStalePodNetwork deletes the bridge and Pod namespaces a previous run left.
func removeStalePodNetwork(ctx context.Context) {
	_ = exec.CommandContext(ctx, "ip", "link", "delete", podBridge).Run()
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, podNetNSName) {
			_ = exec.CommandContext(ctx, "ip", "netns", "delete", name).Run()
		}
	}
}

// nthAddress is the i-th IPv4 address of subnet.
func nthAddress(subnet *net.IPNet, i int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, subnet.IP.To4())
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += uint32(i)
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// WriteServiceAccountVolume writes what the kubelet projects into a Pod for its
// ServiceAccount (the token, the cluster's CA and the namespace) into dir, and returns
// the read-only mount of dir at the standard path.
func WriteServiceAccountVolume(dir, token string, caPEM []byte, namespace string) (specs.Mount, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return specs.Mount{}, err
	}
	for name, body := range map[string][]byte{
		"token":     []byte(token),
		"ca.crt":    caPEM,
		"namespace": []byte(namespace),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return specs.Mount{}, err
		}
	}
	return specs.Mount{Destination: ServiceAccountMountPath, Type: "bind", Source: dir, Options: []string{"rbind", "ro"}}, nil
}
