// Package localcluster runs a real Kubernetes control plane on loopback addresses from
// the binaries hack/build-tools.sh builds: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, and kwok simulating the nodes, so that
// Deployments get Pods that become Running and Ready without any container runtime.
// `make run`, the suites and the bench start their cluster here, install CRDs, run the
// controller as a process (StartController) and scrape metrics. What only some suites
// need is elsewhere: the fault suite's API proxy in test/apiproxy, and a node that runs
// containers for real in test/container/node.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Names of the components, as used for log files, in Options.ExtraArgs and by
// Cluster.Component.
const (
	ComponentEtcd              = "etcd"
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
	ComponentKwok              = "kwok"
)

const (
	// DefaultNodes is the number of simulated nodes when Options.Nodes is zero.
	DefaultNodes = 3

	// BinDirEnv overrides where the binaries are found, for Start and for
	// hack/build-tools.sh alike.
	BinDirEnv = "LOCALCLUSTER_BIN_DIR"

	// KwokStagesFile is the kwok configuration, next to the binaries, holding the stages
	// that move simulated nodes and pods through their lifecycle.
	KwokStagesFile = "kwok-stages.yaml"

	// ServiceClusterIPRange is where Services get their cluster IPs; nothing routes it.
	ServiceClusterIPRange = "10.0.0.0/24"

	// AdminUser is the user of the admin kubeconfig; it is in system:masters.
	AdminUser = "localcluster-admin"
)

// Binaries lists the files Start needs in the bin directory, with kubectl for people
// and scripts using the cluster.
var Binaries = []string{ComponentEtcd, ComponentAPIServer, ComponentControllerManager, ComponentScheduler, ComponentKwok, "kubectl", KwokStagesFile}

const (
	// startTimeout bounds the wait for one component to become ready.
	startTimeout = 90 * time.Second
	// stopGrace is how long a component may take to exit after SIGTERM before SIGKILL.
	// The apiserver drains requests and watches first, which takes it longest.
	stopGrace          = 5 * time.Second
	apiserverStopGrace = 20 * time.Second
)

// Options says what to run and where.
type Options struct {
	// Dir holds the certificates, kubeconfigs, etcd data and logs. Start replaces what a
	// previous cluster left there. Empty means a new temporary directory that Stop
	// removes, logs included.
	Dir string

	// BinDir holds the binaries; empty means DefaultBinDir().
	BinDir string

	// Nodes is the number of simulated nodes; zero means DefaultNodes.
	Nodes int

	// The components below run unless switched off; etcd and kube-apiserver always run.
	// A controller that only reads and writes API objects needs none of them. Without
	// the controller manager nothing garbage-collects dependents, creates the Pods of a
	// Deployment, or creates the default ServiceAccount a Pod needs; without the
	// scheduler Pods stay Pending; without kwok there are no nodes.
	SkipControllerManager bool
	SkipScheduler         bool
	SkipKwok              bool

	// DisableShardedListAndWatch starts the apiserver without the ShardedListAndWatch
	// feature (KEP-5866, alpha in 1.36), which the cluster otherwise enables. Without it
	// the apiserver ignores ListOptions.ShardSelector and returns every object, as an
	// older one does.
	DisableShardedListAndWatch bool

	// EmulatedVersion, "MAJOR.MINOR", makes the apiserver, controller manager and
	// scheduler behave as that older release (--emulated-version; a release emulates
	// the three before it): its APIs, feature gates and CEL libraries. The
	// ShardedListAndWatch feature is then left at that release's default (absent
	// before 1.36). Empty means the binaries' own release.
	EmulatedVersion string

	// ExtraArgs are appended to the command line of the named component (one of the
	// component constants), for example an audit policy for the apiserver.
	ExtraArgs map[string][]string
}

