// Package framework is what the e2e and fault tests share: a local cluster with
// artifacts/deploy applied as a user applies it, the controller binary under test, and
// helpers that run kubectl, make namespaces and start controllers scoped to one test,
// cleaned up with it.
package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

const (
	// DeployNamespace is where artifacts/deploy installs the controller.
	DeployNamespace = "sample-controller-system"
	// ServiceAccount is the controller's identity in artifacts/deploy.
	ServiceAccount = "sample-controller"

	// ImageArchiveEnv names an OCI archive built by hack/build-image.sh. When it is set,
	// every test runs the binary taken out of that image instead of a fresh build.
	ImageArchiveEnv = "E2E_IMAGE_ARCHIVE"

	// Timeout bounds each wait for the controller and the cluster to converge. Pods on
	// kwok nodes are Running within seconds; the margin is for a loaded CI machine.
	Timeout = 90 * time.Second

	crdName = "foos.samplecontroller.k8s.io"
)

// Env is the cluster and the controller binary every test shares.
type Env struct {
	RepoRoot string
	// Suite names the test suite: its namespaces' prefix and its OutDir.
	Suite string
	// OutDir is _output/<Suite>: the cluster's state and every log, kept for inspection.
	OutDir        string
	KubectlBin    string // the kubectl binary
	HelmBin       string // the helm binary
	ControllerBin string
	// ImageArchive is the OCI archive the binary was taken from (ImageArchiveEnv); empty
	// when the binary was built from the source.
	ImageArchive string
	Kubeconfig   string // the admin's
	// ControllerKubeconfig authenticates as the ServiceAccount of artifacts/deploy, so
	// every test that runs a controller also proves that its RBAC suffices.
	ControllerKubeconfig string

	Cluster *localcluster.Cluster
	Kube    kubernetes.Interface
	Sample  clientset.Interface

	// controllers counts the controllers started, to name their logs.
	controllers atomic.Int64
	// installed is false for a suite that installs the controller its own way
	// (WithoutInstall).
	installed bool
	// afterStart runs once the cluster is up (WithAfterStart); stops, what it started,
	// stop at TearDown, last first.
	afterStart []func(context.Context, *Env) (stop func() error, err error)
	stops      []func() error
}

// Setup gets the controller binary, starts the cluster and installs artifacts/deploy
// with kubectl, for the suite named suite. On error nothing is left running.
func Setup(ctx context.Context, suite string, opts ...SuiteOption) (*Env, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	e := &Env{RepoRoot: root, Suite: suite, OutDir: filepath.Join(root, "_output", suite), installed: true}
	if err := os.RemoveAll(e.OutDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.OutDir, 0o755); err != nil {
		return nil, err
	}
	binDir, err := localcluster.DefaultBinDir()
	if err != nil {
		return nil, err
	}
	e.KubectlBin = filepath.Join(binDir, "kubectl")
	e.HelmBin = filepath.Join(binDir, "helm")

	// The controller comes first: a compile error should not wait for a cluster.
	e.ControllerBin = filepath.Join(e.OutDir, "sample-controller")
	if e.ImageArchive = os.Getenv(ImageArchiveEnv); e.ImageArchive != "" {
		err = extractFromImage(ctx, binDir, e.ImageArchive, e.ControllerBin)
	} else {
		err = localcluster.BuildController(ctx, root, e.ControllerBin)
	}
	if err != nil {
		return nil, err
	}

	clusterOpts := localcluster.Options{Dir: filepath.Join(e.OutDir, "cluster"), BinDir: binDir}
	for _, opt := range opts {
		if err := opt(e, &clusterOpts); err != nil {
			return nil, err
		}
	}
	e.Cluster, err = localcluster.Start(ctx, clusterOpts)
	if err != nil {
		return nil, err
	}
	for _, start := range e.afterStart {
		stop, err := start(ctx, e)
		if err != nil {
			return nil, errors.Join(err, e.TearDown())
		}
		e.stops = append(e.stops, stop)
	}
	if err := e.install(ctx); err != nil {
		return nil, errors.Join(err, e.TearDown())
	}
	return e, nil
}

// SuiteOption changes the suite's cluster before it starts.
type SuiteOption func(*Env, *localcluster.Options) error

// WithAfterStart runs start once the suite's cluster is up, before artifacts/deploy is
// installed, for what a suite adds to its cluster (the container suite, a real node).
// The stop it returns runs at TearDown, before the cluster stops; on an error start
// leaves nothing running.
func WithAfterStart(start func(ctx context.Context, e *Env) (stop func() error, err error)) SuiteOption {
	return func(e *Env, _ *localcluster.Options) error {
		e.afterStart = append(e.afterStart, start)
		return nil
	}
}

