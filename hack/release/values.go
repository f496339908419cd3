package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// A value is one of the chart's values: a leaf, with its JSON schema (type and
// constraints), its default and its description; or an object of values. The tree of
// values is the one place for each: values.yaml (defaults, with the descriptions as
// comments), values.schema.json and the table in docs/operations.md (checked by
// TestOperationsDocListsEveryValue) come from it.
type value struct {
	name   string
	doc    string
	schema map[string]any // a leaf's; nil for an object
	def    any            // a leaf's default
	fields []value        // an object's
}

// valueDefaults are the chart's defaults that artifacts/deploy's Deployment gives, so
// that with every value at its default the chart renders what kustomize renders.
type valueDefaults struct {
	resources, topologySpreadConstraints any
	// monitorInterval is the ServiceMonitor's scrape interval (the prometheus component).
	monitorInterval string
}

// deploymentName is the controller's Deployment in artifacts/deploy, the object most
// values change.
const deploymentName = "sample-controller"

// defaultsFrom reads the valueDefaults from kustomize's renderings: base without
// components, monitored with the prometheus component.
func defaultsFrom(base, monitored *rendering, namespace string) (valueDefaults, error) {
	var d valueDefaults
	var deployment struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Resources any `json:"resources"`
					} `json:"containers"`
					TopologySpreadConstraints any `json:"topologySpreadConstraints"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	y, ok := base.objects[objectID{kind: "Deployment", namespace: namespace, name: deploymentName}]
	if !ok {
		return d, fmt.Errorf("artifacts/deploy has no Deployment %s", deploymentName)
	}
	if err := yaml.Unmarshal([]byte(y), &deployment); err != nil {
		return d, err
	}
	pod := deployment.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return d, fmt.Errorf("the Deployment %s has %d containers, want 1", deploymentName, len(pod.Containers))
	}
	d.resources, d.topologySpreadConstraints = pod.Containers[0].Resources, pod.TopologySpreadConstraints

	var monitor struct {
		Spec struct {
			Endpoints []struct {
				Interval string `json:"interval"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	y, ok = monitored.objects[objectID{kind: "ServiceMonitor", namespace: namespace, name: deploymentName}]
	if !ok {
		return d, fmt.Errorf("the prometheus component has no ServiceMonitor %s", deploymentName)
	}
	if err := yaml.Unmarshal([]byte(y), &monitor); err != nil {
		return d, err
	}
	if len(monitor.Spec.Endpoints) != 1 || monitor.Spec.Endpoints[0].Interval == "" {
		return d, fmt.Errorf("the ServiceMonitor %s: want one endpoint with an interval", deploymentName)
	}
	d.monitorInterval = monitor.Spec.Endpoints[0].Interval
	return d, nil
}

// durationPattern is a Go duration, as the controller's flags parse it, or empty.
const durationPattern = `^(([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)?$`