// Cluster is a running local control plane. Stop it when done; processes left running
// by a program that exits without Stop are killed with it.
type Cluster struct {
	dir       string
	removeDir bool
	logDir    string
	binDir    string

	adminKubeconfig string
	restConfig      *rest.Config
	// client is the harness's own, as the admin.
	client *client
	// ca signs the certificates of the cluster's users (WriteKubeconfig); creds are
	// the files the components were started with.
	ca    *authority
	creds credentials
	// etcdURL is etcd's client URL: plain HTTP on loopback, also serving /metrics
	// and /health.
	etcdURL string

	// components are in start order; Stop walks them backwards. mu guards their
	// processes, which Restart replaces.
	mu         sync.Mutex
	components []*component

	stopOnce sync.Once
	stopErr  error
}

// component is one process of the control plane, and how to start it again.
type component struct {
	opts  ProcessOptions
	ready func(context.Context) error
	grace time.Duration
	proc  *Process
}

// Start starts a cluster and returns once every component is ready and the simulated
// nodes are Ready. ctx bounds the start only; the cluster runs until Stop. On error
// nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	logger := klog.FromContext(ctx)
	began := time.Now()

	if opts.BinDir == "" {
		binDir, err := DefaultBinDir()
		if err != nil {
			return nil, err
		}
		opts.BinDir = binDir
	}
	if err := CheckBinaries(opts.BinDir); err != nil {
		return nil, err
	}
	if opts.Nodes == 0 {
		opts.Nodes = DefaultNodes
	}
	if opts.Nodes < 0 {
		return nil, fmt.Errorf("invalid number of nodes %d", opts.Nodes)
	}

	dir, removeDir := opts.Dir, false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "localcluster-"); err != nil {
			return nil, fmt.Errorf("creating cluster directory: %w", err)
		}
		removeDir = true
	}
	// The ports are chosen free, then passed to the components, which bind them a
	// moment later. FreePorts keeps out the kernel's client ports and the ports of the
	// harness's other programs (ports.go), but a program outside the harness can still
	// take one in between: a start that fails so is tried again, on other ports.
	for attempt := 1; ; attempt++ {
		c := &Cluster{dir: dir, binDir: opts.BinDir}
		err := c.start(ctx, opts)
		if err == nil {
			c.removeDir = removeDir
			logger.Info("Local cluster is ready", "kubeconfig", c.adminKubeconfig, "logs", c.logDir, "duration", time.Since(began).Round(time.Millisecond))
			return c, nil
		}
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		if attempt < startAttempts && strings.Contains(err.Error(), "address already in use") && ctx.Err() == nil {
			logger.Info("A port was taken before its component bound it; starting again on other ports", "attempt", attempt, "err", err)
			continue
		}
		if removeDir {
			err = errors.Join(err, os.RemoveAll(dir))
		}
		return nil, err
	}
}

// startAttempts is how many times Start tries, when a port it chose was taken.
const startAttempts = 3

// freePorts picks the cluster's ports; a test replaces it to hand out a taken one.
var freePorts = FreePorts

// KubeconfigPath is the admin kubeconfig, for kubectl and for controllers under test.
func (c *Cluster) KubeconfigPath() string { return c.adminKubeconfig }

// RESTConfig returns a new copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// EtcdURL is etcd's client URL, plain HTTP on loopback: its /metrics and /health
// need no credentials.
func (c *Cluster) EtcdURL() string { return c.etcdURL }

// CACert is the PEM of the cluster's CA, which signed the apiserver's certificate.
func (c *Cluster) CACert() []byte { return c.restConfig.CAData }

// CAFile holds CACert: the CA that signed every component's serving certificate and
// every client certificate the apiserver accepts.
func (c *Cluster) CAFile() string { return c.creds.caCert }

// ServingCert is the certificate every component serves with, and its key, signed by
// the cluster's CA for loopback and for the kubernetes Service's names and ClusterIP.
func (c *Cluster) ServingCert() (certFile, keyFile string) {
	return c.creds.servingCert, c.creds.servingKey
}

// WriteKubeconfig writes a kubeconfig of the cluster to path that authenticates as user
// in groups, with a client certificate from the cluster's CA: for a client that needs
// an identity of its own, as a kubelet does.
func (c *Cluster) WriteKubeconfig(path, user string, groups ...string) error {
	cert, err := c.ca.issueClient(user, groups...)
	if err != nil {
		return err
	}
	return writeKubeconfig(path, c.restConfig.Host, c.ca.certPEM, cert)
}

