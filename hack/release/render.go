package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// A component of artifacts/deploy/components, as the chart offers it: a value that
// switches it on.
type component struct {
	dir   string // under artifacts/deploy/components
	value string // <value>.enabled in the chart's values
	doc   string // the comment above it in values.yaml
	// without is the dir of the component this one cannot be combined with, if any:
	// hack/deploy.sh and the chart refuse the pair, and the generator renders no
	// set with both.
	without string
}

// possible tells whether the components whose bits are set in set can be combined.
func possible(set uint) bool {
	for i, c := range components {
		if set&(1<<i) == 0 || c.without == "" {
			continue
		}
		j := slices.IndexFunc(components, func(o component) bool { return o.dir == c.without })
		if j >= 0 && set&(1<<j) != 0 {
			return false
		}
	}
	return true
}

// components are in the order hack/deploy.sh lists them in its overlay: cert-manager
// last, because it patches what the others add. A new directory under
// artifacts/deploy/components needs an entry here (the generator refuses to run
// without one), so that the chart never silently lacks a component.
var components = []component{
	{"networkpolicy", "networkPolicy", "A NetworkPolicy for the controller's Pods: Prometheus in on the metrics port,\nthe controller out to the API server, nothing else.", ""},
	{"prometheus", "prometheus", "Monitoring with the Prometheus Operator (monitoring.coreos.com/v1 must be\nserved): a ServiceMonitor that scrapes every replica with a ServiceAccount's token,\nthe alerts in a PrometheusRule, and a Grafana dashboard in a ConfigMap labelled\ngrafana_dashboard: \"1\".", ""},
	{"sharded", "sharded", "Sharded mode (alpha): three replicas, each acting on its share of 16 slots of\nFoos, instead of one leader with standbys. See docs/sharding.md.", ""},
	{"fencing", "fencing", "Fencing the API server enforces (Kubernetes 1.30 or later): a\nValidatingAdmissionPolicy admits the controller's Deployment writes and Foo status\nwrites only from the Pod that holds the leader's Lease. Not with sharded.", "sharded"},
	{"cert-manager", "certManager", "A serving certificate for /metrics from cert-manager (cert-manager.io/v1 must be\nserved), issued by a CA of the controller's own; with prometheus.enabled the\nServiceMonitor verifies it instead of skipping verification.", ""},
}

// objectID names an object of a rendering the way kustomize identifies it.
type objectID struct {
	kind, namespace, name string
}

func (id objectID) String() string {
	if id.namespace == "" {
		return id.kind + "/" + id.name
	}
	return id.kind + "/" + id.namespace + "/" + id.name
}

// rendering is the output of kustomize for one set of components: every object as YAML,
// and the order kustomize gave them in.
type rendering struct {
	order   []objectID
	objects map[objectID]string
}

// artifacts holds artifacts/ in memory, where kustomize renders overlays of it.
type artifacts struct {
	fsys filesys.FileSystem
	// namespace is where artifacts/deploy installs the controller; imageName and
	// imageTag are the image it runs: from its kustomization.
	namespace, imageName, imageTag string
}

// loadArtifacts reads repoRoot/artifacts into memory and checks that every component
// directory has its entry in components.
func loadArtifacts(repoRoot string) (*artifacts, error) {
	a := &artifacts{fsys: filesys.MakeFsInMemory()}
	src := filepath.Join(repoRoot, "artifacts")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return a.fsys.WriteFile(path.Join("/artifacts", filepath.ToSlash(rel)), data)
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", src, err)
	}

	entries, err := os.ReadDir(filepath.Join(src, "deploy", "components"))
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && !slices.ContainsFunc(components, func(c component) bool { return c.dir == e.Name() }) {
			return nil, fmt.Errorf("artifacts/deploy/components/%s has no entry in the chart's components (hack/release/render.go)", e.Name())
		}
	}
	for _, c := range components {
		if c.without != "" && !slices.ContainsFunc(components, func(o component) bool { return o.dir == c.without }) {
			return nil, fmt.Errorf("the chart's component %s is without %q, which is no component", c.value, c.without)
		}
		if !a.fsys.Exists(path.Join("/artifacts/deploy/components", c.dir, "kustomization.yaml")) {
			return nil, fmt.Errorf("the chart's component %s has no artifacts/deploy/components/%s/kustomization.yaml", c.value, c.dir)
		}
	}

	var k struct {
		Namespace string `json:"namespace"`
		Images    []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	data, err := a.fsys.ReadFile("/artifacts/deploy/kustomization.yaml")
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("artifacts/deploy/kustomization.yaml: %w", err)
	}
	if len(k.Images) != 1 || k.Images[0].NewName != "" || k.Images[0].NewTag == "" {
		return nil, fmt.Errorf("artifacts/deploy/kustomization.yaml: want one image with a newTag and no newName, got %+v", k.Images)
	}
	if k.Namespace == "" {
		return nil, fmt.Errorf("artifacts/deploy/kustomization.yaml sets no namespace")
	}
	a.namespace, a.imageName, a.imageTag = k.Namespace, k.Images[0].Name, k.Images[0].NewTag
	return a, nil
}

// render builds artifacts/deploy with the components whose bits are set in set (bit i
// for components[i]), as hack/deploy.sh's overlay would.
func (a *artifacts) render(set uint) (*rendering, error) {
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../artifacts/deploy\n")
	if set != 0 {
		b.WriteString("components:\n")
		for i, c := range components {
			if set&(1<<i) != 0 {
				fmt.Fprintf(&b, "- ../artifacts/deploy/components/%s\n", c.dir)
			}
		}
	}
	return a.build("/overlay", b.String())
}

// renderDir builds one kustomization of artifacts/ as it is, with an image override
// if image is not empty.
func (a *artifacts) renderDir(dir, image string) (*rendering, error) {
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../artifacts/" + dir + "\n"
	if image != "" {
		name, digest, ok := strings.Cut(image, "@")
		if !ok {
			return nil, fmt.Errorf("image %q: want NAME@sha256:DIGEST", image)
		}
		kustomization += fmt.Sprintf("images:\n- name: %s\n  newName: %s\n  digest: %s\n", a.imageName, name, digest)
	}
	return a.build("/"+strings.ReplaceAll(dir, "/", "-")+"-overlay", kustomization)
}

func (a *artifacts) build(dir, kustomization string) (*rendering, error) {
	if err := a.fsys.WriteFile(path.Join(dir, "kustomization.yaml"), []byte(kustomization)); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(a.fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build of\n%s: %w", kustomization, err)
	}
	r := &rendering{objects: map[objectID]string{}}
	for _, res := range m.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		id := objectID{kind: res.GetKind(), namespace: res.GetNamespace(), name: res.GetName()}
		r.order = append(r.order, id)
		r.objects[id] = string(y)
	}
	return r, nil
}
