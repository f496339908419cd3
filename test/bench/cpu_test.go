package main

import (
	"os"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	// A command with a space and a parenthesis: the fields count from the last ")".
	stat := "4242 (kube apiserver) (x)) S 1 4242 4242 0 -1 4194560 2530 0 0 0 1234 566 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 18.0; got != want { // (1234 + 566) / 100
		t.Errorf("parseStatCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "4242 no command", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 2530 0 0 0 12a 566"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) gave no error", bad)
		}
	}
	// This process: the bench reads itself so.
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if _, err := processCPU(os.Getpid()); err != nil {
			t.Errorf("processCPU of this process: %v", err)
		}
	}
}

func TestCPUPerFoo(t *testing.T) {
	cpu := cpuSince(map[string]float64{cpuAPIServer: 10, cpuBench: 1}, map[string]float64{cpuAPIServer: 13.5, cpuBench: 1.3, cpuController: 0.7})
	if got, want := cpuPerFooText(cpu, 1000), "apiserver 3.50, controller 0.70, bench 0.30; all 4.50 ms of CPU per Foo"; got != want {
		t.Errorf("cpuPerFooText = %q, want %q", got, want)
	}
	if got := cpuPerFooText(nil, 1000); got != "" {
		t.Errorf("cpuPerFooText of nothing = %q, want empty", got)
	}
}

// The third table: per size and side, the median over the pairs of each process's CPU
// per Foo; runs that did not converge or read no CPU are left out.
func TestRatioCPUMarkdown(t *testing.T) {
	ours := &controller{Name: ourName}
	run := func(side ratioSide, foos int, converged bool, cpu map[string]float64) runResult {
		return runResult{Driver: side, Foos: foos, ColdStart: &coldStartResult{Foos: foos, Converged: converged, Seconds: 1, CPUSeconds: cpu}}
	}
	res := &results{Runs: []runResult{
		run(ratioSide{Ours: ours, Pair: 1}, 10000, true, map[string]float64{cpuAPIServer: 35, cpuEtcd: 6, cpuController: 7, cpuBench: 3}),
		run(ratioSide{Pair: 1}, 10000, true, map[string]float64{cpuAPIServer: 32, cpuEtcd: 5, cpuBench: 5}),
		run(ratioSide{Ours: ours, Pair: 2}, 10000, true, map[string]float64{cpuAPIServer: 41, cpuEtcd: 6, cpuController: 8, cpuBench: 3}),
		run(ratioSide{Pair: 2}, 10000, true, map[string]float64{cpuAPIServer: 34, cpuEtcd: 7, cpuBench: 5}),
		run(ratioSide{Pair: 3}, 10000, false, map[string]float64{cpuAPIServer: 90}), // not converged
		run(ratioSide{Pair: 1}, 1000, true, map[string]float64{cpuAPIServer: 3, cpuEtcd: 0.5, cpuBench: 0.5}),
		run(ratioSide{Ours: ours, Pair: 1}, 1000, true, nil), // not read
	}}
	want := `| CPU per Foo through the cold start (ms), median of the pairs: Foos | side | apiserver | etcd | controller | bench | all |
| --: | --: | --: | --: | --: | --: | --: |
| 1000 | limit | 3.00 | 0.50 |  | 0.50 | 4.00 |
| 10000 | ours | 3.80 | 0.60 | 0.75 | 0.30 | 5.45 |
| 10000 | limit | 3.30 | 0.60 |  | 0.50 | 4.40 |
`
	if got := ratioCPUMarkdown(res); got != want {
		t.Errorf("ratioCPUMarkdown =\n%s\nwant\n%s", got, want)
	}
}
