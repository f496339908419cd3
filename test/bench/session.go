package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	eventsinformers "k8s.io/client-go/informers/events/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	fooinformers "github.com/seed-e6610ed6/sample-controller/pkg/generated/informers/externalversions/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	benchNamespace     = "bench"     // the Foos and their Deployments
	unrelatedNamespace = "unrelated" // the memory case's Deployments, which no Foo owns
	initialReplicas    = 1
)

// session is one side on a fresh cluster (etcd and kube-apiserver only).
type session struct {
	cfg     config
	name    string // side, size and pair, for progress and file names: "ours-1000-2"
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	sample  clientset.Interface
	watch   *watcher
	foos    []*samplev1alpha1.Foo
	side    side

	proc         *localcluster.Process    // the controller's process
	ctrl         *localcluster.Controller // ours, with its endpoints; nil for the others
	stopping     *atomic.Bool             // the bench stops proc: its exit ends nothing
	starts       int                      // how often the controller was started
	kubeconfig   string                   // the controller's: of user
	user         string                   // the controller's user, by which the audit log tells its requests
	auditLog     string                   // kube-apiserver's: every request but watches
	scraperToken string                   // shipped: the token ours' /metrics is scraped with
	scrapes      atomic.Int64             // shipped: scrapes answered
	scrapeMisses atomic.Int64             // shipped: scrapes failed while kube-apiserver restarted
	restarting   atomic.Bool              // kube-apiserver restarts: ours cannot review a scraper's token
	fail         func(error)              // ends the cases with this error: the controller exited, say
	converged    bool                     // the cold start converged
	replicas     []int32                  // the last spec.replicas the reaction case set on each Foo
	result       runResult
}

// sessionName makes a description a file name: runs of letters and digits, dashed.
func sessionName(description string) string {
	other := func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }
	return strings.Join(strings.FieldsFunc(strings.ToLower(description), other), "-")
}

func runSession(ctx context.Context, cfg config, root string, p sessionPlan) (runResult, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	s := &session{cfg: cfg, name: sessionName(fmt.Sprintf("%s %d %d", p.side.Name, p.foos, p.pair)), side: p.side, fail: fail,
		result: runResult{Column: p.side.Name, Floor: p.side.Floor, Peer: p.side.Peer, Side: p.side, Foos: p.foos, Pair: p.pair}}
	defer s.stop()
	if err := s.setUp(ctx, root, p.foos); err != nil {
		return s.result, err
	}
	for i, c := range p.cases {
		if i > 0 && !s.converged {
			progressf("%s: the cold start did not converge; skipping the cases after it", s.name)
			break
		}
		if err := c.run(ctx, s); err != nil {
			return s.result, err
		}
	}
	return s.result, nil
}