// chartValues is the tree of the chart's values, with the image of values.yaml.
func chartValues(repository, digest string, d valueDefaults) []value {
	str := func(name, doc, def string) value {
		return value{name: name, doc: doc, def: def, schema: map[string]any{"type": "string"}}
	}
	duration := func(name, doc string) value {
		return value{name: name, doc: doc, def: "", schema: map[string]any{"type": "string", "pattern": durationPattern}}
	}
	stringMap := func(name, doc string) value {
		return value{name: name, doc: doc, def: map[string]any{}, schema: map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}}
	}
	list := func(name, doc string, def any, items map[string]any) value {
		if def == nil {
			def = []any{}
		}
		return value{name: name, doc: doc, def: def, schema: map[string]any{"type": "array", "items": items}}
	}
	anyObject := map[string]any{"type": "object"}

	values := []value{
		{name: "image", doc: "The controller's image. A digest, when set, is what runs; the tag defaults to the\nchart's appVersion.", fields: []value{
			{name: "repository", doc: "Where the image is pulled from.", def: repository, schema: map[string]any{"type": "string", "minLength": 1}},
			str("tag", "The image's tag; empty for the chart's appVersion.", ""),
			{name: "digest", doc: "The image's digest (sha256:...), which wins over the tag.", def: digest, schema: map[string]any{"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"}},
		}},
		{name: "replicas", doc: "Replicas of the controller; null for the mode's: 2 (a leader and a standby), or\n3 with sharded.enabled.", def: nil,
			schema: map[string]any{"type": []string{"integer", "null"}, "minimum": 0}},
		{name: "resources", doc: "The controller container's resources. GOMEMLIMIT is 90% of limits.memory; raise\nmemory with the number of Foos and Deployments (docs/operations.md).", def: d.resources,
			schema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
				"limits": anyObject, "requests": anyObject, "claims": map[string]any{"type": "array"},
			}}},
		{name: "logging", doc: "How the controller logs.", fields: []value{
			{name: "format", doc: "--logging-format: text (klog's, when empty) or json.", def: "", schema: map[string]any{"type": "string", "enum": []string{"", "text", "json"}}},
			{name: "verbosity", doc: "-v: log verbosity; 4 logs every sync.", def: 0, schema: map[string]any{"type": "integer", "minimum": 0, "maximum": 10}},
		}},
		{name: "workers", doc: "--workers: Foos synced in parallel; 0 for the controller's default (32, or 8 per\nslot with sharded.enabled).", def: 0, schema: map[string]any{"type": "integer", "minimum": 0}},
		{name: "leaderElection", doc: "The Lease timings (docs/reliability.md); empty for the shipped ones. The Lease's name\nand namespace are the chart's: every replica of every rollout must use the same.", fields: []value{
			duration("leaseDuration", "--leader-elect-lease-duration: 15s when empty."),
			duration("renewDeadline", "--leader-elect-renew-deadline: 10s when empty."),
			duration("retryPeriod", "--leader-elect-retry-period: 1s when empty, 2s with sharded.enabled."),
		}},
		list("extraArgs", "More flags for the controller (main.go lists them), such as --kube-api-qps=50.\nFlags the chart sets, or has a value for, are refused.", nil, map[string]any{"type": "string"}),
		stringMap("nodeSelector", "The Pods' nodeSelector."),
		list("tolerations", "The Pods' tolerations.", nil, anyObject),
		{name: "affinity", doc: "The Pods' affinity.", def: map[string]any{}, schema: anyObject},
		list("topologySpreadConstraints", "The Pods' topology spread: by default, replicas on different nodes where they can\nbe.", d.topologySpreadConstraints, anyObject),
		str("priorityClassName", "The Pods' PriorityClass; empty for the cluster's default.", ""),
		list("imagePullSecrets", "Secrets the kubelet pulls the image with, by name.", nil, map[string]any{
			"type": "object", "required": []string{"name"}, "properties": map[string]any{"name": map[string]any{"type": "string", "minLength": 1}},
		}),
		stringMap("podAnnotations", "Annotations on the controller's Pods."),
		stringMap("podLabels", "Labels on the controller's Pods, beside app.kubernetes.io/name, which the chart's\nselectors use."),
	}
	values = append(values, value{name: "crds", doc: "The CRD, Foo's API: a template helm installs and upgrades with the release, and keeps\n(with every Foo) when the release is uninstalled.", fields: []value{
		{name: "enabled", doc: "Whether the release installs and upgrades the CRD; false leaves it to whoever applies\nit (kubectl apply -k artifacts/examples).", def: true, schema: map[string]any{"type": "boolean"}},
	}})
	for _, c := range components {
		v := value{name: c.value, doc: c.doc, fields: []value{
			{name: "enabled", doc: "Whether to install it (artifacts/deploy/components/" + c.dir + ").", def: false, schema: map[string]any{"type": "boolean"}},
		}}
		if c.value == "prometheus" {
			v.fields = append(v.fields,
				stringMap("labels", "Labels on the ServiceMonitor and the PrometheusRule, such as the release: NAME\nthat kube-prometheus-stack selects them by."),
				value{name: "interval", doc: "How often Prometheus scrapes each replica.", def: d.monitorInterval, schema: map[string]any{"type": "string", "pattern": `^[0-9]+(ms|s|m|h)$`}},
			)
		}
		values = append(values, v)
	}
	return values
}

// valuesYAML writes values.yaml: each value's default under its description.
func valuesYAML(values []value) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", generatedBy)
	b.WriteString(`# With every value at its default the chart installs what artifacts/deploy does, in
# the release's namespace. values.schema.json refuses what it does not know.
#
# The release's namespace is not the chart's: create it with helm's --create-namespace,
# or beforehand with the Pod Security labels artifacts/deploy gives it:
#   kubectl create namespace NAMESPACE
#   kubectl label namespace NAMESPACE pod-security.kubernetes.io/enforce=restricted
`)
	var write func(vs []value, indent string) error
	write = func(vs []value, indent string) error {
		for _, v := range vs {
			if indent == "" {
				b.WriteString("\n")
			}
			for l := range strings.SplitSeq(v.doc, "\n") {
				fmt.Fprintf(&b, "%s# %s\n", indent, l)
			}
			if v.fields != nil {
				fmt.Fprintf(&b, "%s%s:\n", indent, v.name)
				if err := write(v.fields, indent+"  "); err != nil {
					return err
				}
				continue
			}
			y, err := yaml.Marshal(map[string]any{v.name: v.def})
			if err != nil {
				return err
			}
			for l := range strings.Lines(string(y)) {
				b.WriteString(indent + l)
			}
		}
		return nil
	}
	if err := write(values, ""); err != nil {
		return "", err
	}
	return b.String(), nil
}

