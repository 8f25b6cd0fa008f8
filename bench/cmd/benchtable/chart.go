package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// sweep is a benchmark shown against a parameter of its sub-benchmarks, in a table after the main
// one and in a chart: each contender's time per op at each value of param, from sub-benchmarks
// named bench/param=N/contender.
type sweep struct {
	id, bench, param, what string
	region                 string // the document's region for the table
	contenders             []string
	legend                 map[string]string // a contender's name in the chart
	// vsFirst adds the ratio of the first contender to each other one to the table.
	vsFirst bool
	// yLabel names the chart's Y axis, in µs.
	yLabel string
}

// byQueue is P10: one hot record as the queue for it grows.
var byQueue = sweep{
	id: "P10", bench: "HotRecordQueue", param: "goroutines", region: "p10",
	what:       "one hot record, time per committed increment",
	contenders: []string{contender, "locker", "rocksdb"},
	legend: map[string]string{
		contender: "recordlock Txn",
		"locker":  "Locker.Lock + fenced Get/Put",
		"rocksdb": "RocksDB pessimistic txn, deadlock detection",
	},
	vsFirst: true,
	yLabel:  "µs per committed increment (median, range of runs)",
}

// byHeld is the cost of a range or key lock as the locks held in its column family grow.
var byHeld = sweep{
	id: "Ranges", bench: "RangeLockHeld", param: "held", region: "held",
	what:       "uncontended lock and release among n held locks",
	contenders: []string{"ranges", "keys", "keyinranges"},
	legend: map[string]string{
		"ranges":      "a range among n held ranges",
		"keys":        "a range among n held keys",
		"keyinranges": "a key among n held ranges",
	},
	yLabel: "µs per lock and release (median, range of runs)",
}

// sweeps are the benchmarks drawn against a parameter, in the order their tables follow the
// main one.
var sweeps = []*sweep{&byQueue, &byHeld}

// point is one contender's ns/op at one value of a sweep's param: the median and the range of
// the runs.
type point struct {
	n                int
	median, min, max float64
	runs             int
}

// series returns, for each contender of sw with results in the main run, its points in
// increasing order of the parameter.
func (sw *sweep) series(s *samples) map[string][]point {
	prefix := sw.bench + "/" + sw.param + "="
	out := map[string][]point{}
	for k, byUnit := range s.main {
		rest, ok := strings.CutPrefix(k.name, prefix)
		if !ok || k.procs != s.procs {
			continue
		}
		num, name, ok := strings.Cut(rest, "/")
		n, err := strconv.Atoi(num)
		vs := byUnit["ns/op"]
		if !ok || err != nil || len(vs) == 0 || !slices.Contains(sw.contenders, name) {
			continue
		}
		median, runs := medianOf(vs)
		out[name] = append(out[name], point{n: n, median: median, min: slices.Min(vs), max: slices.Max(vs), runs: runs})
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b point) int { return a.n - b.n })
	}
	return out
}

// params returns every value of a sweep's param that some contender has a point at, in
// increasing order.
func params(series map[string][]point) []int {
	var ns []int
	for _, ps := range series {
		for _, p := range ps {
			ns = append(ns, p.n)
		}
	}
	slices.Sort(ns)
	return slices.Compact(ns)
}

// pointAt returns the point of ps at n.
func pointAt(ps []point, n int) (point, bool) {
	for _, p := range ps {
		if p.n == n {
			return p, true
		}
	}
	return point{}, false
}

