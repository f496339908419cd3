package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
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
// artifacts/examples and artifacts/deploy with the same components, but the namespace
// (and the chart's test, which helm test alone creates), and with the CRD kept on
// uninstall: the chart cannot install anything that hack/deploy.sh would not.
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
		args := []string{"template", "rel", chartDir(t), "--skip-tests", "--namespace", a.namespace}
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
			// The CRD is never deleted.
			for id := range examples.objects {
				annotations := want[id.String()]["metadata"].(map[string]any)["annotations"].(map[string]any)
				annotations["helm.sh/resource-policy"] = "keep"
				annotations["argocd.argoproj.io/sync-options"] = "Prune=false,Delete=false"
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
		{"replicas that are not a number", []string{"replicas=two"}, ""},
		{"negative workers", []string{"workers=-1"}, ""},
		{"a log format the controller lacks", []string{"logging.format=xml"}, ""},
		{"a Lease duration without a unit", []string{"leaderElection.leaseDuration=15"}, ""},
		{"a scrape interval that is not one", []string{"prometheus.interval=often"}, ""},
		{"a pull secret without a name", []string{"imagePullSecrets[0].nam=x"}, ""},
		{"a misspelt resource", []string{"resources.limit.cpu=2"}, ""},
		{"the CRD by default, kept", nil, "    helm.sh/resource-policy: keep\n"},
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

// TestChartValuesRender installs, as helm template renders it, the chart with every
// value it adds to kustomize's set, and checks that each reaches its object.
func TestChartValuesRender(t *testing.T) {
	values := `
replicas: 0
resources: {limits: {cpu: "2", memory: 1Gi}, requests: {cpu: 200m, memory: 512Mi}}
logging: {format: json, verbosity: 3}
workers: 8
leaderElection: {leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}
extraArgs: ["--kube-api-qps=50", "--namespace=team-a"]
nodeSelector: {node-role.example/controllers: "true"}
tolerations: [{key: dedicated, operator: Equal, value: controllers, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]}}}
topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app.kubernetes.io/name: sample-controller}}}]
priorityClassName: system-cluster-critical
imagePullSecrets: [{name: registry}]
podAnnotations: {example.com/team: a}
podLabels: {team: a}
prometheus: {enabled: true, labels: {release: kube-prometheus-stack}, interval: 15s}
`
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t.Context(), t, "template", "rel", chartDir(t), "--namespace", "ns", "-f", file)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objects := parseObjects(t, out)
	var set map[string]any
	if err := yaml.Unmarshal([]byte(values), &set); err != nil {
		t.Fatal(err)
	}
	deployment := objects["Deployment/ns/sample-controller"]
	pod := dig(t, deployment, "spec", "template", "spec").(map[string]any)
	container := dig(t, pod, "containers").([]any)[0]
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"replicas", dig(t, deployment, "spec", "replicas"), set["replicas"]},
		{"resources", dig(t, container, "resources"), set["resources"]},
		{"nodeSelector", pod["nodeSelector"], set["nodeSelector"]},
		{"tolerations", pod["tolerations"], set["tolerations"]},
		{"affinity", pod["affinity"], set["affinity"]},
		{"topologySpreadConstraints", pod["topologySpreadConstraints"], set["topologySpreadConstraints"]},
		{"priorityClassName", pod["priorityClassName"], set["priorityClassName"]},
		{"imagePullSecrets", pod["imagePullSecrets"], set["imagePullSecrets"]},
		{"podAnnotations", dig(t, deployment, "spec", "template", "metadata", "annotations"), set["podAnnotations"]},
		{"podLabels", dig(t, deployment, "spec", "template", "metadata", "labels"), map[string]any{"team": "a", "app.kubernetes.io/name": "sample-controller"}},
		{"prometheus.labels on the ServiceMonitor", dig(t, objects["ServiceMonitor/ns/sample-controller"], "metadata", "labels"), map[string]any{"release": "kube-prometheus-stack", "app.kubernetes.io/name": "sample-controller"}},
		{"prometheus.labels on the PrometheusRule", dig(t, objects["PrometheusRule/ns/sample-controller"], "metadata", "labels"), map[string]any{"release": "kube-prometheus-stack", "app.kubernetes.io/name": "sample-controller"}},
		{"prometheus.interval", dig(t, objects["ServiceMonitor/ns/sample-controller"], "spec", "endpoints").([]any)[0].(map[string]any)["interval"], "15s"},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: the Deployment has %v, want %v", c.name, c.got, c.want)
		}
	}
	args := dig(t, container, "args").([]any)
	for _, want := range []string{
		"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s",
		"--logging-format=json", "-v=3", "--workers=8", "--kube-api-qps=50", "--namespace=team-a",
	} {
		if !slices.Contains(args, any(want)) {
			t.Errorf("the controller's flags %q lack %s", args, want)
		}
	}
	if _, ok := objects["PodDisruptionBudget/ns/sample-controller"]; !ok {
		t.Errorf("no PodDisruptionBudget")
	}
}

