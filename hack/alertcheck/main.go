// Command alertcheck checks the alerting rules of PrometheusRule objects against one
// scrape of the process they watch: every rule must pass Prometheus's own validation
// (the rulefmt and PromQL parser that promtool uses), carry what an on-call reader needs
// (for, a severity, a summary and a description), and every metric name and label value
// its expression selects must be in the scrape. The queries of the Grafana dashboards
// in ConfigMaps labelled grafana_dashboard are checked the same way.
//
//	alertcheck --rules manifests.yaml --metrics scrape.txt
//
// The rules file is a YAML stream as kubectl prints it (several documents, or a List);
// objects other than PrometheusRules are skipped. The scrape is the Prometheus text
// format. Labels that Prometheus adds to every series it scrapes (--target-labels) are
// not in a scrape: matchers on them are not checked, and grouping by them is allowed.
//
// It lives in a module of its own so that the Prometheus server module, and everything
// it requires, never enters the controller's go.mod.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/prometheus/prometheus/model/rulefmt"
)

func main() {
	rulesPath := flag.String("rules", "", "YAML stream with the PrometheusRule objects to check (- for stdin)")
	metricsPath := flag.String("metrics", "", "scrapes of the process, in the Prometheus text format, comma-separated: one per mode it runs in (an alert for one mode selects series only that mode serves); a selector must match a series of one of them")
	targetLabels := flag.String("target-labels", strings.Join(defaultTargetLabels, ","),
		"labels Prometheus adds to every scraped series, so absent from a scrape")
	flag.Parse()
	if *rulesPath == "" || *metricsPath == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	problems, err := run(*rulesPath, strings.Split(*metricsPath, ","), strings.Split(*targetLabels, ","), os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "alertcheck: %v\n", err)
		os.Exit(2)
	}
	if problems > 0 {
		fmt.Fprintf(os.Stderr, "alertcheck: %d problems\n", problems)
		os.Exit(1)
	}
}

// defaultTargetLabels are the labels the Prometheus Operator puts on the series it
// scrapes through a ServiceMonitor.
var defaultTargetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// run checks the rules in rulesPath against the series of the scrapes in metricsPaths
// together, reporting each rule to out, and returns how many problems it found.
func run(rulesPath string, metricsPaths []string, targetLabels []string, out io.Writer) (int, error) {
	manifests, err := readInput(rulesPath)
	if err != nil {
		return 0, err
	}
	var series []series
	for _, path := range metricsPaths {
		scraped, err := readScrape(path)
		if err != nil {
			return 0, err
		}
		series = append(series, scraped...)
	}
	groups, err := prometheusRules(manifests)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", rulesPath, err)
	}
	if len(groups) == 0 {
		return 0, fmt.Errorf("%s holds no PrometheusRule", rulesPath)
	}

	targets := map[string]bool{}
	for _, l := range targetLabels {
		targets[strings.TrimSpace(l)] = true
	}
	problems := 0
	for _, g := range groups {
		for _, r := range g.rules {
			found := checkRule(r, series, targets)
			status := "ok  "
			if len(found) > 0 {
				status = "FAIL"
			}
			fmt.Fprintf(out, "%s %s: %s\n", status, g.object, ruleName(r))
			for _, p := range found {
				fmt.Fprintf(out, "       %s\n", p)
			}
			problems += len(found)
		}
	}
	queries, err := grafanaDashboards(manifests)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", rulesPath, err)
	}
	for _, q := range queries {
		found := checkDashboardQuery(q, series, targets)
		status := "ok  "
		if len(found) > 0 {
			status = "FAIL"
		}
		fmt.Fprintf(out, "%s %s: %s\n", status, q.where, q.expr)
		for _, p := range found {
			fmt.Fprintf(out, "       %s\n", p)
		}
		problems += len(found)
	}
	return problems, nil
}

// ruleName is an alerting rule's alert, or a recording rule's record.
func ruleName(r rulefmt.Rule) string {
	if r.Alert != "" {
		return "alert " + r.Alert
	}
	return "record " + r.Record
}

func readInput(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

// readScrape reads the series of one scrape.
func readScrape(path string) ([]series, error) {
	scrape, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer scrape.Close()
	all, err := parseScrape(scrape)
	if err != nil {
		return nil, fmt.Errorf("reading the scrape %s: %w", path, err)
	}
	return all, nil
}