// table returns the table of sw: one line per value of its param, each contender's median and,
// with vsFirst, the first contender's ratio to each other one; "" when there are no results.
func (sw *sweep) table(s *samples) (string, error) {
	series := sw.series(s)
	ns := params(series)
	if len(ns) == 0 {
		return "", nil
	}
	runs := 0
	for _, ps := range series {
		for _, p := range ps {
			runs = max(runs, p.runs)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s by %s (%s), medians of %d runs, the range of the runs in brackets.\n\n", sw.id, sw.param, sw.what, runs)
	head, align := []string{sw.param}, []string{"---:"}
	for _, c := range sw.contenders {
		head, align = append(head, c), append(align, "---:")
	}
	for _, c := range sw.ratioed() {
		head, align = append(head, sw.contenders[0]+" / "+c), append(align, "---:")
	}
	cells := [][]string{head, align}
	for _, n := range ns {
		line := []string{strconv.Itoa(n)}
		for _, c := range sw.contenders {
			cell := "no data"
			if p, ok := pointAt(series[c], n); ok {
				cell = fmt.Sprintf("%s (%s–%s)", show(p.median, "ns/op", statusMet), show(p.min, "ns/op", statusMet), show(p.max, "ns/op", statusMet))
			}
			line = append(line, cell)
		}
		mine, okMine := pointAt(series[sw.contenders[0]], n)
		for _, c := range sw.ratioed() {
			cell := "–"
			if theirs, ok := pointAt(series[c], n); ok && okMine {
				cell = fmt.Sprintf("%.2f×", mine.median/theirs.median)
			}
			line = append(line, cell)
		}
		cells = append(cells, line)
	}
	err := markdownTable(&b, cells)
	return b.String(), err
}

// ratioed returns the contenders the table gives the first one's ratio to: none without vsFirst.
func (sw *sweep) ratioed() []string {
	if !sw.vsFirst {
		return nil
	}
	return sw.contenders[1:]
}

// chart draws sw's results as an SVG chart: time per op against the param, one line per
// contender through its medians, with a bar over the range of its runs. It reports false, and
// writes nothing, when there are no results.
func (sw *sweep) chart(s *samples, w io.Writer) (bool, error) {
	series := sw.series(s)
	ns := params(series)
	if len(ns) == 0 {
		return false, nil
	}
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"} // easier to read small than the serif default
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s", sw.id, sw.what)
	p.X.Label.Text = sw.param + " (log scale)"
	p.Y.Label.Text = sw.yLabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, n := range ns {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	// Room either side, so the end points and their bars are not drawn on the frame.
	p.X.Min, p.X.Max = float64(ns[0])/1.5, float64(ns[len(ns)-1])*1.5
	// Room above the highest bar for the legend, and ticks at round numbers of microseconds.
	top := 0.0
	for _, ps := range series {
		for _, pt := range ps {
			top = max(top, pt.max/1e3)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.45
	p.Y.Tick.Marker = plot.ConstantTicks(roundTicks(p.Y.Max))
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(6)
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	}
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}}
	for i, c := range sw.contenders {
		ps := series[c]
		if len(ps) == 0 {
			continue
		}
		// Each contender's points are drawn a little apart, so that their bars do not overlap.
		pts := spread{points: ps, dodge: math.Pow(1.07, float64(i-len(sw.contenders)/2))}
		line, marks, err := plotter.NewLinePoints(pts)
		if err != nil {
			return false, err
		}
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return false, err
		}
		col := colors[i%len(colors)]
		line.Color, marks.Color, bars.Color = col, col, col
		marks.Shape = shapes[i%len(shapes)]
		marks.Radius = vg.Points(3)
		p.Add(line, marks, bars)
		p.Legend.Add(sw.legend[c], line, marks)
	}
	wt, err := p.WriterTo(7*vg.Inch, 4.5*vg.Inch, "svg")
	if err != nil {
		return false, err
	}
	_, err = wt.WriteTo(w)
	return err == nil, err
}

// spread is one contender's points as the plotter reads them: X the param times dodge, Y the
// median in microseconds, and the range of the runs as the Y error.
type spread struct {
	points []point
	dodge  float64
}

func (s spread) Len() int { return len(s.points) }
func (s spread) XY(i int) (float64, float64) {
	return float64(s.points[i].n) * s.dodge, s.points[i].median / 1e3
}
func (s spread) YError(i int) (float64, float64) {
	p := s.points[i]
	return (p.median - p.min) / 1e3, (p.max - p.median) / 1e3
}

// roundTicks returns ticks from 0 to top at a round step (1, 2 or 5 times a power of ten), at
// most 8 of them, labelled without decimals when the step allows.
func roundTicks(top float64) []plot.Tick {
	if top <= 0 {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10(top)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10} {
		if top/(step*m) <= 8 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for v := 0.0; v <= top; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}
