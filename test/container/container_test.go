//go:build e2e

package container

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/test/container/node"
	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
)

// handoverWithin bounds how long the Lease may take to change hands after the leader's
// container gets SIGTERM: the leader releases it on its way out, the release stands for
// a retry period and a second (the leader's next renewal, had it been alive; the flight
// of a write it gave up on), and the standby retries every --leader-elect-retry-period
// (1 s in the manifest) plus up to 120% jitter: 4.2 s, and the leader's own way out
// before it. A Lease that was not released would take its duration, 15 s.
const handoverWithin = 8 * time.Second

// pod is one replica of the Deployment, run as a kubelet would run it.
type pod struct {
	name      string
	sandbox   *node.PodSandbox
	container *node.Container
	started   time.Time
}

// TestDeploymentUnderRunc runs the image of `make image` under runc as the replicas of
// artifacts/deploy's Deployment, configured from the Deployment the API server holds
// (what the user applied, with the API's defaults): its security context, args, probes
// and resources, a ServiceAccount token at the standard path, and the kubernetes
// Service's environment. Nothing tells the controller where the cluster is but that.
func TestDeploymentUnderRunc(t *testing.T) {
	ctx := t.Context()
	d, err := env.Kube.AppsV1().Deployments(framework.DeployNamespace).Get(ctx, "sample-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podSpec := d.Spec.Template.Spec
	if len(podSpec.Containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(podSpec.Containers))
	}
	c := &podSpec.Containers[0]
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--kubeconfig") || strings.HasPrefix(a, "--master") || strings.HasPrefix(a, "--leader-elect-resource-namespace") {
			t.Fatalf("the manifest passes %s: the container must find the cluster and its namespace in-cluster", a)
		}
	}

	rootfs := filepath.Join(env.OutDir, "rootfs")
	image, err := node.UnpackImage(ctx, env.Cluster.BinDir(), env.ImageArchive, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	network, err := node.StartPodNetwork(ctx, realNode.ServiceRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := network.Close(); err != nil {
			t.Errorf("removing the pod network: %v", err)
		}
	})

	grace := time.Duration(*podSpec.TerminationGracePeriodSeconds) * time.Second
	pods := make([]*pod, *d.Spec.Replicas)
	for i := range pods {
		pods[i] = startPod(t, network, d, image, rootfs, fmt.Sprintf("sample-controller-runc-%d", i))
		p := pods[i]
		t.Cleanup(func() {
			if err := p.container.Stop(grace); err != nil {
				t.Errorf("container %s exited: %v; its log is %s", p.name, err, p.container.LogPath())
			}
		})
	}

	t.Run("the probes answer as the manifest declares", func(t *testing.T) {
		for _, p := range pods {
			framework.Eventually(t, framework.Timeout, p.name+" to pass its readiness probe", func(ctx context.Context) (bool, string) {
				if err := probe(ctx, p.sandbox.IP, c, c.ReadinessProbe); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
			t.Logf("%s: started to Ready (readiness probe passing) in %v; the kubelet sees it at its next probe, within periodSeconds=%d",
				p.name, time.Since(p.started).Round(time.Millisecond), c.ReadinessProbe.PeriodSeconds)
			// The kubelet restarts a container only after failureThreshold liveness
			// probes in a row failed; on two cores shared with two other suites, one
			// can miss its timeout.
			threshold := int(max(c.LivenessProbe.FailureThreshold, 1))
			var failed []error
			for range threshold {
				err := probe(ctx, p.sandbox.IP, c, c.LivenessProbe)
				if err == nil {
					break
				}
				failed = append(failed, err)
			}
			switch n := len(failed); {
			case n == threshold:
				t.Errorf("%s: liveness probe failed %d times in a row, as many as make the kubelet restart it: %v", p.name, n, errors.Join(failed...))
			case n > 0:
				t.Logf("%s: liveness probe passed after %d failed (failureThreshold=%d): %v", p.name, n, threshold, errors.Join(failed...))
			}
		}
	})

	// Once it serves, the controller runs as the runtime left it.
	t.Run("the runtime applied the security context", func(t *testing.T) {
		for _, p := range pods {
			checkConfined(t, p)
		}
	})

	// The Lease is in the Pod's namespace (nothing but the token volume's namespace file
	// says which that is), held by a Pod's hostname, and the Pods reached the apiserver
	// through the kubernetes Service's address only.
	var leader, standby *pod
	t.Run("the in-cluster configuration is used", func(t *testing.T) {
		framework.Eventually(t, framework.Timeout, "a replica to take the Lease in "+framework.DeployNamespace, func(ctx context.Context) (bool, string) {
			holder, err := leaseHolder(ctx)
			if err != nil {
				return false, err.Error()
			}
			for i, p := range pods {
				if strings.HasPrefix(holder, p.name+"_") {
					leader, standby = p, pods[1-i]
					return true, ""
				}
			}
			return false, "holder " + holder
		})
		for _, p := range pods {
			if n := network.RelayedConnections(p.sandbox.IP); n == 0 {
				t.Errorf("%s never connected to the kubernetes Service at %s", p.name, p.sandbox.IP)
			}
		}
	})
	if leader == nil || len(pods) != 2 {
		t.Fatalf("want two replicas and a leader, have %d and %v", len(pods), leader)
	}

	ns := env.NewNamespace(t)
	env.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(env.RepoRoot, "artifacts", "examples", "example-foo.yaml"))
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 1)

	t.Run("SIGTERM hands the Lease over", func(t *testing.T) {
		stopped := time.Now()
		if err := leader.container.Signal(ctx, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, handoverWithin, standby.name+" to hold the Lease", func(ctx context.Context) (bool, string) {
			holder, err := leaseHolder(ctx)
			if err != nil {
				return false, err.Error()
			}
			return strings.HasPrefix(holder, standby.name+"_"), "holder " + holder
		})
		t.Logf("handover: %s held the Lease %v after %s got SIGTERM", standby.name, time.Since(stopped).Round(time.Millisecond), leader.name)

		select {
		case <-leader.container.Exited():
		case <-time.After(grace):
			t.Fatalf("%s still runs %v after SIGTERM", leader.name, grace)
		}
		if err := leader.container.Err(); err != nil {
			t.Errorf("%s exited with %v after SIGTERM, want 0; its log is %s", leader.name, err, leader.container.LogPath())
		}
		t.Logf("%s exited with status 0 within %v of SIGTERM", leader.name, time.Since(stopped).Round(time.Millisecond))
	})

	// The new leader acts: a change to the Foo converges.
	env.Kubectl(t, "patch", "-n", ns, "foo/example-foo", "--type=merge", "-p", `{"spec":{"replicas":2}}`)
	env.WaitFooReady(t, framework.Timeout, ns, "example-foo", 2)
}