// NodesReady succeeds once every named node is Ready and, when the cluster runs the
// controller manager, no longer carries the not-ready taint, which it removes then:
// until it has, the scheduler passes the node over.
func (c *Cluster) NodesReady(ctx context.Context, names ...string) error {
	return c.client.nodesReady(ctx, names, c.Component(ComponentControllerManager) != nil)
}

// LogDir holds one <component>.log per component.
func (c *Cluster) LogDir() string { return c.logDir }

// Dir is the cluster's state directory.
func (c *Cluster) Dir() string { return c.dir }

// BinDir holds the binaries the cluster runs, kubectl among them.
func (c *Cluster) BinDir() string { return c.binDir }

// Component returns the running process of the named component, or nil if the cluster
// does not run it.
func (c *Cluster) Component(name string) *Process {
	_, p := c.lookup(name)
	return p
}

// lookup returns the named component and its current process, or nils.
func (c *Cluster) lookup(name string) (*component, *Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, comp := range c.components {
		if comp.opts.Name == name {
			return comp, comp.proc
		}
	}
	return nil, nil
}

// Restart stops the named component and starts it again with the same flags, appending
// to the same log, and returns once it is ready again: a crash and a restart by a
// supervisor, for fault tests.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	comp, p := c.lookup(name)
	if p == nil {
		return fmt.Errorf("restarting %s: the cluster does not run it", name)
	}
	// How it exits does not matter; that it is gone does.
	_ = p.Stop(comp.grace)
	return c.startComponent(ctx, comp)
}

// Pause stops the named component with SIGSTOP, so that it holds its connections and
// ports but answers nothing, as a hung process does.
func (c *Cluster) Pause(name string) error {
	p := c.Component(name)
	if p == nil {
		return fmt.Errorf("pausing %s: the cluster does not run it", name)
	}
	return p.Pause()
}

// Resume continues a paused component.
func (c *Cluster) Resume(name string) error {
	p := c.Component(name)
	if p == nil {
		return fmt.Errorf("resuming %s: the cluster does not run it", name)
	}
	return p.Resume()
}

// runComponent adds a component to the cluster, which stops it, and starts it.
func (c *Cluster) runComponent(ctx context.Context, comp *component) error {
	c.mu.Lock()
	c.components = append(c.components, comp)
	c.mu.Unlock()
	return c.startComponent(ctx, comp)
}

// startComponent starts a component's process and waits until it is ready, within
// startTimeout.
func (c *Cluster) startComponent(ctx context.Context, comp *component) error {
	began := time.Now()
	p, err := StartProcess(comp.opts)
	if err != nil {
		return err
	}
	c.mu.Lock()
	comp.proc = p
	c.mu.Unlock()
	if err := waitStarted(ctx, p, comp.opts.Name, comp.ready); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Component is ready", "component", comp.opts.Name, "pid", p.Pid(), "duration", time.Since(began).Round(time.Millisecond))
	return nil
}

// waitStarted is Process.WaitFor within startTimeout.
func waitStarted(ctx context.Context, p *Process, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return p.WaitFor(ctx, what, check)
}

// Stop stops the components in the reverse order of their start: kwok, scheduler and
// controller manager first, so that nothing talks to an apiserver that is going away,
// then the apiserver, then etcd, which the apiserver needs until it has exited. It
// returns once every process has exited. Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		components := c.components
		c.mu.Unlock()
		for i := len(components) - 1; i >= 0; i-- {
			// Nil when it failed to start; a component stopped on purpose may exit
			// with any status.
			comp, p := c.lookup(components[i].opts.Name)
			if p == nil {
				continue
			}
			_ = p.Stop(comp.grace)
		}
		if c.removeDir {
			if err := os.RemoveAll(c.dir); err != nil {
				c.stopErr = fmt.Errorf("removing cluster directory: %w", err)
			}
		}
	})
	return c.stopErr
}

// DefaultBinDir is $LOCALCLUSTER_BIN_DIR if set, else _output/bin in the repository
// that holds the working directory.
func DefaultBinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("finding the bin directory (or set %s): %w", BinDirEnv, err)
	}
	return filepath.Join(root, "_output", "bin"), nil
}