// WithoutInstall leaves artifacts/deploy and the CRD out of the suite's cluster, for a
// suite that installs them itself; ControllerKubeconfig is then empty.
func WithoutInstall() SuiteOption {
	return func(e *Env, _ *localcluster.Options) error {
		e.installed = false
		return nil
	}
}

// WithEmulatedVersion makes the suite's control plane behave as the older Kubernetes
// release version, "MAJOR.MINOR" (localcluster.Options.EmulatedVersion).
func WithEmulatedVersion(version string) SuiteOption {
	return func(_ *Env, opts *localcluster.Options) error {
		opts.EmulatedVersion = version
		return nil
	}
}

// install makes the clients, applies artifacts/deploy exactly as a user does, and
// writes the kubeconfig of its ServiceAccount.
func (e *Env) install(ctx context.Context) error {
	e.Kubeconfig = e.Cluster.KubeconfigPath()
	cfg := e.Cluster.RESTConfig()
	var err error
	if e.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if e.Sample, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}
	if !e.installed {
		return nil
	}
	if out, err := e.Deploy(ctx, "apply", ""); err != nil {
		return fmt.Errorf("installing with hack/deploy.sh: %w\n%s", err, out)
	}
	if err := localcluster.WaitCRDsEstablished(ctx, cfg, crdName); err != nil {
		return err
	}
	e.ControllerKubeconfig = filepath.Join(e.OutDir, "controller.kubeconfig")
	return e.WriteServiceAccountKubeconfig(ctx, DeployNamespace, ServiceAccount, e.ControllerKubeconfig)
}

