package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

var testImage = ImageConfig{User: "65532:65532", Entrypoint: []string{"/sample-controller"}, Env: []string{"PATH=/", "A=image"}}

// deployedPod is the Pod template of artifacts/deploy's Deployment, as a user applies it.
func deployedPod(t *testing.T) *corev1.PodSpec {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "artifacts", "deploy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatal(err)
	}
	return &d.Spec.Template.Spec
}

func TestContainerSpecOfTheDeployment(t *testing.T) {
	pod := deployedPod(t)
	c := &pod.Containers[0]
	c.TerminationMessagePath = "/dev/termination-log" // the API server's default
	sa := specs.Mount{Destination: ServiceAccountMountPath, Type: "bind", Source: "/sa", Options: []string{"rbind", "ro"}}
	spec, err := ContainerSpec(ContainerOptions{
		ID: "c1", Dir: "/bundle", Rootfs: "/rootfs", Image: testImage, Pod: pod, Container: c,
		Hostname: "pod-1", PodUID: "pod-1-uid", NetNS: "/var/run/netns/pod-1", Env: []string{"KUBERNETES_SERVICE_HOST=10.0.0.1", "A=kubelet"},
		Mounts: []specs.Mount{sa},
	})
	if err != nil {
		t.Fatal(err)
	}

	p := spec.Process
	if want := append([]string{"/sample-controller"}, c.Args...); !slices.Equal(p.Args, want) {
		t.Errorf("args %q, want the entrypoint and the manifest's args %q", p.Args, want)
	}
	if p.User.UID != 65532 || p.User.GID != 65532 {
		t.Errorf("user %d:%d, want 65532:65532", p.User.UID, p.User.GID)
	}
	if !spec.Root.Readonly || spec.Root.Path != "/rootfs" {
		t.Errorf("root %+v, want /rootfs read-only", spec.Root)
	}
	if !p.NoNewPrivileges {
		t.Error("no_new_privs is off; allowPrivilegeEscalation: false asks for it")
	}
	if caps := p.Capabilities; len(caps.Bounding)+len(caps.Effective)+len(caps.Permitted)+len(caps.Inheritable)+len(caps.Ambient) > 0 {
		t.Errorf("capabilities %+v, want none: the manifest drops ALL", caps)
	}
	if s := spec.Linux.Seccomp; s == nil || s.DefaultAction != specs.ActErrno || len(s.Syscalls) == 0 {
		t.Errorf("seccomp %+v, want the runtime's default allow list", s)
	}
	if !slices.Contains(p.Env, "A=kubelet") || slices.Contains(p.Env, "A=image") || !slices.Contains(p.Env, "KUBERNETES_SERVICE_HOST=10.0.0.1") {
		t.Errorf("env %q, want the kubelet's variables over the image's", p.Env)
	}
	// The manifest names the replica after its Pod, from the downward API.
	if !slices.Contains(p.Env, "POD_NAME=pod-1") || !slices.Contains(p.Env, "POD_UID=pod-1-uid") {
		t.Errorf("env %q, want POD_NAME and POD_UID from the Pod", p.Env)
	}
	// And the container's memory limit, in bytes, for the Go runtime's.
	if limit := c.Resources.Limits.Memory().Value(); !slices.Contains(p.Env, fmt.Sprintf("MEMORY_LIMIT=%d", limit)) {
		t.Errorf("env %q, want MEMORY_LIMIT=%d, the container's memory limit", p.Env, limit)
	}
	if spec.Hostname != "pod-1" {
		t.Errorf("hostname %q, want the Pod's name", spec.Hostname)
	}
	r := spec.Linux.Resources
	if r.Memory == nil || *r.Memory.Limit != 256<<20 {
		t.Errorf("memory %+v, want the 256Mi limit", r.Memory)
	}
	if r.CPU == nil || *r.CPU.Quota != 100000 || *r.CPU.Period != 100000 || *r.CPU.Shares != 102 {
		t.Errorf("cpu %+v, want one CPU of quota and the shares of 100m", r.CPU)
	}
	netns := slices.IndexFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.NetworkNamespace })
	if netns < 0 || spec.Linux.Namespaces[netns].Path != "/var/run/netns/pod-1" {
		t.Errorf("namespaces %+v, want the Pod's network namespace", spec.Linux.Namespaces)
	}
	if !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool {
		return m.Destination == ServiceAccountMountPath && slices.Contains(m.Options, "ro")
	}) {
		t.Error("no read-only ServiceAccount mount")
	}
	if !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool {
		return m.Destination == "/dev/termination-log" && m.Source == "/bundle/termination-log"
	}) {
		t.Error("no termination-log mount")
	}
}

