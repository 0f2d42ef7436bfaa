package bench

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartScenario is the scenario drawn as throughput against Num.
const chartScenario = "io"

// writeChart draws the io scenario's median throughput against Num, one
// line per contender, the limit dashed, on log axes. With no io rows it
// writes nothing.
func (r *Report) writeChart(path string) (bool, error) {
	p, ok := r.chart()
	if !ok {
		return false, nil
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return false, fmt.Errorf("bench: save chart: %w", err)
	}
	return true, nil
}

func (r *Report) chart() (*plot.Plot, bool) {
	series := map[string]plotter.XYs{}
	var order []string
	var nums []float64
	for _, row := range r.Rows {
		if row.Scenario != chartScenario || row.Median <= 0 {
			continue
		}
		if _, ok := series[row.Contender]; !ok {
			order = append(order, row.Contender)
		}
		series[row.Contender] = append(series[row.Contender], plotter.XY{X: float64(row.Num), Y: row.Median})
		if !slices.Contains(nums, float64(row.Num)) {
			nums = append(nums, float64(row.Num))
		}
	}
	if len(order) == 0 {
		return nil, false
	}
	slices.Sort(nums)

	p := plot.New()
	p.Title.Text = "1 ms simulated I/O per message, Size=1: throughput vs Num"
	p.X.Label.Text = "Num (worker goroutines)"
	p.Y.Label.Text = "messages/s (median)"
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	for _, n := range nums {
		ticks = append(ticks, plot.Tick{Value: n, Label: strconv.Itoa(int(n))})
	}
	p.X.Tick.Marker = ticks
	p.Y.Tick.Marker = rateTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = nums[0]/1.4, nums[len(nums)-1]*1.4
	for i, name := range order {
		xys := series[name]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		line.Width = vg.Points(2)
		points.Shape = draw.CircleGlyph{}
		if name == "limit" {
			line.Color, points.Color = color.Black, color.Black
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			name = "limit (Num goroutines, no Kafka)"
		}
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	p.Y.Min /= 1.3
	p.Y.Max *= 1.5 // room for the legend
	return p, true
}

// rateTicks labels a log msg/s axis at 1, 2 and 5 times powers of ten.
type rateTicks struct{}

func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for p := math.Pow(10, math.Floor(math.Log10(max(lo, 1)))); p <= hi; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * p; v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: tickLabel(v)})
			}
		}
	}
	return ticks
}

func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}
