// The real node: containerd and a kubelet that join a local cluster as one more node,
// next to kwok's, and run the containers of the Pods scheduled there.

package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	// Name is the real node's, next to the cluster's simulated nodes.
	Name = "real-node"
	// TaintKey keeps Pods off the real node unless they tolerate it: the node pulls no
	// images, so only Pods of images imported into its containerd can run there.
	TaintKey   = "localcluster.dev/node"
	TaintValue = "real"

	// The names of the node's processes, for their logs in the cluster's LogDir.
	containerdName = "containerd"
	kubeletName    = "kubelet"

	// pauseImage is the sandbox image, built from test/cmd/pause and imported, since the
	// node cannot pull registry.k8s.io/pause.
	pauseImage = "localcluster.local/pause:v1"
	// nodeBridge and nodeSubnet are the CNI bridge plugin's; the subnet is outside the
	// simulated nodes' Pod CIDR and the runc pod network's.
	nodeBridge = "lccni0"
	nodeSubnet = "10.245.1.0/24"
	cniBinDir  = "/usr/lib/cni"

	// startTimeout bounds the wait for containerd, then the kubelet, to become ready,
	// as the cluster's own for each of its components.
	startTimeout = 90 * time.Second
	// stopGrace is how long containerd and the kubelet may take to exit after SIGTERM
	// before SIGKILL.
	stopGrace = 5 * time.Second
	// drainTimeout bounds the wait for the kubelet to stop the node's Pods on Stop: their
	// grace periods, and the runtime tearing the sandboxes down.
	drainTimeout = 60 * time.Second
)

// Toleration lets a Pod onto the real node.
var Toleration = corev1.Toleration{Key: TaintKey, Operator: corev1.TolerationOpEqual, Value: TaintValue, Effect: corev1.TaintEffectNoSchedule}

// Options says what the real node can run.
type Options struct {
	// Images are OCI archives imported into the node's containerd: it pulls nothing, so
	// these are the images its Pods can run.
	Images []string
}

// Node is a real node of a local cluster: containerd (Debian's, with runc and the CNI
// bridge plugin) and a kubelet, registered as Name next to the simulated nodes and
// tainted so that only Pods with Toleration run on it. Its Pods reach the apiserver
// through the kubernetes Service (ServiceRelay). Stop it before its cluster.
type Node struct {
	cluster *localcluster.Cluster
	layout  nodeLayout
	relay   *ServiceRelay

	containerd, kubelet *localcluster.Process

	stopOnce sync.Once
	stopErr  error
}

// nodeLayout is where the real node keeps its state, under the cluster's directory.
type nodeLayout struct {
	dir, containerdRoot, containerdState, runcRoot, socket, cniConfDir, cniIPAMDir string
	kubeletRoot, podLogs, kubeletConfig, kubeconfig, containerdConfig              string
}

func newNodeLayout(clusterDir string) nodeLayout {
	dir := filepath.Join(clusterDir, "node")
	return nodeLayout{
		dir:              dir,
		containerdRoot:   filepath.Join(dir, "containerd"),
		containerdState:  filepath.Join(dir, "containerd-state"),
		runcRoot:         filepath.Join(dir, "runc"),
		socket:           filepath.Join(dir, "containerd.sock"),
		containerdConfig: filepath.Join(dir, "containerd.toml"),
		cniConfDir:       filepath.Join(dir, "cni"),
		cniIPAMDir:       filepath.Join(dir, "cni-ipam"),
		kubeletRoot:      filepath.Join(dir, "kubelet"),
		kubeletConfig:    filepath.Join(dir, "kubelet.yaml"),
		kubeconfig:       filepath.Join(dir, "kubelet.kubeconfig"),
		podLogs:          filepath.Join(dir, "pod-logs"),
	}
}