// setUp starts the cluster, the bench's clients and watch, and creates n Foos.
func (s *session) setUp(ctx context.Context, root string, n int) error {
	progressf("%s: starting a fresh cluster", s.name)
	var err error
	dir := filepath.Join(s.cfg.outDir, "clusters", s.name)
	s.auditLog = filepath.Join(dir, "logs", "kube-apiserver-audit.log")
	policy := filepath.Join(s.cfg.outDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	nodes := s.cfg.nodes
	s.cluster, err = localcluster.Start(ctx, localcluster.Options{Dir: dir, Nodes: nodes,
		SkipControllerManager: nodes == 0, SkipScheduler: nodes == 0, SkipKwok: nodes == 0,
		// One file, never rotated (0 would be lumberjack's 100 MB): the cases read it whole.
		ExtraArgs: map[string][]string{localcluster.ComponentAPIServer: {"--audit-policy-file=" + policy,
			"--audit-log-path=" + s.auditLog, "--audit-log-maxsize=1000000"}}})
	if err != nil {
		return err
	}
	// No client-side limit: the bench sends up to 1000 patches per second.
	cfg := s.cluster.RESTConfig()
	cfg.QPS, cfg.UserAgent = -1, "sample-controller-bench"
	s.kube, s.sample = kubernetes.NewForConfigOrDie(cfg), clientset.NewForConfigOrDie(cfg)
	if err := localcluster.InstallCRD(ctx, s.cluster.RESTConfig(), filepath.Join(root, "artifacts", "examples", "crd.yaml")); err != nil {
		return err
	}
	namespaces := []string{unrelatedNamespace}
	for i := range min(n, s.cfg.namespaces) {
		namespaces = append(namespaces, s.cfg.fooNamespace(i))
	}
	err = parallel(ctx, len(namespaces), s.cfg.workers, func(ctx context.Context, i int) error {
		if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaces[i]}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", namespaces[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if s.watch, err = startWatcher(ctx, s.kube, s.sample); err != nil {
		return err
	}
	// The controller has a user of its own: the shipped ServiceAccount's, or an admin.
	s.kubeconfig, s.user = filepath.Join(dir, "controller.kubeconfig"), "bench-controller"
	if s.side.Shipped {
		if err := s.installShipped(ctx, root); err != nil {
			return err
		}
		if s.scraperToken, err = scraperToken(ctx, s.kube); err != nil {
			return err
		}
	} else if err := s.cluster.WriteKubeconfig(s.kubeconfig, s.user, "system:masters"); err != nil {
		return err
	}

	began := time.Now()
	s.foos = make([]*samplev1alpha1.Foo, n)
	err = parallel(ctx, n, s.cfg.workers, func(ctx context.Context, i int) error {
		foo := &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: fooName(i), Namespace: s.cfg.fooNamespace(i)},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: fooName(i), Replicas: ptr.To[int32](initialReplicas)},
		}
		var err error
		if s.foos[i], err = s.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).Create(ctx, foo, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Foo %s: %w", foo.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	seen := func() int { return len(s.watch.foos.ListKeys()) }
	if err := s.waitUntil(ctx, time.Minute, func() bool { return seen() >= n }, nil); err != nil || seen() < n {
		return cmp.Or(err, fmt.Errorf("the watch saw only %d of the %d Foos created", seen(), n))
	}
	progressf("%s: created %d Foos in %v", s.name, n, time.Since(began).Round(time.Millisecond))
	return nil
}

// installShipped applies artifacts/deploy's namespace, ServiceAccount and RBAC, and
// writes a kubeconfig that authenticates as that ServiceAccount in its groups: ours as
// shipped is a normal user with exactly the shipped rights, under the API server's
// default flow schemas (service-accounts), not an admin exempt from them.
func (s *session) installShipped(ctx context.Context, root string) error {
	deploy := filepath.Join(root, "artifacts", "deploy")
	cmd := exec.CommandContext(ctx, filepath.Join(s.cluster.BinDir(), "kubectl"), "--kubeconfig="+s.cluster.KubeconfigPath(),
		"apply", "--namespace="+leaseNamespace, "-f", filepath.Join(deploy, "namespace.yaml"),
		"-f", filepath.Join(deploy, "serviceaccount.yaml"), "-f", filepath.Join(deploy, "rbac.yaml"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying artifacts/deploy's RBAC: %w\n%s", err, out)
	}
	s.user = "system:serviceaccount:" + leaseNamespace + ":sample-controller"
	return s.cluster.WriteKubeconfig(s.kubeconfig, s.user, "system:serviceaccounts", "system:serviceaccounts:"+leaseNamespace)
}

// stopController stops the controller's process, which the session then has none of.
func (s *session) stopController() error {
	s.stopping.Store(true)
	err := s.proc.Stop(localcluster.ControllerStopGrace)
	s.proc, s.ctrl = nil, nil
	return err
}

// stop stops everything and removes the cluster's etcd data and audit log; the other logs stay.
func (s *session) stop() {
	if s.side.Shipped {
		progressf("%s: %d scrapes of ours' /metrics answered, %d failed while kube-apiserver restarted", s.name, s.scrapes.Load(), s.scrapeMisses.Load())
	}
	var errs []error
	if s.proc != nil {
		errs = append(errs, s.stopController())
	}
	if s.watch != nil {
		s.watch.stop()
	}
	if s.cluster != nil {
		errs = append(errs, s.cluster.Stop(), os.RemoveAll(filepath.Join(s.cluster.Dir(), "etcd")), os.RemoveAll(s.auditLog))
	}
	if err := errors.Join(errs...); err != nil {
		progressf("%s: stopping: %v", s.name, err)
	}
}

// waitUntil polls done until it holds or timeout passes (no error: the caller says how
// far it got), and prints progress() every 10 s.
func (s *session) waitUntil(ctx context.Context, timeout time.Duration, done func() bool, progress func() string) error {
	lastReport := time.Now()
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if progress != nil && time.Since(lastReport) >= 10*time.Second {
			progressf("%s: %s", s.name, progress())
			lastReport = time.Now()
		}
		return done(), nil
	})
	return context.Cause(ctx)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	return context.Cause(ctx)
}

