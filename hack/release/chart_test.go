package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestDiffLines(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"equal", "a b c", "a b c"},
		{"insert at the start", "b c", "a b c"},
		{"insert at the end", "a b", "a b c"},
		{"replace in the middle", "a x c", "a y c"},
		{"delete", "a b c d", "a d"},
		{"everything new", "a b", "c d e"},
		{"from nothing", "", "a b"},
		{"to nothing", "a b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := strings.Fields(tc.a), strings.Fields(tc.b)
			hunks := diffLines(a, b)
			if got := patch(a, hunks); !slices.Equal(got, b) {
				t.Errorf("patch(%q, %+v) = %q, want %q", a, hunks, got, b)
			}
			if tc.a == tc.b && len(hunks) != 0 {
				t.Errorf("equal texts gave hunks %+v", hunks)
			}
		})
	}
}

// helmBinary is the helm of hack/tools/helm, as hack/build-tools.sh builds it.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), "_output", "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no helm at %s (run make tools, or set HELM): %v", bin, err)
	}
	return bin
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func helm(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The committed chart (hack/verify-codegen.sh keeps it fresh), as users get it.
func chartDir(t *testing.T) string {
	return filepath.Join(repoRoot(t), "artifacts", "chart", chartName)
}

func TestChartLints(t *testing.T) {
	var all []string
	for _, c := range components {
		all = append(all, "--set", c.value+".enabled=true")
	}
	for _, values := range [][]string{nil, all} {
		if out, err := helm(t.Context(), t, append([]string{"lint", "--strict", chartDir(t)}, values...)...); err != nil {
			t.Errorf("helm lint --strict %q: %v\n%s", values, err, out)
		}
	}
}

// TestChartIsKustomize renders the chart with every combination of its components, as
// helm template does, and checks that it gives the objects kustomize gives for
// artifacts/examples and artifacts/deploy with the same components, but the namespace:
// the chart cannot install anything that hack/deploy.sh would not.
func TestChartIsKustomize(t *testing.T) {
	a, err := loadArtifacts(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := a.renderDir("examples", "")
	if err != nil {
		t.Fatal(err)
	}
	for set := range uint(1 << len(components)) {
		var names []string
		args := []string{"template", "rel", chartDir(t), "--include-crds", "--namespace", a.namespace}
		for i, c := range components {
			on := set&(1<<i) != 0
			args = append(args, "--set", fmt.Sprintf("%s.enabled=%t", c.value, on))
			if on {
				names = append(names, c.dir)
			}
		}
		t.Run("components="+strings.Join(names, ","), func(t *testing.T) {
			out, err := helm(t.Context(), t, args...)
			if !possible(set) {
				if err == nil || !strings.Contains(out, "cannot be combined") {
					t.Fatalf("helm %q: err = %v, output:\n%s\nwant a refusal of the combination", args, err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("helm %q: %v\n%s", args, err, out)
			}
			got := parseObjects(t, out)
			deploy, err := a.render(set)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]map[string]any{}
			for _, r := range []*rendering{examples, deploy} {
				for id, y := range r.objects {
					// The release's namespace is helm's to create, not the chart's.
					if id.kind != "Namespace" || id.name != a.namespace {
						want[id.String()] = parseObject(t, y)
					}
				}
			}
			for id, w := range want {
				g, ok := got[id]
				if !ok {
					t.Errorf("the chart lacks %s", id)
					continue
				}
				if !reflect.DeepEqual(g, w) {
					gy, _ := yaml.Marshal(g)
					wy, _ := yaml.Marshal(w)
					t.Errorf("%s differs from kustomize's:\n%s\nwant\n%s", id, gy, wy)
				}
			}
			for id := range got {
				if _, ok := want[id]; !ok {
					t.Errorf("the chart has %s, which kustomize does not", id)
				}
			}
		})
	}
}

// TestChartValues checks what the chart adds to kustomize: the image by digest or
// tag, and values it does not know refused, not ignored.
func TestChartValues(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		values []string
		want   string // in the output; empty for a refusal
	}{
		{"the tag defaults to the appVersion", nil, "image: sample-controller:v"},
		{"a tag", []string{"image.repository=registry.example/sc", "image.tag=v9"}, "image: registry.example/sc:v9\n"},
		{"a digest wins over the tag", []string{"image.repository=registry.example/sc", "image.tag=v9", "image.digest=" + digest}, "image: registry.example/sc@" + digest + "\n"},
		{"a misspelt component", []string{"promethues.enabled=true"}, ""},
		{"a digest that is not one", []string{"image.digest=latest"}, ""},
		{"no repository", []string{"image.repository="}, ""},
		{"the namespace is not the chart's", []string{"namespace.create=true"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "rel", chartDir(t), "--namespace", "ns"}
			for _, v := range tc.values {
				args = append(args, "--set", v)
			}
			out, err := helm(t.Context(), t, args...)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("helm %q was accepted:\n%s", args, out)
			case tc.want == "" && !strings.Contains(out, "values don't meet the specifications of the schema"):
				t.Errorf("helm %q failed, but not on the schema: %v\n%s", args, err, out)
			case tc.want != "" && err != nil:
				t.Errorf("helm %q: %v\n%s", args, err, out)
			case tc.want != "" && !strings.Contains(out, tc.want):
				t.Errorf("helm %q does not give %q:\n%s", args, tc.want, out)
			}
		})
	}
}

// parseObjects reads helm template's output into objects by kind, namespace and name.
func parseObjects(t *testing.T, out string) map[string]map[string]any {
	t.Helper()
	objects := map[string]map[string]any{}
	for _, doc := range strings.Split(out, "\n---\n") {
		o := parseObject(t, doc)
		if len(o) == 0 {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		kind, _ := o["kind"].(string)
		id := objectID{kind: kind, namespace: ns, name: name}.String()
		if _, dup := objects[id]; dup {
			t.Errorf("the chart renders %s twice", id)
		}
		objects[id] = o
	}
	return objects
}

func parseObject(t *testing.T, doc string) map[string]any {
	t.Helper()
	var o map[string]any
	if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
		t.Fatalf("%v:\n%s", err, doc)
	}
	return o
}

// TestTemplateRefusesTrimmedWhitespace: a template action's "{{-" would eat a blank
// line, or trailing spaces, before it, so the generator refuses such a text rather
// than write a chart that drops them.
func TestTemplateRefusesTrimmedWhitespace(t *testing.T) {
	id := objectID{kind: "ConfigMap", name: "c"}
	for _, tc := range []struct {
		name, without, with string
		refused             bool
	}{
		{"a change after a line", "a: 1\nb: 1\n", "a: 1\nb: 2\n", false},
		{"a change after a blank line", "a: |\n  x\n\nb: 1\n", "a: |\n  x\n\nb: 2\n", true},
		{"a change after trailing spaces", "a: x  \nb: 1\n", "a: x  \nb: 2\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			renderings := []*rendering{
				{order: []objectID{id}, objects: map[objectID]string{id: tc.without}},
				{order: []objectID{id}, objects: map[objectID]string{id: tc.with}},
			}
			_, err := (&artifacts{}).template(id, renderings, 1)
			if (err != nil) != tc.refused {
				t.Errorf("template: %v, want refused: %v", err, tc.refused)
			}
		})
	}
}
