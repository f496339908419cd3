package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// podBridge and the names below are fixed, so that a run can clear what a run that
	// died left behind; one pod network runs on a machine at a time.
	podBridge     = "lcpods0"
	podNetNSName  = "lcpod-"
	podVethPrefix = "lcveth"
	// podSubnet holds the gateway (.1, on the bridge) and the Pods (.2 and up).
	podSubnet = "10.244.0.0/24"

	// ServiceAccountMountPath is where the kubelet mounts a Pod's ServiceAccount token,
	// and where client-go's in-cluster configuration reads it.
	ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// PodNetwork gives Pods their own network namespaces on a bridge of this machine, as a
// CNI bridge plugin does, and makes the cluster's kubernetes Service reachable from them
// at its ClusterIP: that address is put on the bridge, where a relay forwards each
// connection to the apiserver, as kube-proxy's old userspace mode did. Pods then find
// the apiserver exactly as in a cluster, from KUBERNETES_SERVICE_HOST and _PORT. It
// needs root and the ip command (iproute2).
type PodNetwork struct {
	service  *corev1.Service
	gateway  net.IP
	target   string // the apiserver's host:port
	listener net.Listener

	mu    sync.Mutex
	pods  []*PodSandbox
	conns map[net.Conn]struct{}
	// accepted counts the relay's connections by source address.
	accepted map[string]int
	closed   bool
	relayWG  sync.WaitGroup
}

// PodSandbox is one Pod's network: its namespace and address.
type PodSandbox struct {
	Name  string
	IP    net.IP
	NetNS string // the namespace's path, for the runtime
	veth  string
	netns string
}

// StartPodNetwork sets up the bridge and the relay for the cluster's kubernetes Service.
// Close it when done.
func (c *Cluster) StartPodNetwork(ctx context.Context) (_ *PodNetwork, err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("a pod network needs the ip command: apt-get install iproute2")
	}
	kube, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	svc, err := kube.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the kubernetes Service: %w", err)
	}
	if len(svc.Spec.Ports) == 0 || net.ParseIP(svc.Spec.ClusterIP) == nil {
		return nil, fmt.Errorf("the kubernetes Service has no ClusterIP and port: %+v", svc.Spec)
	}
	apiserver, err := url.Parse(c.restConfig.Host)
	if err != nil {
		return nil, fmt.Errorf("the apiserver's URL %q: %w", c.restConfig.Host, err)
	}
	_, subnet, _ := net.ParseCIDR(podSubnet)
	n := &PodNetwork{
		service:  svc,
		gateway:  nthAddress(subnet, 1),
		target:   apiserver.Host,
		conns:    map[net.Conn]struct{}{},
		accepted: map[string]int{},
	}
	removeStalePodNetwork()
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
		}
	}()
	ones, _ := subnet.Mask.Size()
	for _, args := range [][]string{
		{"link", "add", podBridge, "type", "bridge"},
		{"addr", "add", n.gateway.String() + "/" + strconv.Itoa(ones), "dev", podBridge},
		{"addr", "add", svc.Spec.ClusterIP + "/32", "dev", podBridge},
		{"link", "set", podBridge, "up"},
	} {
		if err := ipCommand(args...); err != nil {
			return nil, err
		}
	}
	port := strconv.Itoa(int(svc.Spec.Ports[0].Port))
	if n.listener, err = net.Listen("tcp", net.JoinHostPort(svc.Spec.ClusterIP, port)); err != nil {
		return nil, fmt.Errorf("listening at the kubernetes Service's address: %w", err)
	}
	n.relayWG.Add(1)
	go n.relay()
	return n, nil
}

// ServiceEnv is the environment the kubelet gives every container for the kubernetes
// Service (and Docker-link style variables), which in-cluster clients read.
func (n *PodNetwork) ServiceEnv() []string {
	ip, p := n.service.Spec.ClusterIP, n.service.Spec.Ports[0]
	port := strconv.Itoa(int(p.Port))
	proto := strings.ToLower(string(p.Protocol))
	if proto == "" {
		proto = "tcp"
	}
	env := []string{
		"KUBERNETES_SERVICE_HOST=" + ip,
		"KUBERNETES_SERVICE_PORT=" + port,
	}
	if p.Name != "" {
		env = append(env, "KUBERNETES_SERVICE_PORT_"+strings.ToUpper(p.Name)+"="+port)
	}
	link := "KUBERNETES_PORT_" + port + "_" + strings.ToUpper(proto)
	return append(env,
		"KUBERNETES_PORT="+proto+"://"+net.JoinHostPort(ip, port),
		link+"="+proto+"://"+net.JoinHostPort(ip, port),
		link+"_PROTO="+proto,
		link+"_PORT="+port,
		link+"_ADDR="+ip,
	)
}

// AddPod makes a network namespace for the Pod named name, joined to the bridge with
// the next free address and a default route through the bridge.
func (n *PodNetwork) AddPod(name string) (*PodSandbox, error) {
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
		if err := ipCommand(args...); err != nil {
			return nil, fmt.Errorf("the network of Pod %s: %w", name, err)
		}
	}
	return p, nil
}

// RelayedConnections is how many connections the kubernetes Service's relay accepted
// from ip.
func (n *PodNetwork) RelayedConnections(ip net.IP) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.accepted[ip.String()]
}

// Close stops the relay, cutting its connections, and removes the Pods' namespaces and
// the bridge.
func (n *PodNetwork) Close() error {
	n.mu.Lock()
	n.closed = true
	for c := range n.conns {
		c.Close()
	}
	pods := n.pods
	n.mu.Unlock()
	if n.listener != nil {
		n.listener.Close()
	}
	n.relayWG.Wait()
	var errs []error
	for _, p := range pods {
		if err := ipCommand("netns", "delete", p.netns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ipCommand("link", "delete", podBridge); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (n *PodNetwork) relay() {
	defer n.relayWG.Done()
	for {
		in, err := n.listener.Accept()
		if err != nil {
			return
		}
		n.relayWG.Add(1)
		go func() {
			defer n.relayWG.Done()
			n.forward(in)
		}()
	}
}

// forward copies one connection both ways between a Pod and the apiserver; the TLS
// inside is theirs, so the apiserver authenticates the Pod's own token.
func (n *PodNetwork) forward(in net.Conn) {
	out, err := net.Dial("tcp", n.target)
	if err != nil {
		in.Close()
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	host, _, _ := net.SplitHostPort(in.RemoteAddr().String())
	n.accepted[host]++
	n.conns[in], n.conns[out] = struct{}{}, struct{}{}
	n.mu.Unlock()

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close, so that the other side sees the end and the other copy ends too.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	in.Close()
	out.Close()
	n.mu.Lock()
	delete(n.conns, in)
	delete(n.conns, out)
	n.mu.Unlock()
}

// removeStalePodNetwork deletes the bridge and Pod namespaces a previous run left.
func removeStalePodNetwork() {
	_ = exec.Command("ip", "link", "delete", podBridge).Run()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, podNetNSName) {
			_ = exec.Command("ip", "netns", "delete", name).Run()
		}
	}
}

func ipCommand(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
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

// CACert is the PEM of the cluster's CA, which signed the apiserver's certificate.
func (c *Cluster) CACert() []byte { return c.restConfig.CAData }