// fooName names the i-th Foo, and its Deployment.
func fooName(i int) string { return fmt.Sprintf("foo-%05d", i) }

// fooNamespace is the namespace of Foo i: --namespaces of them, round-robin.
func (cfg config) fooNamespace(i int) string {
	if cfg.namespaces == 1 {
		return benchNamespace
	}
	return fmt.Sprintf("%s-%d", benchNamespace, i%cfg.namespaces)
}

// parallel calls fn for 0..n-1 from workers goroutines until the first error.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workqueue.ParallelizeUntil(ctx, workers, n, func(i int) {
		if err := fn(ctx, i); err != nil {
			cancel(err)
		}
	})
	return context.Cause(ctx)
}

func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// runInformers runs informers, until stop, once their caches are filled.
func runInformers(ctx context.Context, what string, informers ...cache.SharedIndexInformer) (stop func(), err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	var synced []cache.InformerSynced
	for _, informer := range informers {
		wg.Go(func() { informer.RunWithContext(ctx) })
		synced = append(synced, informer.HasSynced)
	}
	stop = func() { cancel(nil); wg.Wait() }
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		err := fmt.Errorf("%s: the caches did not fill: %w", what, context.Cause(ctx))
		stop()
		return nil, err
	}
	return stop, nil
}

// watcher hands every change of the Foos, Deployments and Events, with the time it
// arrived, to the function observe set. It only watches: the bench adds no requests.
type watcher struct {
	stop  func()
	foos  cache.Store
	to    atomic.Pointer[func(obj any, at time.Time)]
	lease leaseRecord
}

// leaseRecord follows ours' Lease as the watch sees it, whatever observe is set to:
// the longest interval between two renewals by one holder.
type leaseRecord struct {
	mu      sync.Mutex
	holder  string
	renewed time.Time // its last renewTime
	longest time.Duration
}

func (r *leaseRecord) observe(l *coordinationv1.Lease) {
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if l.Name != leaseName || l.Spec.RenewTime == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if holder != "" && holder == r.holder {
		r.longest = max(r.longest, l.Spec.RenewTime.Sub(r.renewed))
	}
	r.holder, r.renewed = holder, l.Spec.RenewTime.Time
}

// longestRenewal is the longest interval between renewals since it was last called.
func (r *leaseRecord) longestRenewal() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	longest := r.longest
	r.longest = 0
	return longest
}