// valuesSchema is values.schema.json: every value with its type, default and
// description, and no other, so that a misspelt value (--set promethues.enabled=true)
// is an error rather than a silent no-op.
func valuesSchema(values []value) (string, error) {
	var object func(vs []value) map[string]any
	object = func(vs []value) map[string]any {
		props := map[string]any{}
		for _, v := range vs {
			var s map[string]any
			if v.fields != nil {
				s = object(v.fields)
			} else {
				s = map[string]any{"default": v.def}
				for k, x := range v.schema {
					s[k] = x
				}
			}
			s["description"] = strings.ReplaceAll(v.doc, "\n", " ")
			props[v.name] = s
		}
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	}
	schema := object(values)
	// What helm gives a chart that is another's dependency.
	schema["properties"].(map[string]any)["global"] = map[string]any{"type": "object"}
	schema["$schema"] = "https://json-schema.org/draft-07/schema#"
	out, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		return "", err
	}
	return string(out) + "\n", nil
}

// refusedArgs are the flags extraArgs may not carry, with why: each is the chart's,
// or has a value of its own.
var refusedArgs = []struct{ flag, why string }{
	{"leader-elect-resource-name", "the Lease's name is the chart's: replicas on another Lease, as in a rollout that changed it, would act beside the old ones"},
	{"leader-elect-resource-namespace", "the Lease's namespace is the release's: replicas on another Lease, as in a rollout that changed it, would act beside the old ones"},
	{"leader-elect-namespace", "the Lease's namespace is the release's: replicas on another Lease, as in a rollout that changed it, would act beside the old ones"},
	{"leader-elect", "the mode is sharded.enabled's"},
	{"shard-slots", "the mode is sharded.enabled's"},
	{"leader-elect-lease-duration", "set leaderElection.leaseDuration"},
	{"leader-elect-renew-deadline", "set leaderElection.renewDeadline"},
	{"leader-elect-retry-period", "set leaderElection.retryPeriod"},
	{"logging-format", "set logging.format"},
	{"v", "set logging.verbosity"},
	{"workers", "set workers"},
	{"metrics-bind-address", "the chart's Service, NetworkPolicy and ServiceMonitor use the metrics port"},
	{"metrics-secure", "the chart serves metrics to authenticated callers only"},
	{"health-probe-bind-address", "the chart's probes use the probe port"},
	{"graceful-shutdown-timeout", "the chart's terminationGracePeriodSeconds leaves room for this drain, and no more"},
	{"tls-cert-file", "certManager.enabled sets the serving certificate"},
	{"tls-private-key-file", "certManager.enabled sets the serving certificate"},
}

// valuesCheck is a template that renders nothing and refuses, saying why and before
// helm changes anything: components that cannot be combined, extraArgs the chart
// refuses (refusedArgs), and labels that would take over the chart's selector label.
func valuesCheck() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{{- /* %s */ -}}\n", generatedBy)
	for _, c := range components {
		if c.without == "" {
			continue
		}
		other := components[slices.IndexFunc(components, func(o component) bool { return o.dir == c.without })]
		fmt.Fprintf(&b, "{{- if and %s %s }}\n{{- fail %q }}\n{{- end }}\n", enabled(c), enabled(other),
			fmt.Sprintf("%s.enabled and %s.enabled cannot be combined: set one of them to false (see the comments in values.yaml).", c.value, other.value))
	}
	b.WriteString("{{- $refused := dict")
	for _, r := range refusedArgs {
		fmt.Fprintf(&b, " %q %q", r.flag, r.why)
	}
	b.WriteString(" }}\n")
	b.WriteString(`{{- range .Values.extraArgs }}
{{- $flag := regexReplaceAll "^--?([^=]*).*$" . "${1}" }}
{{- if and (hasPrefix "-" .) (hasKey $refused $flag) }}
{{- fail (printf "extraArgs: %s is refused: %s." . (get $refused $flag)) }}
{{- end }}
{{- end }}
`)
	for _, labels := range []string{"podLabels", "prometheus.labels"} {
		fmt.Fprintf(&b, "{{- if hasKey .Values.%s %q }}\n{{- fail %q }}\n{{- end }}\n", labels, selectorLabel,
			fmt.Sprintf("%s: %s is the chart's, which its selectors use.", labels, selectorLabel))
	}
	return b.String()
}

// selectorLabel is the label every selector of artifacts/deploy uses.
const selectorLabel = "app.kubernetes.io/name"

// An edit replaces, in an object's template, text that kustomize's rendering must
// have exactly once, or in each branch of a component's change (times).
type edit struct {
	re    *regexp.Regexp
	with  string
	times int // 0 for once
}

