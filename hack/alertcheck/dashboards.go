package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// dashboardQuery is one PromQL expression of a Grafana dashboard: a panel's target, or
// the metric a template variable lists label values of.
type dashboardQuery struct {
	where string // the ConfigMap, dashboard and panel or variable, for reports
	expr  string // as Prometheus receives it, Grafana's interval variables replaced
}

// grafanaIntervals are the interval variables Grafana replaces with a duration.
var grafanaIntervals = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)

// labelValuesQuery matches a variable query label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// grafanaDashboards finds the Grafana dashboards in a YAML stream's ConfigMaps labelled
// grafana_dashboard (as the dashboard sidecar of kube-prometheus-stack loads them) and
// returns their queries. Other variables ($namespace) stay: they may appear only as
// label values of the labels Prometheus adds, which the check does not look at.
func grafanaDashboards(manifests []byte) ([]dashboardQuery, error) {
	objects, err := manifestObjects(manifests)
	if err != nil {
		return nil, err
	}
	var queries []dashboardQuery
	for _, obj := range objects {
		meta, _ := obj["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if obj["kind"] != "ConfigMap" || labels["grafana_dashboard"] == nil {
			continue
		}
		data, _ := obj["data"].(map[string]any)
		for key, value := range data {
			where := fmt.Sprintf("ConfigMap %v/%v, %s", meta["namespace"], meta["name"], key)
			text, _ := value.(string)
			found, err := dashboardQueries(where, []byte(text))
			if err != nil {
				return nil, err
			}
			queries = append(queries, found...)
		}
	}
	return queries, nil
}

// dashboard is what the check reads of a Grafana dashboard's JSON model.
type dashboard struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// dashboardQueries parses one dashboard and returns its queries; a dashboard with
// none is an error, as a panel without one shows nothing.
func dashboardQueries(where string, model []byte) ([]dashboardQuery, error) {
	var d dashboard
	if err := json.Unmarshal(model, &d); err != nil {
		return nil, fmt.Errorf("%s: not a dashboard's JSON: %w", where, err)
	}
	where += fmt.Sprintf(", dashboard %q", d.Title)
	var queries []dashboardQuery
	var walk func([]panel) error
	walk = func(panels []panel) error {
		for _, p := range panels {
			if err := walk(p.Panels); err != nil {
				return err
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("%s, panel %q: a target without an expression", where, p.Title)
				}
				queries = append(queries, dashboardQuery{where: fmt.Sprintf("%s, panel %q", where, p.Title), expr: grafanaIntervals.ReplaceAllString(t.Expr, "5m")})
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string, or an object with one (newer Grafana).
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("%s, variable %s: its query is neither a string nor an object with one", where, v.Name)
			}
			q = obj.Query
		}
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("%s, variable %s: %q is not label_values(selector, label), the one form this check reads", where, v.Name, q)
		}
		queries = append(queries, dashboardQuery{where: fmt.Sprintf("%s, variable %s", where, v.Name), expr: m[1]})
	}
	if len(queries) == 0 {
		return nil, fmt.Errorf("%s: no queries", where)
	}
	return queries, nil
}

// checkDashboardQuery returns what is wrong with one query: it does not parse as
// PromQL, or selects what the scrapes do not have.
func checkDashboardQuery(q dashboardQuery, all []series, targets map[string]bool) []string {
	expr, err := promQL.ParseExpr(q.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", q.expr, err)}
	}
	return checkExpr(expr, all, targets)
}