func startWatcher(ctx context.Context, kube kubernetes.Interface, sample clientset.Interface) (*watcher, error) {
	index := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	deployments := appsinformers.NewDeploymentInformer(kube, metav1.NamespaceAll, 0, index)
	events := eventsinformers.NewEventInformer(kube, metav1.NamespaceAll, 0, index)
	foos := fooinformers.NewFooInformer(sample, metav1.NamespaceAll, 0, index)
	leases := coordinationinformers.NewLeaseInformer(kube, leaseNamespace, 0, index)
	w := &watcher{foos: foos.GetStore()}
	deliver := func(obj any) {
		now := time.Now()
		if l, ok := obj.(*coordinationv1.Lease); ok {
			w.lease.observe(l)
		} else if to := w.to.Load(); to != nil && *to != nil {
			(*to)(obj, now)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: deliver, UpdateFunc: func(_, obj any) { deliver(obj) }}
	for _, informer := range []cache.SharedIndexInformer{deployments, events, foos, leases} {
		var err error
		if informer != foos { // the Foos keep their managedFields, which tell whether a status was written
			err = informer.SetTransform(dropManagedFields)
		}
		if _, errHandler := informer.AddEventHandler(handler); err != nil || errHandler != nil {
			return nil, errors.Join(err, errHandler)
		}
	}
	var err error
	if w.stop, err = runInformers(ctx, "the bench's watch", deployments, events, foos, leases); err != nil {
		return nil, err
	}
	return w, nil
}

func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// observe hands later changes to fn; nil drops them.
func (w *watcher) observe(fn func(obj any, at time.Time)) { w.to.Store(&fn) }

// side is a column of the table: a controller, ours or a peer, or the floor, the least
// controller that makes ours' writes (README.md).
type side struct {
	Name       string
	Binary     string   `json:",omitempty"`
	Args       []string `json:",omitempty"`
	AnyStatus  bool     `json:",omitempty"` // a Foo's status counts as done once written at all
	Env        []string `json:",omitempty"`
	Ours, Peer bool     `json:"-"`          // ours serves metrics and probes and records Events
	Shipped    bool     `json:",omitempty"` // ours as artifacts/deploy runs it, its secure metrics scraped
	Floor      bool     `json:",omitempty"`
	MaxFoos    int      `json:",omitempty"` // more would take it past any cold-start timeout
}

const (
	ourName   = "ours"
	floorName = "floor"
	resync    = 30 * time.Second // on every side with informers; the steady-state window covers one
	// Ours' Leases are in artifacts/deploy's namespace, as in a Pod there.
	leaseNamespace = "sample-controller-system"
	leaseName      = "sample-controller" // --leader-elect-resource-name's default
)

// floorSide runs the floor, built at binary, over every namespace as ours, with ours' workers.
func floorSide(cfg config, binary string) side {
	return side{Name: floorName, Binary: binary, Floor: true, Args: []string{
		"--resync-period=" + resync.String(), fmt.Sprintf("--workers=%d", cfg.workers)}}
}

// events tells whether a cold start waits for every DeploymentCreated Event too.
func (d side) events() bool { return d.Ours || d.Floor }

// command is the side's arguments; ours is given the kubeconfig by StartController.
func (d side) command(kubeconfig string) []string {
	if d.Ours {
		return d.Args
	}
	return append([]string{"--kubeconfig=" + kubeconfig}, d.Args...)
}

// start starts the controller's process, whose exit ends the session's cases unless
// the bench stopped it.
func (d side) start(ctx context.Context, s *session) error {
	stopping := new(atomic.Bool)
	s.proc, s.ctrl, s.stopping = nil, nil, stopping
	name := s.name + "-controller"
	if s.starts > 0 {
		name += fmt.Sprintf("-start-%d", s.starts+1)
	}
	var err error
	if d.Ours {
		s.ctrl, err = localcluster.StartController(ctx, localcluster.ControllerOptions{Bin: d.Binary, Kubeconfig: s.kubeconfig, LogDir: s.cfg.outDir, Name: name,
			Args: d.command(s.kubeconfig), Env: d.Env, SecureMetrics: d.Shipped})
		if err == nil {
			s.proc = s.ctrl.Process
		}
		if err == nil && d.Shipped {
			s.scrape(s.ctrl, stopping)
		}
	} else { // a peer may read $KUBECONFIG too
		s.proc, err = localcluster.StartProcess(localcluster.ProcessOptions{Name: name, Bin: d.Binary, Args: d.command(s.kubeconfig), Env: []string{"KUBECONFIG=" + s.kubeconfig}, LogDir: s.cfg.outDir})
	}
	if err != nil {
		return err
	}
	proc := s.proc
	go func() {
		<-proc.Exited()
		if !stopping.Load() {
			s.fail(proc.ExitError())
		}
	}()
	s.starts++
	return nil
}

// ourController runs our controller with the bench's resync and --controller-args:
// as shipped (the arguments and memory limit of artifacts/deploy's Deployment, its
// metrics served over HTTPS and scraped), or bare as the bench ran it before (no
// election, plain metrics).
func ourController(cfg config, binary string, shipped bool) side {
	d := side{Name: ourName, Binary: binary, Ours: true, Args: []string{"--resync-period=" + resync.String()}}
	if shipped {
		d.Shipped, d.Env = true, cfg.shipped.env
		if cfg.memoryLimit > 0 {
			d.Env = append(slices.DeleteFunc(slices.Clone(d.Env), func(e string) bool { return strings.HasPrefix(e, "MEMORY_LIMIT=") }),
				fmt.Sprintf("MEMORY_LIMIT=%d", cfg.memoryLimit))
		}
		d.Args = append(d.Args, cfg.shipped.args...)
		d.Args = append(d.Args, "--leader-elect-resource-namespace="+leaseNamespace)
	} else {
		d.Name += " bare"
	}
	d.Args = append(d.Args, strings.Fields(cfg.controllerArgs)...)
	return d
}

// shipped is what artifacts/deploy's Deployment gives the controller that a process
// outside a Pod can have: its arguments, but the addresses the bench chooses, and its
// memory limit as MEMORY_LIMIT (the CPU limit needs a cgroup; POD_NAME and POD_UID a Pod).
type shipped struct {
	args, env []string
}

func readShipped(root string) (shipped, error) {
	path := filepath.Join(root, "artifacts", "deploy", "deployment.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return shipped{}, err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return shipped{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		return shipped{}, fmt.Errorf("%s: want a Deployment of one container", path)
	}
	c := d.Spec.Template.Spec.Containers[0]
	var out shipped
	for _, arg := range c.Args {
		name, _, _ := strings.Cut(arg, "=")
		if !slices.Contains([]string{"--metrics-bind-address", "--health-probe-bind-address", "--metrics-secure"}, name) {
			out.args = append(out.args, arg)
		}
	}
	if limit, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		out.env = append(out.env, fmt.Sprintf("MEMORY_LIMIT=%d", limit.Value()))
	}
	return out, nil
}