// startPod runs one replica: its network, its ServiceAccount token, its container.
func startPod(t *testing.T, network *node.PodNetwork, d *appsv1.Deployment, image node.ImageConfig, rootfs, name string) *pod {
	t.Helper()
	ctx := t.Context()
	podSpec := &d.Spec.Template.Spec
	sandbox, err := network.AddPod(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(env.OutDir, "pods", name)
	token, err := env.ServiceAccountToken(ctx, d.Namespace, podSpec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	serviceAccount, err := node.WriteServiceAccountVolume(filepath.Join(dir, "serviceaccount"), token, env.Cluster.CACert(), d.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{name: name, sandbox: sandbox, started: time.Now()}
	p.container, err = node.StartContainer(ctx, node.ContainerOptions{
		ID:        name,
		Dir:       filepath.Join(dir, "bundle"),
		LogDir:    env.OutDir,
		Rootfs:    rootfs,
		Image:     image,
		Pod:       podSpec,
		Container: &podSpec.Containers[0],
		Hostname:  name,
		PodUID:    string(uuid.NewUUID()),
		NetNS:     sandbox.NetNS,
		Env:       network.ServiceEnv(),
		Mounts:    []specs.Mount{serviceAccount},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkConfined reads what the kernel says of the container's process: its user, its
// capabilities, no_new_privs, seccomp, a read-only root, and an environment and command
// line without a kubeconfig.
func checkConfined(t *testing.T, p *pod) {
	t.Helper()
	pid, err := p.container.Pid(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	for key, want := range map[string]string{
		"Uid":        "65532 65532 65532 65532",
		"Gid":        "65532 65532 65532 65532",
		"CapEff":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"NoNewPrivs": "1",
		"Seccomp":    "2", // a filter
	} {
		if fields[key] != want {
			t.Errorf("%s: %s is %q, want %q", p.name, key, fields[key], want)
		}
	}

	mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	rootReadOnly := false
	for _, line := range strings.Split(string(mountinfo), "\n") {
		// id parent major:minor root mountpoint options ...
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			rootReadOnly = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	if !rootReadOnly {
		t.Errorf("%s: the root file system is writable", p.name)
	}

	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(string(environ), "\x00")
	if !slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "KUBERNETES_SERVICE_HOST=") }) ||
		slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "KUBECONFIG=") }) {
		t.Errorf("%s: environment %q, want the Service's and no KUBECONFIG", p.name, vars)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); args[0] != "/sample-controller" || slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "kubeconfig") }) {
		t.Errorf("%s: command line %q", p.name, args)
	}
}

// probe does what the kubelet does for an httpGet probe: a GET of the container's port
// at the Pod's address within the probe's timeout, passing on a 2xx or 3xx answer.
func probe(ctx context.Context, ip net.IP, c *corev1.Container, p *corev1.Probe) error {
	if p == nil || p.HTTPGet == nil {
		return fmt.Errorf("container %s: want an httpGet probe, have %+v", c.Name, p)
	}
	get := p.HTTPGet
	port := get.Port.IntValue()
	if get.Port.Type == intstr.String {
		i := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == get.Port.StrVal })
		if i < 0 {
			return fmt.Errorf("container %s: the probe's port %q is not one of its ports", c.Name, get.Port.StrVal)
		}
		port = int(c.Ports[i].ContainerPort)
	}
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.TimeoutSeconds)*time.Second)
	defer cancel()
	url := scheme + "://" + net.JoinHostPort(ip.String(), strconv.Itoa(port)) + get.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// leaseHolder is the holder of the controller's Lease in the Pods' namespace: the
// manifest leaves the Lease's name at the controller's default. The group's count Lease
// is beside it.
func leaseHolder(ctx context.Context) (string, error) {
	lease, err := env.Kube.CoordinationV1().Leases(framework.DeployNamespace).Get(ctx, "sample-controller", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}