// RepoRoot is the nearest directory at or above the working directory that holds
// hack/build-tools.sh; tests run in their package's directory, `make run` at the root.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-tools.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no hack/build-tools.sh at or above the working directory")
		}
		dir = parent
	}
}

// CheckBinaries returns an error naming what is missing from binDir.
func CheckBinaries(binDir string) error {
	var missing []string
	for _, name := range Binaries {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return &MissingBinariesError{BinDir: binDir, Missing: missing}
	}
	return nil
}

// MissingBinariesError says that hack/build-tools.sh has to run first.
type MissingBinariesError struct {
	BinDir  string
	Missing []string
}

func (e *MissingBinariesError) Error() string {
	return fmt.Sprintf("missing %v in %s; build them with hack/build-tools.sh (the first build takes several minutes)", e.Missing, e.BinDir)
}

// layout names the files of one cluster inside its directory.
type layout struct {
	pkiDir, etcdDir, logDir, kwokDir string
	kubeconfigs                      map[string]string // by component, and "admin"
}

func newLayout(dir string) layout {
	l := layout{
		pkiDir:      filepath.Join(dir, "pki"),
		etcdDir:     filepath.Join(dir, "etcd"),
		logDir:      filepath.Join(dir, "logs"),
		kwokDir:     filepath.Join(dir, "kwok"),
		kubeconfigs: map[string]string{},
	}
	for _, who := range []string{"admin", ComponentControllerManager, ComponentScheduler, ComponentKwok} {
		l.kubeconfigs[who] = filepath.Join(dir, who+".kubeconfig")
	}
	return l
}

// reset removes what an earlier cluster left in the directory, and nothing else.
func (l layout) reset() error {
	paths := []string{l.pkiDir, l.etcdDir, l.logDir, l.kwokDir}
	for _, p := range l.kubeconfigs {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("removing state of an earlier cluster: %w", err)
		}
	}
	for _, d := range []string{l.pkiDir, l.etcdDir, l.logDir, l.kwokDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating cluster directory: %w", err)
		}
	}
	return nil
}

