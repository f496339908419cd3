// The kubernetes Service without kube-proxy: its ClusterIP relayed to the apiserver, so
// that Pods find the apiserver as in-cluster clients do.

package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// ServiceRelay makes the cluster's kubernetes Service reachable at its ClusterIP from
// this machine and from Pods routed through it: the ClusterIP is added to the loopback
// device, and a relay there forwards each connection to the apiserver, as kube-proxy's
// old userspace mode did. Pods find the apiserver exactly as in a cluster, from
// KUBERNETES_SERVICE_HOST and _PORT. One runs on a machine at a time; it needs root and
// the ip command (iproute2).
type ServiceRelay struct {
	service  *corev1.Service
	target   string // the apiserver's host:port
	listener net.Listener

	// stop ends the relay's context, which its dials to the apiserver take.
	stop context.CancelFunc

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// accepted counts connections by source address.
	accepted map[string]int
	closed   bool
	wg       sync.WaitGroup
}

// startServiceRelay starts the relay of the cluster's kubernetes Service; its owner
// closes it. ctx bounds only the start.
func startServiceRelay(ctx context.Context, cluster *localcluster.Cluster) (_ *ServiceRelay, err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the Service relay needs the ip command: apt-get install iproute2")
	}
	cfg := cluster.RESTConfig()
	kube, err := kubernetes.NewForConfig(cfg)
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
	apiserver, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("the apiserver's URL %q: %w", cfg.Host, err)
	}
	// The relay outlives ctx, which bounds only its start; close ends relayCtx.
	relayCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &ServiceRelay{service: svc, target: apiserver.Host, stop: stop, conns: map[net.Conn]struct{}{}, accepted: map[string]int{}}
	// A relay that died without Close left the address behind; it is ours either way.
	_ = exec.CommandContext(ctx, "ip", "addr", "delete", svc.Spec.ClusterIP+"/32", "dev", "lo").Run()
	if err := ipCommand(ctx, "addr", "add", svc.Spec.ClusterIP+"/32", "dev", "lo"); err != nil {
		stop()
		return nil, err
	}
	port := strconv.Itoa(int(svc.Spec.Ports[0].Port))
	if r.listener, err = (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(svc.Spec.ClusterIP, port)); err != nil {
		return nil, errors.Join(fmt.Errorf("listening at the kubernetes Service's address: %w", err), r.close())
	}
	r.wg.Add(1)
	go r.accept(relayCtx)
	return r, nil
}

// ServiceEnv is the environment the kubelet gives every container for the kubernetes
// Service (and Docker-link style variables), which in-cluster clients read.
func (r *ServiceRelay) ServiceEnv() []string {
	ip, p := r.service.Spec.ClusterIP, r.service.Spec.Ports[0]
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

// RelayedConnections is how many connections the relay accepted from ip.
func (r *ServiceRelay) RelayedConnections(ip net.IP) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted[ip.String()]
}

// close stops the relay, cutting its connections, and removes the address.
func (r *ServiceRelay) close() error {
	r.stop()
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	if r.listener != nil {
		r.listener.Close()
	}
	r.wg.Wait()
	// A cleanup, with no context to end it: it runs to its end.
	return ipCommand(context.Background(), "addr", "delete", r.service.Spec.ClusterIP+"/32", "dev", "lo")
}

func (r *ServiceRelay) accept(ctx context.Context) {
	defer r.wg.Done()
	for {
		in, err := r.listener.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.forward(ctx, in)
		}()
	}
}

// forward copies one connection both ways between a client and the apiserver; the TLS
// inside is theirs, so the apiserver authenticates the client's own token.
func (r *ServiceRelay) forward(ctx context.Context, in net.Conn) {
	out, err := (&net.Dialer{}).DialContext(ctx, "tcp", r.target)
	if err != nil {
		in.Close()
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	host, _, _ := net.SplitHostPort(in.RemoteAddr().String())
	r.accepted[host]++
	r.conns[in], r.conns[out] = struct{}{}, struct{}{}
	r.mu.Unlock()

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
	r.mu.Lock()
	delete(r.conns, in)
	delete(r.conns, out)
	r.mu.Unlock()
}

func ipCommand(ctx context.Context, args ...string) error {
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
