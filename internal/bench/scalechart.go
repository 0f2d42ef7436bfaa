package bench

import (
	"fmt"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ScaleChartFile is the scale scenario's chart under Options.Out.
const ScaleChartFile = "scale.png"

// writeScaleChart draws the scale scenario's CPU per message against the
// partition count, one line per contender and (keys, value size), on a
// log x axis. With no scale rows it writes nothing.
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
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, k := range order {
		xys := make(plotter.XYs, len(series[k]))
		for j, pt := range series[k] {
			xys[j] = plotter.XY{X: pt[0], Y: pt[1]}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		line.Width = vg.Points(2)
		line.Dashes = plotutil.Dashes(i / 7)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(k, line, points)
	}
	p.Y.Max *= 1.4 // room for the legend
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return false, fmt.Errorf("bench: save scale chart: %w", err)
	}
	return true, nil
}
