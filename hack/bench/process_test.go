package main

import (
	"slices"
	"testing"
)

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tsample-controller\nVmPeak:\t 1300000 kB\nVmRSS:\t   35200 kB\nRssAnon:\t 20000 kB\n"
	got, err := parseVmRSS([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if got != 35200*1024 {
		t.Errorf("parseVmRSS = %d, want %d", got, 35200*1024)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tmany kB\n"} {
		if _, err := parseVmRSS([]byte(bad)); err == nil {
			t.Errorf("parseVmRSS(%q) succeeded, want an error", bad)
		}
	}
}

func TestMetricsAddress(t *testing.T) {
	line := `I1122 01:26:46.123456   12345 servers.go:81] "Serving metrics" address="127.0.0.1:40123"`
	if got, ok := metricsAddress(line); !ok || got != "127.0.0.1:40123" {
		t.Errorf("metricsAddress = %q, %v", got, ok)
	}
	if _, ok := metricsAddress(`I1122 "Serving health probes" address="127.0.0.1:1"`); ok {
		t.Error("metricsAddress matched the probes line")
	}
}

func TestLineWriter(t *testing.T) {
	var lines []string
	w := &lineWriter{onLine: func(l string) { lines = append(lines, l) }}
	for _, chunk := range []string{"one\ntw", "o\n", "", "three", "\nfour"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if want := []string{"one", "two", "three"}; !slices.Equal(lines, want) {
		t.Errorf("lines = %q, want %q", lines, want)
	}
}