// valueEdits are the values' edits of the templates, by the kind of the object;
// every object of a kind listed must take each of its edits.
var valueEdits = map[string][]edit{
	"Deployment": {
		{regexp.MustCompile(`(?m)^(  replicas: )([0-9]+)$`), `${1}{{ ternary ${2} .Values.replicas (kindIs "invalid" .Values.replicas) }}`, 2},
		{regexp.MustCompile(`(?m)^    metadata:\n      labels:\n(        app\.kubernetes\.io/name: .*)$`), "    metadata:\n" +
			"{{- with .Values.podAnnotations }}\n      annotations:\n{{- toYaml . | nindent 8 }}\n{{- end }}\n" +
			"      labels:\n{{- with .Values.podLabels }}\n{{- toYaml . | nindent 8 }}\n{{- end }}\n${1}", 0},
		{regexp.MustCompile(`(?m)^(        - --leader-elect-lease-duration=)(\S+)$`), `${1}{{ .Values.leaderElection.leaseDuration | default "${2}" }}`, 0},
		{regexp.MustCompile(`(?m)^(        - --leader-elect-renew-deadline=)(\S+)$`), `${1}{{ .Values.leaderElection.renewDeadline | default "${2}" }}`, 0},
		{regexp.MustCompile(`(?m)^(        - --leader-elect-retry-period=)(\S+)$`), `${1}{{ .Values.leaderElection.retryPeriod | default "${2}" }}`, 2},
		{regexp.MustCompile(`(?m)^        env:$`), "" +
			"{{- with .Values.logging.format }}\n        - --logging-format={{ . }}\n{{- end }}\n" +
			"{{- with .Values.logging.verbosity }}\n        - -v={{ . }}\n{{- end }}\n" +
			"{{- with .Values.workers }}\n        - --workers={{ . }}\n{{- end }}\n" +
			"{{- range .Values.extraArgs }}\n        - {{ toJson . }}\n{{- end }}\n" +
			"        env:", 0},
		{regexp.MustCompile(`(?m)^        resources:\n(          .*\n)+`), "{{- with .Values.resources }}\n        resources:\n{{- toYaml . | nindent 10 }}\n{{- end }}\n", 0},
		{regexp.MustCompile(`(?m)^      securityContext:$`), "" +
			"{{- with .Values.affinity }}\n      affinity:\n{{- toYaml . | nindent 8 }}\n{{- end }}\n" +
			"{{- with .Values.imagePullSecrets }}\n      imagePullSecrets:\n{{- toYaml . | nindent 6 }}\n{{- end }}\n" +
			"{{- with .Values.nodeSelector }}\n      nodeSelector:\n{{- toYaml . | nindent 8 }}\n{{- end }}\n" +
			"{{- with .Values.priorityClassName }}\n      priorityClassName: {{ . }}\n{{- end }}\n" +
			"{{- with .Values.tolerations }}\n      tolerations:\n{{- toYaml . | nindent 6 }}\n{{- end }}\n" +
			"      securityContext:", 0},
		{regexp.MustCompile(`(?m)^      topologySpreadConstraints:\n((      -|        ).*\n)+`), "{{- with .Values.topologySpreadConstraints }}\n      topologySpreadConstraints:\n{{- toYaml . | nindent 6 }}\n{{- end }}\n", 0},
	},
	"ServiceMonitor": {
		{regexp.MustCompile(`(?m)^(    interval: )\S+$`), "${1}{{ .Values.prometheus.interval }}", 0},
		{regexp.MustCompile(`(?m)^  labels:\n`), "  labels:\n{{- with .Values.prometheus.labels }}\n{{- toYaml . | nindent 4 }}\n{{- end }}\n", 0},
	},
	"PrometheusRule": {
		{regexp.MustCompile(`(?m)^  labels:\n`), "  labels:\n{{- with .Values.prometheus.labels }}\n{{- toYaml . | nindent 4 }}\n{{- end }}\n", 0},
	},
}

// applyValues makes the values' edits to the template t of the object id. An edit
// that finds nothing, or more than it should, is an error: artifacts/deploy changed
// under it, and the chart would silently lose a value or change what it should not.
func applyValues(id objectID, t string) (string, error) {
	for _, e := range valueEdits[id.kind] {
		if got, want := len(e.re.FindAllStringIndex(t, -1)), max(e.times, 1); got != want {
			return "", fmt.Errorf("%s: the chart's value edit %q finds %d places, want %d; artifacts/deploy changed, so change the edit (hack/release/values.go)", id, e.re, got, want)
		}
		t = e.re.ReplaceAllString(t, e.with)
	}
	return t, nil
}
