package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// tenureVariant is our controller with or without leader election, in the tenure case:
// elected, every write it makes passes the tenure check (pkg/tenure) and carries the
// tenure's deadline; not elected, no write carries a tenure and none is checked. The
// sessions alternate, AB BA AB..., so that a drift of the machine over the run falls on
// both alike.
type tenureVariant struct {
	controller
	Elected bool `json:"elected"`
	Pair    int  `json:"pair"`
}

func (v tenureVariant) variant() string {
	if v.Elected {
		return "elected"
	}
	return "unelected"
}

func (v tenureVariant) column() string { return fmt.Sprintf("tenure %s %d", v.variant(), v.Pair) }

// start starts the controller; elected, on a Lease that exists, released, as a
// leader that stopped leaves it. A Lease the controller had to create would be acted on
// only a lease duration later (in case it was deleted under a holder that still
// writes), which would measure that wait instead of the check.
func (v tenureVariant) start(ctx context.Context, s *session) error {
	c := v.controller
	if v.Elected {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "sample-controller", Namespace: benchNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](15)},
		}
		if _, err := s.kube.CoordinationV1().Leases(benchNamespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the released Lease: %w", err)
		}
		c.Args = append(slices.Clone(c.Args), "--leader-elect", "--leader-elect-resource-namespace="+benchNamespace)
	}
	return c.start(ctx, s)
}

// tenurePlan is the tenure case's sessions: pairs of our controller unelected and
// elected, each a cold start of n Foos and then the reaction case at rate.
func tenurePlan(ours controller, pairs, n, rate int) []sessionPlan {
	var out []sessionPlan
	for pair := 1; pair <= pairs; pair++ {
		order := []bool{false, true}
		if pair%2 == 0 {
			order = []bool{true, false}
		}
		for _, elected := range order {
			out = append(out, sessionPlan{
				driver: tenureVariant{controller: ours, Elected: elected, Pair: pair},
				foos:   n,
				cases:  []benchCase{coldStartCase{record: true}, reactionCase{rate: rate}},
			})
		}
	}
	return out
}

// tenureMarkdown is the tenure case's table: each pair's cold start and reaction p99,
// unelected and elected, the elected one's ratio, and the median and range of each.
func tenureMarkdown(res *results) string {
	type figures struct{ coldStart, p99 float64 }
	pairs := map[int]map[bool]figures{}
	var order []int
	n, rate := 0, 0
	for _, r := range res.Runs {
		v, ok := r.Driver.(tenureVariant)
		if !ok || r.ColdStart == nil || !r.ColdStart.Converged || len(r.Reactions) == 0 {
			continue
		}
		if pairs[v.Pair] == nil {
			pairs[v.Pair] = map[bool]figures{}
			order = append(order, v.Pair)
		}
		pairs[v.Pair][v.Elected] = figures{r.ColdStart.Seconds, r.Reactions[0].P99Ms}
		n, rate = r.Foos, r.Reactions[0].Rate
	}
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder
	writeLine := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	writeLine("pair", fmt.Sprintf("cold start, %d Foos (s): unelected", n), "elected", "÷",
		fmt.Sprintf("reaction p99, %d changes/s (ms): unelected", rate), "elected", "÷")
	writeLine(slices.Repeat([]string{"--:"}, 7)...)
	var coldRatios, p99Ratios []float64
	for _, pair := range order {
		u, uok := pairs[pair][false]
		e, eok := pairs[pair][true]
		if !uok || !eok {
			continue
		}
		coldRatios = append(coldRatios, e.coldStart/u.coldStart)
		p99Ratios = append(p99Ratios, e.p99/u.p99)
		writeLine(fmt.Sprint(pair), formatNumber(u.coldStart), formatNumber(e.coldStart), formatRatio(e.coldStart/u.coldStart),
			formatNumber(u.p99), formatNumber(e.p99), formatRatio(e.p99/u.p99))
	}
	writeLine("median of the pairs' ratios (range)", "", "", spread(coldRatios), "", "", spread(p99Ratios))
	return b.String()
}

// formatRatio writes a ratio to two decimals, which is as far as a noisy machine's
// figures go.
func formatRatio(r float64) string { return fmt.Sprintf("%.2f", r) }
