// The OCI runtime configuration of a Pod's container, as a CRI runtime would write it
// from the Pod's spec: what the runc containers run with.

package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// ImageConfig is what a container runtime takes from an image's config; `image inspect`
// prints it.
type ImageConfig struct {
	User       string   `json:"user"`
	Entrypoint []string `json:"entrypoint"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
}

// UnpackImage unpacks the file system of an OCI archive (`make image`'s) into dir, for a
// container's Rootfs, and returns the image's config. It runs `image inspect`, the tool
// hack/build-image.sh builds into binDir.
func UnpackImage(ctx context.Context, binDir, archive, dir string) (ImageConfig, error) {
	var config ImageConfig
	args := []string{"inspect", "--archive", archive, "--rootfs", dir}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "image"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return config, fmt.Errorf("image %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, &config); err != nil {
		return config, fmt.Errorf("reading the image config: %w\n%s", err, out)
	}
	return config, nil
}

// ContainerOptions is one container of a Pod, as the kubelet hands it to a runtime: the
// Pod's spec and the container's, the image, and what the Pod provides around them.
type ContainerOptions struct {
	// ID names the container for runc and its log: <LogDir>/<ID>.log.
	ID string
	// Dir is the bundle: config.json goes there.
	Dir    string
	LogDir string

	// Rootfs is the image's file system, unpacked (`image inspect --rootfs`).
	Rootfs    string
	Image     ImageConfig
	Pod       *corev1.PodSpec
	Container *corev1.Container

	// Hostname is the Pod's name, as the kubelet sets it.
	Hostname string
	// PodUID is the Pod's UID, for the downward API's metadata.uid.
	PodUID string
	// NetNS is the path of the Pod's network namespace; empty means a new one with
	// loopback only.
	NetNS string
	// Env is what the kubelet adds to the container's own: the Service variables.
	Env []string
	// Mounts are the Pod's volumes, resolved to host paths (the ServiceAccount token).
	Mounts []specs.Mount
}

// defaultCapabilities are what containerd and CRI-O give a container before its
// securityContext adds or drops any.
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// ContainerSpec is the OCI runtime configuration that a CRI runtime would give the
// container: its command, environment, user and groups, capabilities, no_new_privs,
// seccomp profile, read-only root, cgroup limits and the Pod's namespaces. It refuses
// any part of the Pod it does not translate, so that a test running its result cannot
// pass by having ignored part of the manifest.
func ContainerSpec(opts ContainerOptions) (*specs.Spec, error) {
	pod, c := opts.Pod, opts.Container
	if pod == nil || c == nil {
		return nil, errors.New("a container needs its Pod's spec and its own")
	}
	if err := refuseUntranslated(pod, c); err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}

	args, err := containerArgs(opts.Image, c)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	user, err := containerUser(opts.Image.User, psc, csc)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	caps, err := capabilitySet(csc.Capabilities)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	// A process that is not root keeps only the bounding set across execve; runtimes
	// leave the others empty for it.
	processCaps := &specs.LinuxCapabilities{Bounding: caps, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}}
	if user.UID == 0 {
		processCaps.Effective, processCaps.Permitted = caps, caps
	}
	cwd := opts.Image.WorkingDir
	if c.WorkingDir != "" {
		cwd = c.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}

	spec := &specs.Spec{
		Version:  specs.Version,
		Hostname: opts.Hostname,
		Root:     &specs.Root{Path: opts.Rootfs, Readonly: csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem},
		Process: &specs.Process{
			Args:            args,
			Env:             mergeEnv(opts.Image.Env, opts.Env, containerEnv(c, opts)),
			Cwd:             cwd,
			User:            user,
			Capabilities:    processCaps,
			NoNewPrivileges: csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation,
		},
		Mounts: append(defaultMounts(), opts.Mounts...),
		Linux: &specs.Linux{
			CgroupsPath: "/localcluster/" + opts.ID,
			Resources:   containerResources(c.Resources),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: opts.NetNS},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
			},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if p := c.TerminationMessagePath; p != "" {
		// The kubelet always mounts a writable file there, read-only root or not.
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: p, Type: "bind", Source: opts.Dir + "/termination-log", Options: []string{"rbind", "rw"}})
	}

	profile := csc.SeccompProfile
	if profile == nil {
		profile = psc.SeccompProfile
	}
	switch {
	case profile == nil || profile.Type == corev1.SeccompProfileTypeUnconfined:
		// The kubelet's default without the SeccompDefault feature: no filter.
	case profile.Type == corev1.SeccompProfileTypeRuntimeDefault:
		// The profile Docker, containerd and CRI-O ship, relaxed only for capabilities
		// the container holds; it is computed from spec, so capabilities come first.
		if spec.Linux.Seccomp, err = seccomp.GetDefaultProfile(spec); err != nil {
			return nil, fmt.Errorf("container %s: the runtime's default seccomp profile: %w", c.Name, err)
		}
	default:
		return nil, fmt.Errorf("container %s: seccomp profile type %s is not translated", c.Name, profile.Type)
	}
	return spec, nil
}

// refuseUntranslated names the first part of the Pod that ContainerSpec does not
// turn into runtime configuration.
func refuseUntranslated(pod *corev1.PodSpec, c *corev1.Container) error {
	csc := c.SecurityContext
	switch {
	case len(pod.Volumes) > 0 || len(c.VolumeMounts) > 0:
		return errors.New("volumes other than the ServiceAccount token are not translated")
	case len(c.EnvFrom) > 0:
		return errors.New("envFrom is not translated")
	case pod.HostNetwork || pod.HostPID || pod.HostIPC:
		return errors.New("host namespaces are not translated")
	case csc != nil && csc.Privileged != nil && *csc.Privileged:
		return errors.New("privileged containers are not translated")
	case csc != nil && (csc.SELinuxOptions != nil || csc.AppArmorProfile != nil || csc.ProcMount != nil || csc.WindowsOptions != nil):
		return errors.New("SELinux, AppArmor, procMount and Windows options are not translated")
	case pod.SecurityContext != nil && (pod.SecurityContext.SELinuxOptions != nil || pod.SecurityContext.AppArmorProfile != nil || len(pod.SecurityContext.Sysctls) > 0):
		return errors.New("the Pod's SELinux, AppArmor and sysctl options are not translated")
	}
	for _, e := range c.Env {
		switch from := e.ValueFrom; {
		case from == nil:
		case from.ResourceFieldRef != nil:
			if _, err := resourceFieldValue(c, from.ResourceFieldRef); err != nil {
				return fmt.Errorf("env %s: %w", e.Name, err)
			}
		case from.FieldRef == nil || downwardFields[from.FieldRef.FieldPath] == nil:
			return fmt.Errorf("env %s: valueFrom other than the fieldRefs %v and the container's resources is not translated", e.Name, slices.Sorted(maps.Keys(downwardFields)))
		}
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		if strings.Contains(a, "$(") {
			return fmt.Errorf("argument %q: $(VAR) expansion is not translated", a)
		}
	}
	return nil
}

// containerArgs follows the kubelet: command replaces the image's entrypoint (and drops
// its cmd), args replace the cmd.
func containerArgs(image ImageConfig, c *corev1.Container) ([]string, error) {
	entrypoint, cmd := image.Entrypoint, image.Cmd
	if len(c.Command) > 0 {
		entrypoint, cmd = c.Command, nil
	}
	if len(c.Args) > 0 {
		cmd = c.Args
	}
	args := append(slices.Clone(entrypoint), cmd...)
	if len(args) == 0 {
		return nil, errors.New("neither the image nor the container says what to run")
	}
	return args, nil
}

// containerUser resolves the user as the kubelet and the runtime do: the container's
// runAsUser/runAsGroup, else the Pod's, else the image's numeric user. runAsNonRoot is
// checked on the result.
func containerUser(imageUser string, psc *corev1.PodSecurityContext, csc *corev1.SecurityContext) (specs.User, error) {
	var user specs.User
	uidText, gidText, _ := strings.Cut(imageUser, ":")
	uid, gid, uidKnown := int64(0), int64(0), imageUser == ""
	if uidText != "" {
		n, err := strconv.ParseInt(uidText, 10, 32)
		uid, uidKnown = n, err == nil
	}
	if gidText != "" {
		n, err := strconv.ParseInt(gidText, 10, 32)
		if err != nil {
			return user, fmt.Errorf("the image's group %q is not numeric", gidText)
		}
		gid = n
	}
	for _, v := range []*int64{psc.RunAsUser, csc.RunAsUser} {
		if v != nil {
			uid, uidKnown = *v, true
		}
	}
	for _, v := range []*int64{psc.RunAsGroup, csc.RunAsGroup} {
		if v != nil {
			gid = *v
		}
	}
	if !uidKnown {
		return user, fmt.Errorf("the image's user %q is not numeric and no runAsUser is set", imageUser)
	}
	nonRoot := psc.RunAsNonRoot
	if csc.RunAsNonRoot != nil {
		nonRoot = csc.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		return user, errors.New("runAsNonRoot is set and the container would run as root (uid 0)")
	}
	user.UID, user.GID = uint32(uid), uint32(gid)
	for _, g := range psc.SupplementalGroups {
		user.AdditionalGids = append(user.AdditionalGids, uint32(g))
	}
	if psc.FSGroup != nil {
		user.AdditionalGids = append(user.AdditionalGids, uint32(*psc.FSGroup))
	}
	return user, nil
}

// capabilitySet is the runtime's default set with the securityContext's drops and adds.
func capabilitySet(caps *corev1.Capabilities) ([]string, error) {
	set := slices.Clone(defaultCapabilities)
	if caps == nil {
		return set, nil
	}
	for _, d := range caps.Drop {
		if strings.EqualFold(string(d), "ALL") {
			set = []string{}
			continue
		}
		set = slices.DeleteFunc(set, func(c string) bool { return c == "CAP_"+strings.ToUpper(string(d)) })
	}
	for _, a := range caps.Add {
		if strings.EqualFold(string(a), "ALL") {
			return nil, errors.New("adding ALL capabilities is not translated")
		}
		if name := "CAP_" + strings.ToUpper(string(a)); !slices.Contains(set, name) {
			set = append(set, name)
		}
	}
	return set, nil
}

// downwardFields are the Pod's fields that env may take from the downward API, as the
// kubelet fills them in.
var downwardFields = map[string]func(ContainerOptions) string{
	"metadata.name": func(o ContainerOptions) string { return o.Hostname },
	"metadata.uid":  func(o ContainerOptions) string { return o.PodUID },
}

// resourceFieldValue is what the kubelet puts in an env variable from ref: the
// container's own request or limit, in units of the divisor (1 when unset), rounded up.
// A limit the container does not set (the kubelet would give the node's allocatable)
// and another container's resources are not translated.
func resourceFieldValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		return "", fmt.Errorf("the resources of container %q are not translated", ref.ContainerName)
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	list := map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests}[kind]
	q, ok := list[corev1.ResourceName(name)]
	if !ok || (name != "cpu" && name != "memory") {
		return "", fmt.Errorf("resource %q, which the container does not set, is not translated", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == "cpu" {
		return strconv.FormatInt((q.MilliValue()+divisor.MilliValue()-1)/divisor.MilliValue(), 10), nil
	}
	return strconv.FormatInt((q.Value()+divisor.Value()-1)/divisor.Value(), 10), nil
}

// containerEnv is the container's own env, in the KEY=value form, the downward API's
// fields filled in.
func containerEnv(c *corev1.Container, opts ContainerOptions) []string {
	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		value := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			if field := downwardFields[e.ValueFrom.FieldRef.FieldPath]; field != nil {
				value = field(opts)
			}
		}
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			value, _ = resourceFieldValue(c, e.ValueFrom.ResourceFieldRef) // checked by refuseUntranslated
		}
		env = append(env, e.Name+"="+value)
	}
	return env
}

// mergeEnv joins environments, a later one's variable replacing an earlier one's in
// place.
func mergeEnv(envs ...[]string) []string {
	var merged []string
	at := map[string]int{}
	for _, env := range envs {
		for _, kv := range env {
			key, _, _ := strings.Cut(kv, "=")
			if i, ok := at[key]; ok {
				merged[i] = kv
				continue
			}
			at[key] = len(merged)
			merged = append(merged, kv)
		}
	}
	return merged
}

// containerResources are the cgroup settings the kubelet asks for: a memory limit, a CFS
// quota from the CPU limit, and CPU shares from the request.
func containerResources(r corev1.ResourceRequirements) *specs.LinuxResources {
	res := &specs.LinuxResources{}
	if mem, ok := r.Limits[corev1.ResourceMemory]; ok {
		res.Memory = &specs.LinuxMemory{Limit: ptr.To(mem.Value())}
	}
	cpu := &specs.LinuxCPU{}
	if limit, ok := r.Limits[corev1.ResourceCPU]; ok {
		const period = 100000
		cpu.Period = ptr.To[uint64](period)
		cpu.Quota = ptr.To(limit.MilliValue() * period / 1000)
	}
	if request, ok := r.Requests[corev1.ResourceCPU]; ok {
		cpu.Shares = ptr.To(max(uint64(request.MilliValue())*1024/1000, 2))
	}
	if cpu.Period != nil || cpu.Shares != nil {
		res.CPU = cpu
	}
	return res
}

// defaultMounts are the file systems every container has.
func defaultMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
}
