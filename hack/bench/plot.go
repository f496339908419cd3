package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// series is one line of a cold-start plot: the sorted times, in seconds, at which
// the Deployments appeared.
type series struct {
	name     string
	times    []float64
	complete bool // every Deployment appeared
}

// coldStartPlot is the plot of the cold starts of one size.
type coldStartPlot struct {
	foos   int
	series []series
}

// coldStartPlots makes one plot per cold-start size, with a line per controller and
// one for the limit.
func coldStartPlots(res *results) []coldStartPlot {
	var plots []coldStartPlot
	for _, n := range coldStartSizes(res) {
		p := coldStartPlot{foos: n}
		for _, c := range res.Controllers {
			if cs := findColdStart(c.ColdStarts, n); cs != nil && len(cs.Arrivals) > 0 {
				p.series = append(p.series, series{name: c.Name, times: cs.Arrivals, complete: len(cs.Arrivals) == n})
			}
		}
		if cs := findColdStart(res.Limit, n); cs != nil && len(cs.Arrivals) > 0 {
			p.series = append(p.series, series{name: limitName, times: cs.Arrivals, complete: len(cs.Arrivals) == n})
		}
		if len(p.series) > 0 {
			plots = append(plots, p)
		}
	}
	return plots
}

func writePlot(path string, p coldStartPlot) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, renderPlot(p)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Layout of a plot, in pixels.
const (
	plotWidth   = 960
	plotHeight  = 600
	marginLeft  = 90
	marginRight = 30
	marginTop   = 50
	marginBelow = 70
	tickLength  = 5
)

var (
	colorBackground = color.RGBA{255, 255, 255, 255}
	colorAxis       = color.RGBA{40, 40, 40, 255}
	colorGrid       = color.RGBA{225, 225, 225, 255}
	// Line colours, in series order: ours, the other controller, then the limit, which
	// is always grey.
	seriesColors = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}}
	colorLimit   = color.RGBA{120, 120, 120, 255}
)

// axis maps values to pixels, linearly or on a log10 scale.
type axis struct {
	lo, hi     float64
	log        bool
	pixLo, pix float64 // pixel of lo, and the pixel span (negative upwards)
}

func (a axis) at(v float64) int {
	var f float64
	if a.log {
		f = (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	} else {
		f = (v - a.lo) / (a.hi - a.lo)
	}
	return int(math.Round(a.pixLo + f*a.pix))
}

// renderPlot draws Deployments created (y) over seconds since start (x). When the
// slowest line ends more than 20 times later than the fastest, x is logarithmic, so
// that a line of one second and one of minutes are both readable.
func renderPlot(p coldStartPlot) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, plotWidth, plotHeight))
	draw.Draw(img, img.Bounds(), &image.Uniform{colorBackground}, image.Point{}, draw.Src)
	left, right := marginLeft, plotWidth-marginRight
	top, bottom := marginTop, plotHeight-marginBelow

	first, lastEnd, firstEnd := math.Inf(1), 0.0, math.Inf(1)
	for _, s := range p.series {
		first = min(first, s.times[0])
		end := s.times[len(s.times)-1]
		lastEnd, firstEnd = max(lastEnd, end), min(firstEnd, end)
	}
	x := axis{lo: 0, hi: roundUp(lastEnd), pixLo: float64(left), pix: float64(right - left)}
	if firstEnd > 0 && lastEnd/firstEnd > 20 {
		x.log = true
		x.lo = math.Pow(10, math.Floor(math.Log10(max(first, 1e-3))))
		x.hi = math.Pow(10, math.Ceil(math.Log10(lastEnd)))
	}
	y := axis{lo: 0, hi: float64(p.foos), pixLo: float64(bottom), pix: float64(top - bottom)}

	// Grid, ticks and tick labels.
	for _, v := range xTicks(x) {
		px := x.at(v)
		vline(img, px, top, bottom, colorGrid)
		vline(img, px, bottom, bottom+tickLength, colorAxis)
		label := tickLabel(v)
		drawText(img, px-textWidth(label)/2, bottom+tickLength+15, label, colorAxis)
	}
	for _, v := range linearTicks(0, y.hi) {
		py := y.at(v)
		hline(img, left, right, py, colorGrid)
		hline(img, left-tickLength, left, py, colorAxis)
		label := tickLabel(v)
		drawText(img, left-tickLength-4-textWidth(label), py+4, label, colorAxis)
	}
	hline(img, left, right, bottom, colorAxis)
	vline(img, left, top, bottom, colorAxis)

	// Titles.
	title := fmt.Sprintf("Cold start of %d Foos: Deployments created over time", p.foos)
	drawText(img, (left+right)/2-textWidth(title)/2, top-20, title, colorAxis)
	xLabel := "seconds since start (a controller: process start; limit: first request)"
	if x.log {
		xLabel += ", log scale"
	}
	drawText(img, (left+right)/2-textWidth(xLabel)/2, plotHeight-20, xLabel, colorAxis)
	drawTextUp(img, 20, (top+bottom)/2, "Deployments created", colorAxis)

	// Lines, then the legend on top of them.
	legendX, legendY := left+15, top+20
	for i, s := range p.series {
		c := colorLimit
		if s.name != limitName {
			c = seriesColors[i%len(seriesColors)]
		}
		drawSeries(img, x, y, s, c)
		end := s.times[len(s.times)-1]
		entry := fmt.Sprintf("%s: all %d, the last at %s s", s.name, len(s.times), formatNumber(end))
		if !s.complete {
			entry = fmt.Sprintf("%s: %d of %d, the last at %s s (incomplete)", s.name, len(s.times), p.foos, formatNumber(end))
		}
		ly := legendY + i*18
		thickLine(img, legendX, ly-4, legendX+25, ly-4, c)
		drawText(img, legendX+32, ly, entry, colorAxis)
	}
	return img
}

