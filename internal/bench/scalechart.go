package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ScaleChartFile is the scale scenario's chart under Options.Out.
const ScaleChartFile = "scale.png"

// writeScaleChart draws the scale scenario's CPU per message against the
// partition count, one line per contender and (keys, value size), on log
// axes (10 KiB values cost tens of times what 100 B ones do). With no scale rows it writes nothing.
func (r *Report) writeScaleChart(path string) (bool, error) {
	order, series := r.scaleSeries()
	if len(order) == 0 {
		return false, nil
	}
	p := plot.New()
	p.Title.Text = "no-op handler: CPU per message vs partitions (median of rounds)"
	p.X.Label.Text = "partitions"
	p.Y.Label.Text = "process CPU µs per message"
	p.X.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	seen := map[float64]bool{}
	lo, hi := 0.0, 0.0
	for _, k := range order {
		for _, pt := range series[k] {
			if !seen[pt[0]] {
				seen[pt[0]] = true
				ticks = append(ticks, plot.Tick{Value: pt[0], Label: strconv.Itoa(int(pt[0]))})
			}
			if lo == 0 || pt[0] < lo {
				lo = pt[0]
			}
			hi = max(hi, pt[0])
		}
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = lo/1.4, hi*1.4
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = microTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	// One colour per contender, one dash pattern per data series (keys,
	// value size).
	var kinds []string
	for _, k := range order {
		if _, kind, ok := strings.Cut(k, " "); ok && !slices.Contains(kinds, kind) {
			kinds = append(kinds, kind)
		}
	}
	for _, k := range order {
		name, kind, _ := strings.Cut(k, " ")
		xys := make(plotter.XYs, len(series[k]))
		for j, pt := range series[k] {
			xys[j] = plotter.XY{X: pt[0], Y: pt[1]}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue
		}
		c := plotutil.Color(slices.Index(ContenderNames, name))
		line.Color, points.Color = c, c
		line.Width = vg.Points(2)
		line.Dashes = plotutil.Dashes(slices.Index(kinds, kind))
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(k, line, points)
	}
	p.Y.Min /= 1.3
	p.Y.Max *= 20 // room for the legend
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return false, fmt.Errorf("bench: save scale chart: %w", err)
	}
	return true, nil
}

// microTicks labels a log µs axis at 1, 2 and 5 times powers of ten.
type microTicks struct{}

func (microTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * p; v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 3, 64)})
			}
		}
	}
	return ticks
}