// scrapeInterval is the shipped ServiceMonitor's.
const scrapeInterval = 30 * time.Second

// scrape gets ctrl's /metrics every scrapeInterval, as Prometheus would, with the token
// of a ServiceAccount bound to the shipped scrapers' role (trusting the certificate the
// controller wrote), parsing what it gets, until the controller exits. A scrape that
// fails ends the session, unless the bench is stopping the controller or restarting
// kube-apiserver, which reviews the token (Prometheus would record the target down).
func (s *session) scrape(ctrl *localcluster.Controller, stopping *atomic.Bool) {
	go func() {
		ticker := time.NewTicker(scrapeInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctrl.Process.Exited():
				return
			case <-ticker.C:
			}
			client, err := ctrl.MetricsClient(s.scraperToken)
			if err == nil {
				scrapeCtx, cancel := context.WithTimeout(context.Background(), scrapeInterval)
				_, err = localcluster.ScrapeMetrics(scrapeCtx, client, ctrl.MetricsURL)
				cancel()
			}
			switch {
			case err == nil:
				s.scrapes.Add(1)
			case stopping.Load():
			case s.restarting.Load():
				s.scrapeMisses.Add(1)
			default:
				s.fail(fmt.Errorf("scraping %s: %w", ctrl.MetricsURL, err))
				return
			}
		}
	}()
}

// scraperToken binds a ServiceAccount of the namespace default to the shipped role of
// metrics scrapers (artifacts/deploy's sample-controller-metrics-reader, installed with
// the shipped RBAC) and returns a token of it.
func scraperToken(ctx context.Context, kube kubernetes.Interface) (string, error) {
	const name = "bench-scraper"
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sample-controller-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: metav1.NamespaceDefault, Name: name}}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault}}
	_, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	if err == nil {
		_, err = kube.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("the scrapers' ServiceAccount: %w", err)
	}
	token, err := kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of the scrapers' ServiceAccount: %w", err)
	}
	return token.Status.Token, nil
}

// peerNames are the controllers a user would pick instead of ours: controller-runtime
// twice, at its defaults and tuned as its documentation shows (workers as ours', a
// cache of only its own Deployments, without managedFields).
var peerNames = []string{"classic", "controller-runtime", "controller-runtime-tuned"}

// peer runs a peer, with the bench's resync where it takes one (the classic one's is
// 30 s already); workers are ours'.
func peer(name, binDir string, workers int) side {
	c := side{Name: name, Binary: filepath.Join(binDir, "peer-"+peerBuild(name)), Peer: true}
	switch name {
	case "classic":
		// Its status has no conditions; at 5 requests a second 10000 Foos take an hour.
		c.AnyStatus, c.MaxFoos = true, 1000
	case "controller-runtime":
		c.Args = []string{"--health-probe-bind-address=0", "--sync-period=" + resync.String()}
	case "controller-runtime-tuned":
		c.Args = []string{"--health-probe-bind-address=0", "--sync-period=" + resync.String(),
			fmt.Sprintf("--max-concurrent-reconciles=%d", workers), "--own-deployments-only", "--strip-managed-fields"}
	}
	return c
}

// peerBuild is what hack/build-peers.sh builds for the peer name.
func peerBuild(name string) string { return strings.TrimSuffix(name, "-tuned") }
