package main

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

func TestLayouts(t *testing.T) {
	if len(peopleNamespaces) != 40 {
		t.Errorf("%d namespaces, want 40", len(peopleNamespaces))
	}
	const n = 10000
	for _, l := range shardedLayouts {
		count := map[string]int{}
		for i := range n {
			count[l.namespaceOf(i)]++
		}
		if len(count) != len(l.Namespaces) {
			t.Errorf("%s: Foos in %d namespaces, want every one of %d", l.Name, len(count), len(l.Namespaces))
		}
		for ns := range count {
			if !strings.Contains(strings.Join(l.Namespaces, " ")+" ", ns+" ") {
				t.Errorf("%s: a Foo in %q, which the layout does not create", l.Name, ns)
			}
		}
		switch l {
		case spreadLayout:
			for ns, c := range count {
				if c != n/40 {
					t.Errorf("%s: %d Foos in %s, want %d", l.Name, c, ns, n/40)
				}
			}
		case halfLayout:
			if count["prod"] != n/2 {
				t.Errorf("%s: %d Foos in prod, want %d", l.Name, count["prod"], n/2)
			}
		}
	}
}

func TestShardedMarkdown(t *testing.T) {
	res := &results{Runs: []runResult{
		{Column: "ours-unsharded", Driver: replicaSet{Replicas: 1}, ColdStart: &coldStartResult{Foos: 100, Converged: true, Seconds: 2, PerFooTotal: 3, Requests: requestCounts{"POST deployments": 100, "PUT foos/status": 100, "LIST foos": 1}},
			Sharded: &shardedResult{Layout: "40 namespaces", Foos: 100, Replicas: 1, PerReplica: []replicaFigures{{RSSBytes: 60 << 20, ReadBytes: 4 << 20}}}},
		{Column: "ours-sharded-1", Driver: replicaSet{Replicas: 1, Slots: 16}, ColdStart: &coldStartResult{Foos: 100, Converged: true, Seconds: 2.5},
			Sharded: &shardedResult{Layout: "40 namespaces", Foos: 100, Replicas: 1, Slots: 16, LeaseWritesPerSecond: 16,
				PerReplica: []replicaFigures{{RSSBytes: 64 << 20, ReadBytes: 4 << 20, SlotsHeld: 16, CachedFoos: ptr.To(100.0), CachedDeployments: ptr.To(100.0)}}}},
		{Column: "ours-sharded-2", Driver: replicaSet{Replicas: 2, Slots: 16}, ColdStart: &coldStartResult{Foos: 100, Converged: true, Seconds: 3},
			Sharded: &shardedResult{Layout: "40 namespaces", Foos: 100, Replicas: 2, Slots: 16, KilledSlots: 8, HeldAgainSeconds: ptr.To(12.0),
				PerReplica: []replicaFigures{
					{RSSBytes: 50 << 20, ReadBytes: 2 << 20, SlotsHeld: 8, CachedFoos: ptr.To(45.0)},
					{RSSBytes: 52 << 20, ReadBytes: 3 << 20, SlotsHeld: 8, CachedFoos: ptr.To(55.0)},
				}}},
		{Column: "ours", Driver: controller{Name: ourName}, ColdStart: &coldStartResult{Foos: 100, Converged: true, Seconds: 1}},
	}}
	got := shardedMarkdown(res)
	for _, want := range []string{
		"| 100, 40 namespaces | 1, unsharded | 2.00 | 3.00 | 2.00 | 0 | n/a | n/a |  | 60.0 | 4.00 |  | 0 |  |",
		"| 100, 40 namespaces | 1, 16 slots | 2.50 |",
		// The larger cache, 55, over an even share of 50; the larger read, 3 MiB, over
		// half of the one sharded replica's 4 MiB.
		"| 100, 40 namespaces | 2, 16 slots | 3.00 | 0 | 0 | 8.00 / 8.00 | 45.0 / 55.0 | n/a / n/a | 1.10 | 50.0 / 52.0 | 2.00 / 3.00 | 1.50 | 0 | 12.0 (8 slots) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks\n%s\nin\n%s", want, got)
		}
	}
	if strings.Count(got, "\n") != 5 {
		t.Errorf("want a header, a separator and three rows (not the unsharded controller's run):\n%s", got)
	}
	if table := buildTable(res); len(table.columns) != 1 || table.columns[0] != ourName {
		t.Errorf("the main table's columns are %q, want only %q", table.columns, ourName)
	}
}
