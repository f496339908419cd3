package main

import "testing"

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS("Name:\tsample-controller\nVmPeak:\t 1300000 kB\nVmRSS:\t   35200 kB\nRssAnon:\t 20000 kB\n")
	if err != nil || got != 35200*1024 {
		t.Errorf("parseVmRSS = %d, %v; want %d", got, err, 35200*1024)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tmany kB\n"} {
		if _, err := parseVmRSS(bad); err == nil {
			t.Errorf("parseVmRSS(%q) succeeded, want an error", bad)
		}
	}
}