// Deploy runs hack/deploy.sh, as `make deploy` and `make undeploy` do, with action
// (apply or delete), the image (empty for the default) and extra kubectl arguments,
// against the cluster as its admin. Each call writes the script's overlay to a
// directory of its own: the suites run at once and their tests side by side, and an
// overlay shared with another call could be rewritten, with another image, between
// the script writing it and kubectl reading it.
func (e *Env) Deploy(ctx context.Context, action, image string, args ...string) (string, error) {
	dir, err := os.MkdirTemp(e.OutDir, "deploy-overlay-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	env := []string{"OVERLAY_DIR=" + dir}
	if image != "" {
		env = append(env, "IMAGE="+image)
	}
	return e.deployScript(ctx, env, action, args...)
}

// DeployComponents runs hack/deploy.sh as `make deploy COMPONENTS="..."` does, with
// the default image, writing its overlay to overlayDir (under RepoRoot), which the
// test names and keeps for inspection.
func (e *Env) DeployComponents(ctx context.Context, overlayDir string, components []string, action string, args ...string) (string, error) {
	return e.deployScript(ctx, []string{"OVERLAY_DIR=" + overlayDir, "COMPONENTS=" + strings.Join(components, " ")}, action, args...)
}

func (e *Env) deployScript(ctx context.Context, env []string, action string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.RepoRoot, "hack", "deploy.sh"), append([]string{action}, args...)...)
	cmd.Env = append(append(os.Environ(), "KUBECTL="+e.KubectlBin, "KUBECONFIG="+e.Kubeconfig), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TearDown stops what WithAfterStart started, then the cluster, leaving no process
// behind; the tests' controllers are stopped by their own cleanup.
func (e *Env) TearDown() error {
	var errs []error
	for i := len(e.stops) - 1; i >= 0; i-- {
		errs = append(errs, e.stops[i]())
	}
	return errors.Join(append(errs, e.Cluster.Stop())...)
}

// NamespaceWithController creates a namespace for one test and starts a controller
// watching only it (StartController), so that tests can run side by side.
func (e *Env) NamespaceWithController(t *testing.T, args ...string) (string, *localcluster.Controller) {
	t.Helper()
	ns := e.NewNamespace(t)
	return ns, e.StartController(t, ns, args...)
}

// StartController starts the controller as the ServiceAccount of artifacts/deploy,
// watching only ns, with extra flags. It returns once the controller serves its probes
// and stops it when t ends.
func (e *Env) StartController(t *testing.T, ns string, args ...string) *localcluster.Controller {
	t.Helper()
	return e.StartControllerAs(t, e.ControllerKubeconfig, append([]string{"--namespace=" + ns}, args...)...)
}

// StartReadyController is StartController, returning once /readyz says the caches
// have synced.
func (e *Env) StartReadyController(t *testing.T, ns string, args ...string) *localcluster.Controller {
	t.Helper()
	c := e.StartController(t, ns, args...)
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// StartControllerAs starts the controller with kubeconfig and flags, its log in
// OutDir named for the test. It returns once the controller serves its probes and
// stops it when t ends.
func (e *Env) StartControllerAs(t *testing.T, kubeconfig string, args ...string) *localcluster.Controller {
	t.Helper()
	return e.StartControllerWith(t, localcluster.ControllerOptions{Kubeconfig: kubeconfig, Args: args})
}

// controllerLogTail is how many lines of a controller's log a failed test prints.
const controllerLogTail = 60

// StartControllerWith is StartControllerAs with more of the harness's options: the
// log and its name are the suite's, the binary defaults to the suite's and the
// kubeconfig to ControllerKubeconfig.
func (e *Env) StartControllerWith(t *testing.T, opts localcluster.ControllerOptions) *localcluster.Controller {
	t.Helper()
	if opts.Bin == "" {
		opts.Bin = e.ControllerBin
	}
	opts.LogDir = e.OutDir
	opts.Name = fmt.Sprintf("controller-%d-%s", e.controllers.Add(1), strings.ReplaceAll(t.Name(), "/", "_"))
	if opts.Kubeconfig == "" {
		opts.Kubeconfig = e.ControllerKubeconfig
	}
	opts.Args = append([]string{"-v=2"}, opts.Args...)
	c, err := localcluster.StartController(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Stop(localcluster.ControllerStopGrace)
		if t.Failed() {
			// Where a failure in CI shows, which keeps no files.
			t.Logf("last lines of %s:\n%s", c.LogPath(), c.LogTail(controllerLogTail))
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	if err := c.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// KubectlAs runs kubectl with a kubeconfig and stdin, and returns its combined output.
func (e *Env) KubectlAs(ctx context.Context, kubeconfig, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.KubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// HelmRun runs the helm of hack/tools/helm as the admin, with directories of the
// suite's own for its cache and configuration, and returns its combined output.
func (e *Env) HelmRun(ctx context.Context, args ...string) (string, error) {
	home := filepath.Join(e.OutDir, "helm-home")
	cmd := exec.CommandContext(ctx, e.HelmBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig,
		"HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Helm runs helm as the admin and fails the test if it fails.
func (e *Env) Helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.HelmRun(t.Context(), args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// KubectlRun runs kubectl as the admin with stdin, and returns its combined output.
func (e *Env) KubectlRun(ctx context.Context, stdin string, args ...string) (string, error) {
	return e.KubectlAs(ctx, e.Kubeconfig, stdin, args...)
}

// Kubectl runs kubectl as the admin and fails the test if it fails.
func (e *Env) Kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return e.KubectlIn(t, "", args...)
}

// KubectlIn runs kubectl as the admin with stdin and fails the test if it fails.
func (e *Env) KubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := e.KubectlRun(t.Context(), stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// StartCluster starts a control plane of the test's own beside the suite's, as opts
// say, with the suite's binaries and its files (logs included) in OutDir/dir, installs
// the CRD, and stops it when t ends: for a case whose load or flags would disturb the
// suite's other tests.
func (e *Env) StartCluster(t *testing.T, dir string, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	opts.Dir, opts.BinDir = filepath.Join(e.OutDir, dir), e.Cluster.BinDir()
	cluster, err := localcluster.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping the cluster %s: %v", dir, err)
		}
	})
	if err := localcluster.InstallCRD(t.Context(), cluster.RESTConfig(), filepath.Join(e.RepoRoot, "artifacts", "examples", "crd.yaml")); err != nil {
		t.Fatal(err)
	}
	return cluster
}

// NewNamespace creates a namespace for one test and deletes it afterwards.
func (e *Env) NewNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: e.Suite + "-"}}
	ns, err := e.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		err := e.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// Eventually polls cond every 100 ms until it returns true, failing the test with
// cond's last description after timeout.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, state := cond(ctx)
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, last)
	}
}

// WriteServiceAccountKubeconfig writes a kubeconfig that authenticates with a token of
// the ServiceAccount, against the cluster of the admin kubeconfig, with the
// ServiceAccount's namespace as the context's.
func (e *Env) WriteServiceAccountKubeconfig(ctx context.Context, namespace, name, path string) error {
	return WriteServiceAccountKubeconfig(ctx, e.Kube, e.Kubeconfig, namespace, name, path)
}

// WriteServiceAccountKubeconfig is Env.WriteServiceAccountKubeconfig for any cluster:
// kube and adminKubeconfig are its.
func WriteServiceAccountKubeconfig(ctx context.Context, kube kubernetes.Interface, adminKubeconfig, namespace, name, path string) error {
	token, err := ServiceAccountToken(ctx, kube, namespace, name)
	if err != nil {
		return err
	}
	return WriteTokenKubeconfig(adminKubeconfig, namespace, name, token, path)
}

// WriteTokenKubeconfig writes a kubeconfig for the cluster of adminKubeconfig that
// authenticates with token, as user, in namespace.
func WriteTokenKubeconfig(adminKubeconfig, namespace, user, token, path string) error {
	name := user
	admin, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return err
	}
	adminContext := admin.Contexts[admin.CurrentContext]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = admin.Clusters[adminContext.Cluster]
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: namespace}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