// credentials are the files the components are started with.
type credentials struct {
	caCert, caKey           string
	servingCert, servingKey string
	saKey, saPublicKey      string
	// kubeletClientCert and kubeletClientKey are the apiserver's identity towards the
	// kubelets of real nodes (logs, exec), an admin.
	kubeletClientCert, kubeletClientKey string
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	l := newLayout(c.dir)
	if err := l.reset(); err != nil {
		return err
	}
	c.logDir = l.logDir
	c.adminKubeconfig = l.kubeconfigs["admin"]

	ports, err := freePorts(ctx, 6)
	if err != nil {
		return err
	}
	etcdClientPort, etcdPeerPort, apiserverPort, kcmPort, schedulerPort, kwokPort :=
		ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	apiserverURL := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(apiserverPort))

	creds, ca, err := writeCredentials(l, apiserverURL)
	if err != nil {
		return err
	}
	c.ca, c.creds = ca, creds
	if c.restConfig, err = clientcmd.BuildConfigFromFlags("", c.adminKubeconfig); err != nil {
		return fmt.Errorf("loading admin kubeconfig: %w", err)
	}
	probes, err := newProber(ca)
	if err != nil {
		return err
	}

	bin := func(name string) string { return filepath.Join(opts.BinDir, name) }
	run := func(name string, args []string, env []string, ready func(context.Context) error) error {
		grace := stopGrace
		if name == ComponentAPIServer {
			grace = apiserverStopGrace
		}
		comp := &component{
			opts: ProcessOptions{
				Name:   name,
				Bin:    bin(name),
				Args:   append(args, opts.ExtraArgs[name]...),
				Env:    env,
				LogDir: l.logDir,
			},
			ready: ready,
			grace: grace,
		}
		return c.runComponent(ctx, comp)
	}

	// componentFlags are what kube-controller-manager and kube-scheduler share: their
	// kubeconfig, a loopback HTTPS port with the cluster's serving certificate for
	// their health probe, and the emulated release. One instance each, so no leader
	// election.
	// The release all three emulate, when an older one is asked for.
	var emulation []string
	if opts.EmulatedVersion != "" {
		if opts.DisableShardedListAndWatch {
			return errors.New("EmulatedVersion leaves ShardedListAndWatch at the emulated release's default; DisableShardedListAndWatch cannot be set with it")
		}
		emulation = []string{"--emulated-version=" + opts.EmulatedVersion}
	}
	componentFlags := func(name string, port int) []string {
		return append([]string{
			"--kubeconfig=" + l.kubeconfigs[name],
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + l.pkiDir,
			"--tls-cert-file=" + creds.servingCert,
			"--tls-private-key-file=" + creds.servingKey,
			"--leader-elect=false",
			"--profiling=false",
		}, emulation...)
	}

	etcdClientURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdClientPort))
	c.etcdURL = etcdClientURL
	etcdPeerURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdPeerPort))
	err = run(ComponentEtcd, []string{
		"--name=localcluster",
		"--data-dir=" + l.etcdDir,
		"--listen-client-urls=" + etcdClientURL,
		"--advertise-client-urls=" + etcdClientURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=localcluster=" + etcdPeerURL,
		// The data is thrown away with the cluster; fsync only costs time.
		"--unsafe-no-fsync",
	}, nil, probes.http(etcdClientURL+"/readyz"))
	if err != nil {
		return err
	}

	apiserverArgs := append([]string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The Endpoints of the kubernetes Service may not hold a loopback address, and
		// nothing in this cluster would route to it anyway.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiserverPort),
		"--cert-dir=" + l.pkiDir,
		"--tls-cert-file=" + creds.servingCert,
		"--tls-private-key-file=" + creds.servingKey,
		"--client-ca-file=" + creds.caCert,
		"--authorization-mode=RBAC",
		// As OpenShift and hardened clusters do: setting blockOwnerDeletion needs
		// permission to update the owner's finalizers, which the e2e tests then prove
		// the controller's RBAC grants.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + creds.saPublicKey,
		"--service-account-signing-key-file=" + creds.saKey,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--profiling=false",
		// Without it, on SIGTERM the apiserver waits for its clients to end their
		// watches, which they never do: it would be killed after apiserverStopGrace.
		"--shutdown-watch-termination-grace-period=2s",
		// Logs and exec of a Pod on a real node (test/container/node): the kubelet
		// serves on its node IP, loopback, and authenticates the apiserver's client
		// certificate; the node's name resolves nowhere.
		"--kubelet-client-certificate=" + creds.kubeletClientCert,
		"--kubelet-client-key=" + creds.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	}, emulation...)
	if opts.EmulatedVersion == "" {
		apiserverArgs = append(apiserverArgs, "--feature-gates=ShardedListAndWatch="+strconv.FormatBool(!opts.DisableShardedListAndWatch))
	}
	err = run(ComponentAPIServer, apiserverArgs, nil, probes.apiserver(c.restConfig))
	if err != nil {
		return err
	}
	client, err := newClient(c.restConfig)
	if err != nil {
		return err
	}
	c.client = client

	if !opts.SkipControllerManager {
		err = run(ComponentControllerManager, append(componentFlags(ComponentControllerManager, kcmPort), []string{
			// Each controller acts as its own service account, as in a kubeadm cluster,
			// so RBAC is the real one.
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + creds.saKey,
			"--root-ca-file=" + creds.caCert,
			"--cluster-signing-cert-file=" + creds.caCert,
			"--cluster-signing-key-file=" + creds.caKey,
			// The default client rate limit makes starting its ~40 controllers, each
			// with its own credentials, take several seconds longer.
			"--kube-api-qps=200",
			"--kube-api-burst=400",
		}...), nil, probes.https(kcmPort))
		if err != nil {
			return err
		}
		// Pods cannot be created in a namespace before its default ServiceAccount
		// exists; wait for the one in "default" so that the first Deployment does not
		// start with a backoff.
		if err := waitStarted(ctx, c.Component(ComponentControllerManager), "the default service account", client.defaultServiceAccountExists); err != nil {
			return err
		}
	}

	if !opts.SkipScheduler {
		err = run(ComponentScheduler, componentFlags(ComponentScheduler, schedulerPort), nil, probes.https(schedulerPort))
		if err != nil {
			return err
		}
	}

	if !opts.SkipKwok {
		nodes, err := client.createNodes(ctx, opts.Nodes)
		if err != nil {
			return err
		}
		kwokAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(kwokPort))
		err = run(ComponentKwok, []string{
			"--kubeconfig=" + l.kubeconfigs[ComponentKwok],
			"--config=" + bin(KwokStagesFile),
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=" + kwokNodeAnnotationValue,
			"--server-address=" + kwokAddr,
			"--cidr=" + podCIDR,
			// Renew a Lease per node, as kubelets do; without it only the status
			// heartbeat stage keeps the nodes from going NotReady.
			"--node-lease-duration-seconds=40",
		}, []string{
			// kwok otherwise also reads ~/.kwok/kwok.yaml when it exists.
			"KWOK_WORKDIR=" + l.kwokDir,
		}, probes.http("http://"+kwokAddr+"/healthz"))
		if err != nil {
			return err
		}
		// The scheduler passes over nodes that are not Ready, and the controller manager
		// removes the not-ready taint only after kwok reports them Ready.
		nodesReady := func(ctx context.Context) error {
			return client.nodesReady(ctx, nodes, !opts.SkipControllerManager)
		}
		if err := waitStarted(ctx, c.Component(ComponentKwok), "the simulated nodes", nodesReady); err != nil {
			return err
		}
	}
	return nil
}