// TestChartRefusesValues: values that would break what the chart's objects rely on
// are refused before helm changes anything, saying why.
func TestChartRefusesValues(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{"the Lease's name", "extraArgs[0]=--leader-elect-resource-name=other", "extraArgs: --leader-elect-resource-name=other is refused: the Lease's name is the chart's"},
		{"the Lease's namespace, as two args", "extraArgs={--leader-elect-resource-namespace,other}", "extraArgs: --leader-elect-resource-namespace is refused"},
		{"the deprecated Lease namespace flag", "extraArgs[0]=-leader-elect-namespace=x", "is refused: the Lease's namespace is the release's"},
		{"a flag with a value of its own", "extraArgs[0]=-v=4", "extraArgs: -v=4 is refused: set logging.verbosity"},
		{"the mode", "extraArgs[0]=--shard-slots=8", "the mode is sharded.enabled's"},
		{"the selector label on the Pods", "podLabels.app\\.kubernetes\\.io/name=x", "podLabels: app.kubernetes.io/name is the chart's"},
		{"the selector label on the monitor", "prometheus.labels.app\\.kubernetes\\.io/name=x", "prometheus.labels: app.kubernetes.io/name is the chart's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t.Context(), t, "template", "rel", chartDir(t), "--namespace", "ns", "--set", tc.value)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("helm template --set %s: %v, want a refusal saying %q:\n%s", tc.value, err, tc.want, out)
			}
		})
	}
}

// dig returns the value at the keys of nested maps, failing the test if there is none.
func dig(t *testing.T, o any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := o.(map[string]any)
		if !ok {
			t.Fatalf("no %s in %v", k, o)
		}
		if o, ok = m[k]; !ok {
			t.Fatalf("no %s in %v", k, m)
		}
	}
	return o
}

// TestOperationsDocListsEveryValue checks the values table of docs/operations.md
// against the chart's values.schema.json: every value in one row, with its default (a
// default that is not a scalar, as kustomize renders it, reads "artifacts/deploy's").
func TestOperationsDocListsEveryValue(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	// A value is a property with a default; an object of values has properties.
	var walk func(prefix string, s map[string]any)
	walk = func(prefix string, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			p := p.(map[string]any)
			def, ok := p["default"]
			if !ok {
				walk(prefix+name+".", p)
				continue
			}
			switch def := def.(type) {
			case map[string]any:
				defaults[prefix+name] = "`{}`"
				if len(def) > 0 {
					defaults[prefix+name] = "artifacts/deploy's"
				}
			case []any:
				defaults[prefix+name] = "`[]`"
				if len(def) > 0 {
					defaults[prefix+name] = "artifacts/deploy's"
				}
			case string:
				defaults[prefix+name] = "`" + def + "`"
				if def == "" {
					defaults[prefix+name] = "`\"\"`"
				}
			default:
				j, err := json.Marshal(def)
				if err != nil {
					t.Fatal(err)
				}
				defaults[prefix+name] = "`" + string(j) + "`"
			}
		}
	}
	walk("", schema)
	row := regexp.MustCompile("(?m)^\\| (`[^|]+`) \\| ([^|]+) \\| [^|]+ \\|$")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		names := strings.Split(m[1], ", ")
		cells := strings.Split(strings.TrimSpace(m[2]), ", ")
		for i, name := range names {
			name = strings.Trim(name, "`")
			want, ok := defaults[name]
			if !ok {
				t.Errorf("docs/operations.md lists %s, which is not a value of the chart", name)
				continue
			}
			if seen[name] {
				t.Errorf("docs/operations.md lists %s twice", name)
			}
			seen[name] = true
			cell := cells[min(i, len(cells)-1)] // one default for the row, or one for each
			if cell != want {
				t.Errorf("docs/operations.md gives %s the default %s, the chart %s", name, cell, want)
			}
		}
	}
	for name := range defaults {
		if !seen[name] {
			t.Errorf("docs/operations.md's values table lacks %s", name)
		}
	}
}

// TestChartLeavesTheCRD: with crds.enabled=false the release neither installs nor
// upgrades the CRD, which someone else applies.
func TestChartLeavesTheCRD(t *testing.T) {
	out, err := helm(t.Context(), t, "template", "rel", chartDir(t), "--namespace", "ns", "--set", "crds.enabled=false")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	for id := range parseObjects(t, out) {
		if strings.HasPrefix(id, "CustomResourceDefinition/") {
			t.Errorf("with crds.enabled=false the chart renders %s", id)
		}
	}
}

// TestOneVersion: the chart, the image artifacts/deploy runs and CHANGELOG.md's newest
// section carry one version, hack/version.sh's.
func TestOneVersion(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), filepath.Join(repoRoot(t), "hack", "version.sh")).Output()
	if err != nil {
		t.Fatalf("hack/version.sh: %v", err)
	}
	version := strings.TrimSpace(string(out))
	chart, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != strings.TrimPrefix(version, "v") || meta.AppVersion != version {
		t.Errorf("Chart.yaml has version %s and appVersion %s, want %s and %s", meta.Version, meta.AppVersion, strings.TrimPrefix(version, "v"), version)
	}
	changelog, err := os.ReadFile(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	newest := regexp.MustCompile(`(?m)^## (v\S+)`).FindSubmatch(changelog)
	if newest == nil || string(newest[1]) != version {
		t.Errorf("CHANGELOG.md's newest section is %q, want %s", newest, version)
	}
}