// NewServiceAccount creates a ServiceAccount in namespace, named generateName and a
// random suffix, deletes it when t ends, and returns its name.
func (e *Env) NewServiceAccount(t *testing.T, namespace, generateName string) string {
	t.Helper()
	sa, err := e.Kube.CoreV1().ServiceAccounts(namespace).Create(t.Context(), &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a ServiceAccount: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Kube.CoreV1().ServiceAccounts(namespace).Delete(context.Background(), sa.Name, metav1.DeleteOptions{})
	})
	return sa.Name
}

// BindClusterRole binds the ClusterRole to the ServiceAccount namespace/name across
// the cluster, with a ClusterRoleBinding deleted when t ends.
func (e *Env) BindClusterRole(t *testing.T, clusterRole, namespace, name string) {
	t.Helper()
	binding, err := e.Kube.RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding ClusterRole %s to %s/%s: %v", clusterRole, namespace, name, err)
	}
	t.Cleanup(func() {
		_ = e.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
}

// RenderComponent is artifacts/deploy with the component of artifacts/deploy/components
// named component, as kustomize renders it: YAML documents.
func (e *Env) RenderComponent(t *testing.T, component string) string {
	t.Helper()
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(e.RepoRoot, "artifacts", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("resources:\n- %s\ncomponents:\n- %s/components/%s\n", rel, rel, component)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	return e.Kubectl(t, "kustomize", overlay)
}

// Fencing is the fencing component's policy and bindings, as kustomize renders them,
// with nothing of the cluster's in their metadata: to create.
func (e *Env) Fencing(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, doc := range strings.Split(e.RenderComponent(t, "fencing"), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.Unmarshal([]byte(doc), policy); err != nil {
				t.Fatal(err)
			}
		case "ValidatingAdmissionPolicyBinding":
			binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.Unmarshal([]byte(doc), binding); err != nil {
				t.Fatal(err)
			}
			bindings = append(bindings, binding)
		}
	}
	if policy == nil || len(bindings) == 0 {
		t.Fatal("the fencing component renders no ValidatingAdmissionPolicy and bindings")
	}
	return policy, bindings
}

// GrantShardedLeases lets the ServiceAccount of artifacts/deploy use Leases in ns as the
// sharded component of artifacts/deploy lets it in its own namespace: that component's
// Role, as kustomize renders it, bound in ns until t ends with the namespace.
func (e *Env) GrantShardedLeases(t *testing.T, ns string) {
	t.Helper()
	var role *rbacv1.Role
	for _, doc := range strings.Split(e.RenderComponent(t, "sharded"), "\n---\n") {
		var r rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &r); err == nil && r.Kind == "Role" && r.Name == "sample-controller-leader-election" {
			role = &r
		}
	}
	if role == nil {
		t.Fatal("the sharded component renders no Lease Role")
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: role.Name}
	if _, err := e.Kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: DeployNamespace}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// PodTokenKubeconfig writes to path a kubeconfig whose token is the ServiceAccount's of
