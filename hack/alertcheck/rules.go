package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// ruleGroup is the rules of one PrometheusRule, named for reports.
type ruleGroup struct {
	object string // PrometheusRule namespace/name, group name
	rules  []rulefmt.Rule
}

// promQL parses expressions the way a default Prometheus does.
var promQL = parser.NewParser(parser.Options{})

// prometheusRules finds the PrometheusRule objects in a YAML stream, as kubectl prints
// manifests (documents, or a List of items), and validates their rule groups the way
// Prometheus loads a rules file.
func prometheusRules(manifests []byte) ([]ruleGroup, error) {
	objects, err := manifestObjects(manifests)
	if err != nil {
		return nil, err
	}
	var groups []ruleGroup
	for _, obj := range objects {
		if obj["kind"] != "PrometheusRule" {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		name := fmt.Sprintf("PrometheusRule %v/%v", meta["namespace"], meta["name"])
		// The spec of a PrometheusRule is a Prometheus rules file.
		spec, err := yaml.Marshal(obj["spec"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		parsed, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promQL, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s: %w", name, errors.Join(errs...))
		}
		for _, g := range parsed.Groups {
			groups = append(groups, ruleGroup{object: name + ", group " + g.Name, rules: g.Rules})
		}
	}
	return groups, nil
}

// severities are the values of the severity label that alert routing knows.
var severities = map[string]bool{"critical": true, "warning": true, "info": true}

// checkRule returns what is wrong with one rule: what an on-call reader would miss, and
// what its expression selects that series does not have.
func checkRule(r rulefmt.Rule, series []series, targets map[string]bool) []string {
	var problems []string
	if r.Alert != "" {
		if time.Duration(r.For) <= 0 {
			problems = append(problems, "no for: a single evaluation would page")
		}
		if !severities[r.Labels["severity"]] {
			problems = append(problems, fmt.Sprintf("severity label %q, want critical, warning or info", r.Labels["severity"]))
		}
		for _, a := range []string{"summary", "description"} {
			if r.Annotations[a] == "" {
				problems = append(problems, "no "+a+" annotation")
			}
		}
	}
	expr, err := promQL.ParseExpr(r.Expr)
	if err != nil {
		// rulefmt has parsed it already; this cannot happen for a validated rule.
		return append(problems, err.Error())
	}
	return append(problems, checkExpr(expr, series, targets)...)
}

// checkExpr checks every selector of expr against series, and every label that expr
// groups or matches by.
func checkExpr(expr parser.Expr, all []series, targets map[string]bool) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			problems = append(problems, checkSelector(n, all, targets)...)
		case *parser.AggregateExpr:
			if !n.Without {
				problems = append(problems, checkLabelsExist("by", n.Grouping, n.Expr, all, targets)...)
			}
		case *parser.BinaryExpr:
			if m := n.VectorMatching; m != nil {
				if m.On {
					problems = append(problems, checkLabelsExist("on", m.MatchingLabels, n, all, targets)...)
				}
				problems = append(problems, checkLabelsExist("group_left/group_right", m.Include, n, all, targets)...)
			}
		}
		return nil
	})
	return problems
}

// checkSelector reports a selector that matches no series, saying which matcher fails.
func checkSelector(vs *parser.VectorSelector, all []series, targets map[string]bool) []string {
	var checked []*matcher
	for _, m := range vs.LabelMatchers {
		if !targets[m.Name] {
			checked = append(checked, &matcher{m})
		}
	}
	if len(selectSeries(checked, all)) > 0 {
		return nil
	}
	// Say which matcher no series satisfies, given the metric name.
	var named []series
	for _, s := range all {
		if s.labels["__name__"] == vs.Name || vs.Name == "" {
			named = append(named, s)
		}
	}
	if len(named) == 0 {
		return []string{fmt.Sprintf("%s: the scrape has no metric %s", vs, vs.Name)}
	}
	var problems []string
	for _, m := range checked {
		if m.Name == "__name__" {
			continue
		}
		if len(selectSeries([]*matcher{m}, named)) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no series of %s has %s (it has %s: %v)", vs, vs.Name, m, m.Name, labelValues(named, m.Name)))
		}
	}
	if len(problems) == 0 {
		// Each matcher alone matches some series, but no series matches all of them.
		problems = append(problems, fmt.Sprintf("%s: no one series matches every matcher", vs))
	}
	return problems
}

// checkLabelsExist reports the labels that neither Prometheus adds nor any series
// selected under node carries: grouping by them would put every series in one group.
func checkLabelsExist(clause string, names []string, node parser.Node, all []series, targets map[string]bool) []string {
	var selected []series
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			var checked []*matcher
			for _, m := range vs.LabelMatchers {
				if !targets[m.Name] {
					checked = append(checked, &matcher{m})
				}
			}
			selected = append(selected, selectSeries(checked, all)...)
		}
		return nil
	})
	var problems []string
	for _, name := range names {
		if targets[name] {
			continue
		}
		found := false
		for _, s := range selected {
			if _, ok := s.labels[name]; ok {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s (%s): no series it selects has the label %s", clause, node, name))
		}
	}
	return problems
}

// manifestObjects returns the objects of a YAML stream, as kubectl prints manifests:
// documents, or a List of items.
func manifestObjects(manifests []byte) ([]map[string]any, error) {
	var objects []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(manifests))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if doc == nil {
			continue
		}
		if doc["kind"] == "List" {
			items, _ := doc["items"].([]any)
			for _, item := range items {
				if obj, ok := item.(map[string]any); ok {
					objects = append(objects, obj)
				}
			}
			continue
		}
		objects = append(objects, doc)
	}
	return objects, nil
}