// drawSeries draws the count of Deployments against time as a line through
// (t_i, i+1), starting from zero at the first arrival.
func drawSeries(img *image.RGBA, x, y axis, s series, c color.RGBA) {
	px, py := x.at(s.times[0]), y.at(0)
	if !x.log {
		px = x.at(0)
	}
	for i, t := range s.times {
		nx, ny := x.at(max(t, x.lo)), y.at(float64(i+1))
		thickLine(img, px, py, nx, ny, c)
		px, py = nx, ny
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*exp >= v {
			return m * exp
		}
	}
	return 10 * exp
}

// roundUp rounds v up to the next tick of linearTicks(0, v).
func roundUp(v float64) float64 {
	step := tickStep(v)
	return math.Ceil(v/step*(1-1e-9)) * step
}

// tickStep is a round step that cuts span into about eight.
func tickStep(span float64) float64 { return niceCeil(span / 8) }

// linearTicks are 4 to 10 evenly spaced round values from lo to hi.
func linearTicks(lo, hi float64) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	step := tickStep(hi - lo)
	var ticks []float64
	for v := math.Ceil(lo/step) * step; v <= hi*(1+1e-9); v += step {
		ticks = append(ticks, v)
	}
	return ticks
}

// tickLabel prints a tick value without float noise: 0.3, 2, 1000.
func tickLabel(v float64) string {
	return strconv.FormatFloat(roundTo(v, 9), 'f', -1, 64)
}

// roundTo rounds v to the given number of significant digits.
func roundTo(v float64, digits int) float64 {
	if v == 0 {
		return 0
	}
	scale := math.Pow(10, float64(digits)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*scale) / scale
}

func xTicks(x axis) []float64 {
	if !x.log {
		return linearTicks(x.lo, x.hi)
	}
	var ticks []float64
	for v := x.lo; v <= x.hi*(1+1e-9); v *= 10 {
		ticks = append(ticks, v)
	}
	return ticks
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// thickLine draws a two-pixel-wide line from (x0,y0) to (x1,y1) (Bresenham).
func thickLine(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		for _, d := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
			img.SetRGBA(x0+d[0], y0+d[1], c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * err; e2 >= dy {
			err += dy
			x0 += sx
		} else {
			err += dx
			y0 += sy
		}
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

var face = basicfont.Face7x13

func textWidth(s string) int { return font.MeasureString(face, s).Round() }

// drawText draws s with its baseline starting at (x, y).
func drawText(img draw.Image, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// drawTextUp draws s rotated a quarter turn anticlockwise, centred on (cx, cy).
func drawTextUp(img *image.RGBA, cx, cy int, s string, c color.RGBA) {
	w, h := textWidth(s), face.Height
	flat := image.NewRGBA(image.Rect(0, 0, w, h))
	drawText(flat, 0, face.Ascent, s, c)
	for fx := range w {
		for fy := range h {
			if _, _, _, a := flat.At(fx, fy).RGBA(); a > 0x8000 {
				// (fx, fy) turns to (fy, w-1-fx), then moves to the centre.
				img.SetRGBA(cx-h/2+fy, cy+w/2-1-fx, c)
			}
		}
	}
}