// pod, bound to pod as the kubelet binds the token it mounts: it authenticates with the
// Pod's name and UID in the user's extra, and only while the Pod exists. It returns a
// client of it, without a client-side rate limit.
func (e *Env) PodTokenKubeconfig(t *testing.T, pod *corev1.Pod, path string) kubernetes.Interface {
	t.Helper()
	token, err := e.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(t.Context(), pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a token bound to Pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	if err := WriteTokenKubeconfig(e.Kubeconfig, pod.Namespace, pod.Spec.ServiceAccountName, token.Status.Token, path); err != nil {
		t.Fatal(err)
	}
	return KubeconfigClient(t, path)
}

// KubeconfigClient is a client of the kubeconfig at path, without a client-side rate
// limit.
func KubeconfigClient(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// ServiceAccountToken returns a new token of the ServiceAccount (TokenRequest), valid
// for a day.
func (e *Env) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	return ServiceAccountToken(ctx, e.Kube, namespace, name)
}

// ServiceAccountToken is Env.ServiceAccountToken for any cluster.
func ServiceAccountToken(ctx context.Context, kube kubernetes.Interface, namespace, name string) (string, error) {
	tokenRequest, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tokenRequest.Status.Token, nil
}

// extractFromImage checks that the image runs its static binary as a non-root user,
// and writes that binary to dest.
func extractFromImage(ctx context.Context, binDir, archive, dest string) error {
	config, err := inspectImage(ctx, binDir, archive, "--extract-entrypoint", dest)
	if err != nil {
		return err
	}
	if uid, _, _ := strings.Cut(config.User, ":"); uid == "" || uid == "0" || uid == "root" {
		return fmt.Errorf("the image runs as %q, want a non-root user", config.User)
	}
	if len(config.Entrypoint) != 1 || config.Entrypoint[0] != "/sample-controller" {
		return fmt.Errorf("the image's entrypoint is %q, want [/sample-controller]", config.Entrypoint)
	}
	klog.FromContext(ctx).Info("Running the controller taken out of the image", "archive", archive, "user", config.User)
	return nil
}

// ExtractController writes the controller binary of an image archive, such as another
// version's, to dest, checking the image as the suite's own.
func (e *Env) ExtractController(ctx context.Context, archive, dest string) error {
	return extractFromImage(ctx, filepath.Dir(e.KubectlBin), archive, dest)
}

// imageConfig is what extractFromImage checks of the config `image inspect` prints.
type imageConfig struct {
	User       string   `json:"user"`
	Entrypoint []string `json:"entrypoint"`
}

// inspectImage runs `image inspect` on the archive, for this machine's platform, with
// more flags, and returns the config it prints.
func inspectImage(ctx context.Context, binDir, archive string, args ...string) (imageConfig, error) {
	var config imageConfig
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "image"), append([]string{"inspect", "--archive", archive}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return config, fmt.Errorf("image inspect %s %s: %w\n%s", archive, strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, &config); err != nil {
		return config, fmt.Errorf("reading the image config: %w\n%s", err, out)
	}
	return config, nil
}

// WaitFooReady waits up to within for the Foo to be Ready at its generation with want
// available replicas, and returns it.
func (e *Env) WaitFooReady(t *testing.T, within time.Duration, ns, name string, want int32) *samplev1alpha1.Foo {
	t.Helper()
	return WaitFooReadyWith(t, e.Sample, within, ns, name, want)
}

// WaitFooReadyWith is WaitFooReady reading through client: one of a test's own, whose
// requests take nothing from the rate limit the suite's tests share.
func WaitFooReadyWith(t *testing.T, client clientset.Interface, within time.Duration, ns, name string, want int32) *samplev1alpha1.Foo {
	t.Helper()
	var foo *samplev1alpha1.Foo
	Eventually(t, within, fmt.Sprintf("Foo %s/%s to be Ready with %d available replicas", ns, name, want), func(ctx context.Context) (bool, string) {
		var err error
		foo, err = client.SamplecontrollerV1alpha1().Foos(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
		ok := foo.Status.ObservedGeneration == foo.Generation && ready != nil && ready.Status == metav1.ConditionTrue &&
			ready.ObservedGeneration == foo.Generation && foo.Status.AvailableReplicas == want
		return ok, fmt.Sprintf("generation %d, status %+v", foo.Generation, foo.Status)
	})
	return foo
}

// RunSuite is a suite's TestMain: it sets up the suite's cluster into *env, runs the
// tests, tears the cluster down, and returns the exit code. Setup may take up to five
// minutes, most of it the first build of the controller.
func RunSuite(m *testing.M, suite string, env **Env, opts ...SuiteOption) int {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := Setup(ctx, suite, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: setting up: %v\n", suite, err)
		return 1
	}
	*env = e
	defer func() {
		if err := e.TearDown(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopping the cluster: %v\n", suite, err)
		}
	}()
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s: the logs of the cluster, the controllers and any API proxies are in %s\n", suite, e.OutDir)
	}
	return code
}