// Start adds the real node to a running cluster: the kubernetes Service's relay first
// (the node's Pods reach the apiserver through it, as in-cluster clients do), then
// containerd with the node's images imported, then a kubelet that registers Name,
// tainted. It returns once the node is Ready. It needs root, containerd, runc, the CNI
// plugins, and the image tool of hack/build-image.sh in the cluster's BinDir for the
// pause image. ctx bounds the start only; on error nothing is left running.
func Start(ctx context.Context, cluster *localcluster.Cluster, opts Options) (_ *Node, err error) {
	for _, need := range []string{"containerd", "ctr", "runc", filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := exec.LookPath(need); err != nil {
			return nil, fmt.Errorf("a real node needs %s: apt-get install containerd containernetworking-plugins", need)
		}
	}
	n := &Node{cluster: cluster, layout: newNodeLayout(cluster.Dir())}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	nl := n.layout
	cleanUpNode(ctx, nl)
	if err := os.RemoveAll(nl.dir); err != nil {
		return nil, fmt.Errorf("removing the state of an earlier node: %w", err)
	}
	for _, d := range []string{nl.dir, nl.cniConfDir, nl.cniIPAMDir, nl.kubeletRoot, nl.podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	pauseArchive, err := buildPauseImage(ctx, cluster.BinDir(), nl.dir)
	if err != nil {
		return nil, err
	}
	if n.relay, err = startServiceRelay(ctx, cluster); err != nil {
		return nil, err
	}
	if err := writeNodeConfigs(nl, cluster); err != nil {
		return nil, err
	}
	// The node identity, and an admin: without the Node authorizer, which the cluster
	// does not enable, RBAC grants system:nodes nothing.
	if err := cluster.WriteKubeconfig(nl.kubeconfig, "system:node:"+Name, "system:nodes", "system:masters"); err != nil {
		return nil, err
	}

	n.containerd, err = n.startProcess(ctx, localcluster.ProcessOptions{
		Name: containerdName,
		Bin:  "containerd",
		Args: []string{"--config", nl.containerdConfig},
	}, func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, archive := range append([]string{pauseArchive}, opts.Images...) {
		if err := importImage(ctx, n.ctr, archive); err != nil {
			return nil, err
		}
	}

	if n.kubelet, err = n.startKubelet(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// startKubelet starts the kubelet on free ports and returns once it is healthy and its
// node Ready. It returns the process even when it is not, for Stop.
func (n *Node) startKubelet(ctx context.Context) (*localcluster.Process, error) {
	nl := n.layout
	ports, err := localcluster.FreePorts(ctx, 2)
	if err != nil {
		return nil, err
	}
	kubeletPort, healthzPort := ports[0], ports[1]
	config, err := os.ReadFile(nl.kubeletConfig)
	if err != nil {
		return nil, err
	}
	config = fmt.Appendf(config, "port: %d\nhealthzPort: %d\n", kubeletPort, healthzPort)
	if err := os.WriteFile(nl.kubeletConfig, config, 0o644); err != nil {
		return nil, err
	}
	healthz := httpOK("http://127.0.0.1:" + strconv.Itoa(healthzPort) + "/healthz")
	return n.startProcess(ctx, localcluster.ProcessOptions{
		Name: kubeletName,
		Bin:  filepath.Join(n.cluster.BinDir(), kubeletName),
		Args: []string{
			"--config=" + nl.kubeletConfig,
			"--kubeconfig=" + nl.kubeconfig,
			"--hostname-override=" + Name,
			"--root-dir=" + nl.kubeletRoot,
		},
	}, func(ctx context.Context) error {
		if err := healthz(ctx); err != nil {
			return err
		}
		return n.cluster.NodesReady(ctx, Name)
	})
}

// ServiceRelay is the relay of the cluster's kubernetes Service, which the node's Pods
// reach the apiserver through; Pods run by hand (PodNetwork) can use it too.
func (n *Node) ServiceRelay() *ServiceRelay { return n.relay }

// startProcess starts one of the node's processes, its log in the cluster's LogDir, and
// waits within startTimeout until ready passes. It returns the process even when it
// did not become ready, for Stop.
func (n *Node) startProcess(ctx context.Context, opts localcluster.ProcessOptions, ready func(context.Context) error) (*localcluster.Process, error) {
	began := time.Now()
	opts.LogDir = n.cluster.LogDir()
	p, err := localcluster.StartProcess(opts)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := p.WaitFor(waitCtx, opts.Name, ready); err != nil {
		return p, err
	}
	klog.FromContext(ctx).Info("Component is ready", "component", opts.Name, "pid", p.Pid(), "duration", time.Since(began).Round(time.Millisecond))
	return p, nil
}

// ctr runs containerd's client against the node's containerd, in the namespace of the
// CRI plugin, where the kubelet's images and containers are.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.layout.socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Stop drains the node, so that the kubelet stops every container gracefully and
// tears its sandbox and network down, then stops the kubelet and containerd, ends what
// they leave behind, and closes the Service relay. The drain needs the apiserver: stop
// the node before its cluster. It returns once everything has exited; calling it
// again returns the first result.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		// A process stopped on purpose may exit with any status.
		if n.kubelet != nil {
			n.drain()
			_ = n.kubelet.Stop(stopGrace)
		}
		if n.containerd != nil {
			_ = n.containerd.Stop(stopGrace)
			// After a stop, which has no context, the cleanup runs to its end.
			cleanUpNode(context.Background(), n.layout)
		}
		if n.relay != nil {
			n.stopErr = n.relay.close()
		}
	})
	return n.stopErr
}

// writeNodeConfigs writes containerd's configuration, the CNI network and the kubelet's
// configuration (less its ports).
func writeNodeConfigs(nl nodeLayout, cluster *localcluster.Cluster) error {
	servingCert, servingKey := cluster.ServingCert()
	// restrict_oom_score_adj: this machine refuses a lower oom_score_adj even to root,
	// and the CRI plugin asks for -998 for every sandbox. native: snapshots that work on
	// any file system, overlay included.
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, nl.containerdRoot, nl.containerdState, nl.socket, pauseImage, nl.runcRoot, cniBinDir, nl.cniConfDir)

	// A bridge with the gateway on it and no masquerading: the Pods reach this machine,
	// the kubernetes Service relay on it and nothing else, and need nothing else.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "localcluster",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, nodeBridge, nodeSubnet, nl.cniIPAMDir)

	// failCgroupV1: this machine has cgroup v1 only. The eviction thresholds are set low
	// because a test machine's disk may well be fuller than a node's defaults allow; the
	// image garbage collector is off, since nothing can be pulled back. The kubelet
	// listens on every address, so that the apiserver reaches it at the node's
	// InternalIP for logs and exec (it authenticates every caller).
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
address: 0.0.0.0
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: %q
tlsPrivateKeyFile: %q
podLogsDir: %q
registerWithTaints:
- {key: %q, value: %q, effect: NoSchedule}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 20
`, nl.socket, cluster.CAFile(), servingCert, servingKey, nl.podLogs, TaintKey, TaintValue)

	for path, body := range map[string]string{
		nl.containerdConfig: containerd,
		filepath.Join(nl.cniConfDir, "10-localcluster.conflist"): cni,
		nl.kubeletConfig: kubelet,
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// buildPauseImage builds test/cmd/pause and packs it as pauseImage with the image tool
// that hack/build-image.sh builds.
func buildPauseImage(ctx context.Context, binDir, dir string) (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	tool := filepath.Join(binDir, "image")
	if _, err := os.Stat(tool); err != nil {
		return "", fmt.Errorf("the real node's pause image is packed with %s, which hack/build-image.sh builds: %w", tool, err)
	}
	binary, archive := filepath.Join(dir, "pause"), filepath.Join(dir, "pause.oci.tar")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", binary, "./cmd/pause")
	build.Dir = filepath.Join(root, "test")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building test/cmd/pause: %w\n%s", err, out)
	}
	pack := exec.CommandContext(ctx, tool, "build", "--binary", binary, "--output", archive, "--tag", pauseImage,
		"--entrypoint", "/pause", "--title", "pause", "--description", "The sandbox of the local node's Pods.")
	if out, err := pack.CombinedOutput(); err != nil {
		return "", fmt.Errorf("packing the pause image: %w\n%s", err, out)
	}
	return archive, nil
}

var unpackedImage = regexp.MustCompile(`(?m)^unpacking (\S+) \(sha256:`)

// importImage imports an OCI archive into the node's containerd, under the name the
// kubelet asks for: `sample-controller:v0.1.0` in a Pod is
// docker.io/library/sample-controller:v0.1.0 to the CRI.
func importImage(ctx context.Context, ctr func(context.Context, ...string) (string, error), archive string) error {
	out, err := ctr(ctx, "images", "import", "--snapshotter", "native", archive)
	if err != nil {
		return fmt.Errorf("importing %s into the node: %w", archive, err)
	}
	names := unpackedImage.FindAllStringSubmatch(out, -1)
	if len(names) == 0 {
		return fmt.Errorf("importing %s named no image: %s", archive, out)
	}
	for _, m := range names {
		if full := normalizeImageName(m[1]); full != m[1] {
			if _, err := ctr(ctx, "images", "tag", "--force", m[1], full); err != nil {
				return err
			}
		}
	}
	return nil
}

// normalizeImageName is the reference as the CRI resolves it: without a registry,
// docker.io, and library/ for a single path component.
func normalizeImageName(name string) string {
	first, rest, found := strings.Cut(name, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return name
	}
	if !found {
		return "docker.io/library/" + name
	}
	return "docker.io/" + first + "/" + rest
}

// drain cordons the node and deletes its Pods, then waits until they are gone and
// nothing runs, so that the kubelet stops every container gracefully and tears its
// sandbox and network down before it stops itself.
func (n *Node) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	client, err := kubernetes.NewForConfig(n.cluster.RESTConfig())
	if err != nil {
		return
	}
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		logger.Error(err, "Cordoning the real node")
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", Name).String(),
	})
	if err == nil {
		for _, p := range pods.Items {
			if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				logger.Error(err, "Deleting a Pod of the real node", "pod", klog.KObj(&p))
			}
		}
	}
	// Until the drain's deadline, a check that fails (a list, ctr) is retried like one
	// that finds something left; the last check says what was.
	var last error
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = n.stopped(ctx, client)
		return last == nil, nil
	})
	if err != nil {
		logger.Error(err, "The real node's containers did not all stop; they are killed", "lastCheck", last)
	}
}

// stopped checks that the node has no Pod left in the API and no container running in
// its containerd. The kubelet removes a Pod from the API once its containers have
// stopped and its sandbox (with its network) is torn down; dead containers stay in
// containerd until the kubelet's next garbage collection, which Stop does not wait for.
func (n *Node) stopped(ctx context.Context, client kubernetes.Interface) error {
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", Name).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the node's Pods: %w", err)
	}
	if left := len(pods.Items); left > 0 {
		return fmt.Errorf("%d Pods left on the node", left)
	}
	tasks, err := n.ctr(ctx, "tasks", "list")
	if err != nil {
		return fmt.Errorf("listing the node's containers: %w", err)
	}
	if strings.Contains(tasks, "RUNNING") {
		return errors.New("containers still running")
	}
	return nil
}

// httpOK checks a plain HTTP endpoint on loopback, as the kubelet's healthz is.
func httpOK(url string) func(context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// cleanUpNode ends what a node leaves behind when it was not drained (a killed test, a
// failed start): containerd's shims and their containers, mounts under the node's
// directory, and the CNI bridge. After a stop, which has no context, ctx is
// context.Background().
func cleanUpNode(ctx context.Context, nl nodeLayout) {
	// The shims outlive containerd by design, each in a session of its own; their
	// command line names the socket of the containerd that started them.
	if entries, err := os.ReadDir("/proc"); err == nil {
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			args := strings.Split(string(cmdline), "\x00")
			if strings.Contains(args[0], "containerd-shim") && slices.Contains(args, nl.socket) {
				killShim(pid)
			}
		}
	}
	unmountUnder(nl.dir)
	_ = exec.CommandContext(ctx, "ip", "link", "delete", nodeBridge).Run()
}

// killShim kills a shim and the containers it runs (its children).
func killShim(pid int) {
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(children)) {
		if child, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			klog.Background().Error(err, "Unmounting what the real node left", "path", p)
		}
	}
}
