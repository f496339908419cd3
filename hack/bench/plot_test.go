package main

import (
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestNiceCeil(t *testing.T) {
	tests := map[float64]float64{0: 1, 0.7: 1, 1: 1, 1.2: 2, 3: 5, 7: 10, 130: 200, 0.042: 0.05}
	for v, want := range tests {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

func TestLinearTicks(t *testing.T) {
	if got, want := linearTicks(0, 1000), []float64{0, 200, 400, 600, 800, 1000}; !slices.Equal(got, want) {
		t.Errorf("linearTicks(0, 1000) = %v, want %v", got, want)
	}
	got := linearTicks(0, 1)
	labels := make([]string, len(got))
	for i, v := range got {
		labels[i] = tickLabel(v)
	}
	if want := []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}; !slices.Equal(labels, want) {
		t.Errorf("tick labels of 0..1 = %v, want %v", labels, want)
	}
}

func TestAxis(t *testing.T) {
	lin := axis{lo: 0, hi: 10, pixLo: 100, pix: 200}
	if got := lin.at(5); got != 200 {
		t.Errorf("linear at(5) = %d, want 200", got)
	}
	up := axis{lo: 0, hi: 100, pixLo: 500, pix: -400}
	if got := up.at(100); got != 100 {
		t.Errorf("upward at(100) = %d, want 100", got)
	}
	log := axis{lo: 0.1, hi: 1000, log: true, pixLo: 0, pix: 400}
	if got := log.at(10); got != 200 {
		t.Errorf("log at(10) = %d, want 200", got)
	}
}

func TestRenderPlot(t *testing.T) {
	fast := []float64{0.1, 0.2, 0.3, 0.5}
	slow := []float64{5, 40, 120, 200}
	tests := []struct {
		name   string
		plot   coldStartPlot
		logX   bool
		colors []color.RGBA
	}{
		{"close lines on a linear axis", coldStartPlot{foos: 4, series: []series{
			{name: "ours", times: fast, complete: true},
			{name: limitName, times: []float64{0.05, 0.1, 0.15, 0.2}, complete: true},
		}}, false, []color.RGBA{seriesColors[0], colorLimit}},
		{"far apart lines on a log axis, one incomplete", coldStartPlot{foos: 5, series: []series{
			{name: "ours", times: fast, complete: false},
			{name: "classic", times: slow, complete: false},
		}}, true, []color.RGBA{seriesColors[0], seriesColors[1]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := renderPlot(tt.plot)
			if b := img.Bounds(); b.Dx() != plotWidth || b.Dy() != plotHeight {
				t.Fatalf("size %v", b)
			}
			for _, c := range tt.colors {
				if !hasColor(img.Pix, c) {
					t.Errorf("no pixel of line colour %v", c)
				}
			}
		})
	}
}

func hasColor(pix []uint8, c color.RGBA) bool {
	for i := 0; i+3 < len(pix); i += 4 {
		if pix[i] == c.R && pix[i+1] == c.G && pix[i+2] == c.B {
			return true
		}
	}
	return false
}

func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	res := sampleResults()
	res.Controllers[0].ColdStarts[0].Arrivals = []float64{0.1, 0.2}
	res.Limit[0].Arrivals = []float64{0.05, 0.1}
	if err := writeOutputs(dir, res); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"results.json", "coldstart-100.png"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The classic run of 1000 Foos has no arrivals, and no other run has that size.
	if _, err := os.Stat(filepath.Join(dir, "coldstart-1000.png")); err == nil {
		t.Error("a plot without lines was written")
	}
}