// writeCredentials generates the cluster's CA, certificates, service account key and
// kubeconfigs. It returns the paths of the files and the CA.
func writeCredentials(l layout, apiserverURL string) (credentials, *authority, error) {
	var creds credentials
	ca, err := newAuthority("localcluster-ca")
	if err != nil {
		return creds, nil, err
	}
	if creds.caCert, creds.caKey, err = ca.write(l.pkiDir, "ca"); err != nil {
		return creds, nil, err
	}

	// One serving certificate for every component on loopback, also valid for the
	// names and the cluster IP of the kubernetes Service.
	serving, err := ca.issueServing("localcluster-serving",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)})
	if err != nil {
		return creds, nil, err
	}
	if creds.servingCert, creds.servingKey, err = serving.write(l.pkiDir, "serving"); err != nil {
		return creds, nil, err
	}

	kubeletClient, err := ca.issueClient("localcluster-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return creds, nil, err
	}
	if creds.kubeletClientCert, creds.kubeletClientKey, err = kubeletClient.write(l.pkiDir, "apiserver-kubelet-client"); err != nil {
		return creds, nil, err
	}

	saKey, saPublic, err := newServiceAccountKey()
	if err != nil {
		return creds, nil, err
	}
	creds.saKey = filepath.Join(l.pkiDir, "service-account.key")
	creds.saPublicKey = filepath.Join(l.pkiDir, "service-account.pub")
	if err := os.WriteFile(creds.saKey, saKey, 0o600); err != nil {
		return creds, nil, fmt.Errorf("writing service account key: %w", err)
	}
	if err := os.WriteFile(creds.saPublicKey, saPublic, 0o644); err != nil {
		return creds, nil, fmt.Errorf("writing service account key: %w", err)
	}

	// The controller manager and the scheduler use the identities the apiserver's
	// default RBAC policy grants their permissions to. kwok plays the kubelet of many
	// nodes at once, which no node identity may do, so it is an admin.
	identities := map[string]struct {
		user   string
		groups []string
	}{
		"admin":                    {AdminUser, []string{"system:masters"}},
		ComponentControllerManager: {"system:kube-controller-manager", nil},
		ComponentScheduler:         {"system:kube-scheduler", nil},
		ComponentKwok:              {"localcluster-kwok", []string{"system:masters"}},
	}
	for who, id := range identities {
		cert, err := ca.issueClient(id.user, id.groups...)
		if err != nil {
			return creds, nil, err
		}
		if err := writeKubeconfig(l.kubeconfigs[who], apiserverURL, ca.certPEM, cert); err != nil {
			return creds, nil, err
		}
	}
	return creds, ca, nil
}
