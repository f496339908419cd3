package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

const (
	// RealNodeName is the node whose kubelet runs containers, next to the simulated ones.
	RealNodeName = "real-node"
	// RealNodeTaintKey keeps Pods off the real node unless they tolerate it: the node
	// pulls no images, so only Pods of images imported into its containerd can run there.
	RealNodeTaintKey   = "localcluster.dev/node"
	RealNodeTaintValue = "real"

	// pauseImage is the sandbox image, built from test/cmd/pause and imported, since the
	// node cannot pull registry.k8s.io/pause.
	pauseImage = "localcluster.local/pause:v1"
	// nodeBridge and nodeSubnet are the CNI bridge plugin's; the subnet is outside the
	// simulated nodes' Pod CIDR and the runc pod network's.
	nodeBridge = "lccni0"
	nodeSubnet = "10.245.1.0/24"
	cniBinDir  = "/usr/lib/cni"

	// drainTimeout bounds the wait for the kubelet to stop the node's Pods on Stop: their
	// grace periods, and the runtime tearing the sandboxes down.
	drainTimeout = 60 * time.Second
)

// RealNodeToleration lets a Pod onto the real node.
var RealNodeToleration = corev1.Toleration{Key: RealNodeTaintKey, Operator: corev1.TolerationOpEqual, Value: RealNodeTaintValue, Effect: corev1.TaintEffectNoSchedule}

// nodeLayout is where the real node keeps its state, under the cluster's directory.
type nodeLayout struct {
	dir, containerdRoot, containerdState, runcRoot, socket, cniConfDir, cniIPAMDir string
	kubeletRoot, podLogs, kubeletConfig, containerdConfig                          string
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
		podLogs:          filepath.Join(dir, "pod-logs"),
	}
}

// startRealNode starts containerd (Debian's, with runc and the CNI plugins) with the
// node's images imported, and a kubelet that registers RealNodeName, tainted, and returns
// once the node is Ready. The kubernetes Service relay comes first: the node's Pods reach
// the apiserver through it, as in-cluster clients do.
func (c *Cluster) startRealNode(ctx context.Context, l layout, creds credentials, opts Options, client *client, probes *prober) error {
	for _, need := range []string{"containerd", "ctr", "runc", filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := exec.LookPath(need); err != nil {
			return fmt.Errorf("a real node needs %s: apt-get install containerd containernetworking-plugins", need)
		}
	}
	nl := newNodeLayout(c.dir)
	cleanUpNode(ctx, nl)
	if err := os.RemoveAll(nl.dir); err != nil {
		return fmt.Errorf("removing the state of an earlier node: %w", err)
	}
	for _, d := range []string{nl.dir, nl.cniConfDir, nl.cniIPAMDir, nl.kubeletRoot, nl.podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	pauseArchive, err := buildPauseImage(ctx, c.binDir, nl.dir)
	if err != nil {
		return err
	}

	if _, err := c.ServiceRelay(ctx); err != nil {
		return err
	}

	if err := writeNodeConfigs(nl, creds); err != nil {
		return err
	}
	ctr := func(ctx context.Context, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", nl.socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	containerd := &component{
		opts: ProcessOptions{
			Name:   ComponentContainerd,
			Bin:    "containerd",
			Args:   []string{"--config", nl.containerdConfig},
			LogDir: l.logDir,
		},
		ready: func(ctx context.Context) error {
			_, err := ctr(ctx, "version")
			return err
		},
		grace:     stopGrace,
		afterStop: func() error { cleanUpNode(context.Background(), nl); return nil },
	}
	if err := c.runComponent(ctx, containerd); err != nil {
		return err
	}
	for _, archive := range append([]string{pauseArchive}, opts.NodeImages...) {
		if err := importImage(ctx, ctr, archive); err != nil {
			return err
		}
	}

	ports, err := FreePorts(ctx, 2)
	if err != nil {
		return err
	}
	kubeletPort, healthzPort := ports[0], ports[1]
	config, err := os.ReadFile(nl.kubeletConfig)
	if err != nil {
		return err
	}
	config = fmt.Appendf(config, "port: %d\nhealthzPort: %d\n", kubeletPort, healthzPort)
	if err := os.WriteFile(nl.kubeletConfig, config, 0o644); err != nil {
		return err
	}
	healthz := probes.http("http://127.0.0.1:" + strconv.Itoa(healthzPort) + "/healthz")
	kubelet := &component{
		opts: ProcessOptions{
			Name: ComponentKubelet,
			Bin:  filepath.Join(c.binDir, ComponentKubelet),
			Args: []string{
				"--config=" + nl.kubeletConfig,
				"--kubeconfig=" + l.kubeconfigs[ComponentKubelet],
				"--hostname-override=" + RealNodeName,
				"--root-dir=" + nl.kubeletRoot,
			},
			LogDir: l.logDir,
		},
		ready: func(ctx context.Context) error {
			if err := healthz(ctx); err != nil {
				return err
			}
			return client.nodesReady(ctx, []string{RealNodeName}, !opts.SkipControllerManager)
		},
		grace:      stopGrace,
		beforeStop: func() { c.drainRealNode(ctr) },
	}
	return c.runComponent(ctx, kubelet)
}

// writeNodeConfigs writes containerd's configuration, the CNI network and the kubelet's
// configuration (less its ports).
func writeNodeConfigs(nl nodeLayout, creds credentials) error {
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
	// image garbage collector is off, since nothing can be pulled back.
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
address: 127.0.0.1
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
`, nl.socket, creds.caCert, creds.servingCert, creds.servingKey, nl.podLogs, RealNodeTaintKey, RealNodeTaintValue)

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
	root, err := RepoRoot()
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

// drainRealNode cordons the node and deletes its Pods, then waits until they are gone
// and nothing runs, so that the kubelet stops every container gracefully and tears its
// sandbox and network down before it stops itself.
func (c *Cluster) drainRealNode(ctr func(context.Context, ...string) (string, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	client, err := newClient(c.restConfig)
	if err != nil {
		return
	}
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, RealNodeName, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		logger.Error(err, "Cordoning the real node")
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", RealNodeName).String(),
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
		last = client.realNodeStopped(ctx, ctr)
		return last == nil, nil
	})
	if err != nil {
		logger.Error(err, "The real node's containers did not all stop; they are killed", "lastCheck", last)
	}
}

// realNodeStopped checks that the real node has no Pod left in the API and no
// container running in its containerd. The kubelet removes a Pod from the API once its
// containers have stopped and its sandbox (with its network) is torn down; dead
// containers stay in containerd until the kubelet's next garbage collection, which Stop
// does not wait for.
func (c *client) realNodeStopped(ctx context.Context, ctr func(context.Context, ...string) (string, error)) error {
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", RealNodeName).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the node's Pods: %w", err)
	}
	if n := len(pods.Items); n > 0 {
		return fmt.Errorf("%d Pods left on the node", n)
	}
	tasks, err := ctr(ctx, "tasks", "list")
	if err != nil {
		return fmt.Errorf("listing the node's containers: %w", err)
	}
	if strings.Contains(tasks, "RUNNING") {
		return errors.New("containers still running")
	}
	return nil
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