func TestContainerSpecFollowsTheKubelet(t *testing.T) {
	base := func() (*corev1.PodSpec, *corev1.Container) {
		pod := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}
		return pod, &pod.Containers[0]
	}
	t.Run("command replaces entrypoint and cmd, args replace cmd", func(t *testing.T) {
		image := ImageConfig{Entrypoint: []string{"/entry"}, Cmd: []string{"--cmd"}}
		for _, tc := range []struct {
			command, args, want []string
		}{
			{nil, nil, []string{"/entry", "--cmd"}},
			{nil, []string{"--a"}, []string{"/entry", "--a"}},
			{[]string{"/other"}, nil, []string{"/other"}},
			{[]string{"/other"}, []string{"--a"}, []string{"/other", "--a"}},
		} {
			pod, c := base()
			c.Command, c.Args = tc.command, tc.args
			spec, err := ContainerSpec(ContainerOptions{Image: image, Pod: pod, Container: c})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(spec.Process.Args, tc.want) {
				t.Errorf("command %q args %q: ran %q, want %q", tc.command, tc.args, spec.Process.Args, tc.want)
			}
		}
	})
	t.Run("container's user wins over the Pod's and the image's", func(t *testing.T) {
		pod, c := base()
		pod.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000)}
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](3000)}
		spec, err := ContainerSpec(ContainerOptions{Image: testImage, Pod: pod, Container: c})
		if err != nil {
			t.Fatal(err)
		}
		if u := spec.Process.User; u.UID != 3000 || u.GID != 1000 || !slices.Equal(u.AdditionalGids, []uint32{2000}) {
			t.Errorf("user %+v, want 3000:1000 with fsGroup 2000", u)
		}
	})
	t.Run("root keeps the default capabilities less the dropped ones", func(t *testing.T) {
		pod, c := base()
		c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}, Add: []corev1.Capability{"SYS_TIME"}}}
		spec, err := ContainerSpec(ContainerOptions{Image: ImageConfig{Entrypoint: []string{"/x"}}, Pod: pod, Container: c})
		if err != nil {
			t.Fatal(err)
		}
		caps := spec.Process.Capabilities
		if slices.Contains(caps.Effective, "CAP_NET_RAW") || !slices.Contains(caps.Effective, "CAP_SYS_TIME") || !slices.Contains(caps.Bounding, "CAP_CHOWN") {
			t.Errorf("capabilities %+v", caps)
		}
		if spec.Linux.Seccomp != nil || spec.Process.NoNewPrivileges || spec.Root.Readonly {
			t.Error("seccomp, no_new_privs or a read-only root without the manifest asking")
		}
	})

	refused := []struct {
		name   string
		change func(*corev1.PodSpec, *corev1.Container)
		image  ImageConfig
		want   string
	}{
		{"runAsNonRoot with a root image", func(p *corev1.PodSpec, _ *corev1.Container) {
			p.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
		}, ImageConfig{Entrypoint: []string{"/x"}}, "runAsNonRoot"},
		{"a named image user", nil, ImageConfig{User: "nobody", Entrypoint: []string{"/x"}}, "not numeric"},
		{"privileged", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, testImage, "privileged"},
		{"a volume", func(p *corev1.PodSpec, _ *corev1.Container) {
			p.Volumes = []corev1.Volume{{Name: "v"}}
		}, testImage, "volumes"},
		{"a Localhost seccomp profile", func(p *corev1.PodSpec, _ *corev1.Container) {
			p.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}
		}, testImage, "Localhost"},
		{"env from a Secret", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{}}}
		}, testImage, "valueFrom"},
		{"env from a limit the container does not set", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}}}
		}, testImage, "does not set"},
		{"$(VAR) in an argument", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.Args = []string{"--x=$(X)"}
		}, testImage, "expansion"},
		{"nothing to run", nil, ImageConfig{User: "1"}, "what to run"},
	}
	for _, tc := range refused {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			pod, c := base()
			if tc.change != nil {
				tc.change(pod, c)
			}
			_, err := ContainerSpec(ContainerOptions{Image: tc.image, Pod: pod, Container: c})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ContainerSpec = %v, want an error about %q", err, tc.want)
			}
		})
	}
}
