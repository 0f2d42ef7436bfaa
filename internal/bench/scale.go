package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

// ScaleScenario is the scenario that measures how cost grows with the
// partition count, the key count and the message size: one data set per
// combination of Options.ScalePartitions, ScaleKeys and ScaleValues, each
// consumed by the scale contenders with a no-op handler (Size=1024 Num=8,
// never waiting for a partial batch, as noop), every ratio against raw at
// the same size. It is not part of "all" (it produces a data set of 1M
// messages per combination): ask for it with --scenario scale.
const ScaleScenario = "scale"

// ExtraScenarioNames are the scenarios "all" does not run.
var ExtraScenarioNames = []string{ScaleScenario}

// Scale defaults: the short run. The full matrix adds keys 1M
// and values of 10 KiB (--scale-keys 10000,1000000 --scale-values
// 100,10240).
var (
	DefaultScalePartitions = []int{8, 64, 512}
	DefaultScaleKeys       = []int{10_000}
	DefaultScaleValues     = []int{ValueSize}
)

// scaleContenders is the scale scenario's default set.
var scaleContenders = []string{"raw", "franz", "orderly"}

// scaleMessages is the messages of a scale data set with values of value
// bytes: 1M at 100 B (or --messages), and ten times fewer per 10x the value
// size beyond 1 KiB (100k at 10 KiB), so that no data set holds much more
// than 1 GB.
func (o *Options) scaleMessages(value int) int {
	n := 1_000_000
	if o.Messages > 0 {
		n = o.Messages
	}
	for v := value; v > 1024; v /= 10 {
		n /= 10
	}
	return max(n, 1)
}

// scaleScenarios is the scale scenario's data sets, smallest first.
func (o *Options) scaleScenarios() []scenario {
	var out []scenario
	for _, v := range o.ScaleValues {
		for _, k := range o.ScaleKeys {
			for _, p := range o.ScalePartitions {
				out = append(out, scenario{
					Name: ScaleScenario,
					Data: dataSpec{Messages: o.scaleMessages(v), Partitions: p, Keys: k, Value: v},
					Cases: []caseSpec{{Label: ScaleLabel(p, k, v), Num: 8, Size: 1024, Ticker: -1,
						Baseline: "raw", Target: 0.95}},
					Contenders: scaleContenders,
					Note:       fmt.Sprintf("no-op handler, values of %d B; peak RSS of the whole process (broker and its copy of the data set included)", v),
				})
			}
		}
	}
	return out
}

// ScaleLabel is the case label of a scale data set: "p=64 k=10k v=100B".
func ScaleLabel(partitions, keys, value int) string {
	return fmt.Sprintf("p=%d k=%s v=%s", partitions, shortCount(keys), shortBytes(value))
}

func shortCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func shortBytes(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// resetPeakRSS collects the heap, returns freed memory to the OS and
// resets the process's peak RSS (VmHWM, Linux's clear_refs 5), so that a
// run's VmHWM afterwards is that run's own peak. It returns the RSS it
// starts from; 0 where the platform cannot reset the peak (then no peak is
// reported).
func resetPeakRSS() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0
	}
	return procStatus("VmRSS")
}

// scaleRow is the scale table's view of one contender at one size.
type scaleRow struct {
	row, base *Row
	value     int
}

// writeScale writes the scale scenario's table: per size and contender
// msg/s, MB/s of values, CPU per message and peak RSS, each with its ratio
// to raw at the same size (medians of per-round ratios).
func (r *Report) writeScale(b *strings.Builder) {
	var rows []scaleRow
	for _, row := range r.Rows {
		if row.Scenario != ScaleScenario || len(row.Rates) == 0 {
			continue
		}
		base := r.index[[3]string{row.Scenario, row.Case, "raw"}]
		rows = append(rows, scaleRow{row: row, base: base, value: r.scaleValue(row.Case)})
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n| scale | contender | msg/s | vs raw | MB/s (values) | CPU/msg | vs raw | peak RSS | above start | vs raw |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range rows {
		ratio := func(xs, bs []float64) string {
			if s.base == nil || s.base == s.row || len(bs) != len(xs) {
				return ""
			}
			return fmt.Sprintf("%.2fx", PairedRatio(xs, bs, Median(bs)))
		}
		var baseRates, baseCPU, basePeak []float64
		if s.base != nil {
			baseRates, baseCPU, basePeak = s.base.Rates, s.base.CPU, toFloats(s.base.RSSPeak)
		}
		peak, above := "", ""
		if len(s.row.RSSPeak) > 0 {
			peak = mib(uint64(Median(toFloats(s.row.RSSPeak))))
			above = mib(uint64(Median(toFloats(s.row.RSSAbove))))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s |\n",
			s.row.Case, s.row.Contender, FormatCount(s.row.Median), ratio(s.row.Rates, baseRates),
			s.row.Median*float64(s.value)/1e6, fmtMicros(s.row.MedCPU), ratio(s.row.CPU, baseCPU),
			peak, above, ratio(toFloats(s.row.RSSPeak), basePeak))
	}
	b.WriteString("\nscale: CPU/msg vs raw above 1 is more CPU than raw; peak RSS is the process's VmHWM over the run (reset before it), broker and its copy of the data set included; above start is that peak less the RSS the run started from.\n")
}

// scaleValue is the value size of a scale case.
func (r *Report) scaleValue(label string) int {
	for _, s := range r.Scenarios {
		if s.Name == ScaleScenario && ScaleLabel(s.Partitions, s.Keys, s.Value) == label {
			return s.Value
		}
	}
	return ValueSize
}

func toFloats(xs []uint64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// scaleSeries groups the scale rows by contender and (keys, value): one
// line of the chart each, points sorted by partitions.
func (r *Report) scaleSeries() (order []string, series map[string][][2]float64) {
	series = map[string][][2]float64{}
	for _, s := range r.Scenarios {
		if s.Name != ScaleScenario {
			continue
		}
		for _, name := range ContenderNames {
			row := r.index[[3]string{ScaleScenario, ScaleLabel(s.Partitions, s.Keys, s.Value), name}]
			if row == nil || len(row.CPU) == 0 {
				continue
			}
			key := fmt.Sprintf("%s k=%s v=%s", name, shortCount(s.Keys), shortBytes(s.Value))
			if _, ok := series[key]; !ok {
				order = append(order, key)
			}
			series[key] = append(series[key], [2]float64{float64(s.Partitions), row.MedCPU})
		}
	}
	for _, k := range order {
		slices.SortFunc(series[k], func(a, b [2]float64) int { return int(a[0] - b[0]) })
	}
	return order, series
}

// runScale runs the scale scenario's data sets one after another, each on
// an empty broker: a data set is consumed only by its own case, and the
// earlier ones would otherwise sit in the heap and the RSS measured.
func (h *harness) runScale(ctx context.Context) error {
	for _, s := range h.opts.scaleScenarios() {
		if len(h.data) > 0 {
			if err := h.restartBroker(); err != nil {
				return fmt.Errorf("bench: scenario %s: %w", s.Name, err)
			}
		}
		if err := h.runScenario(ctx, s); err != nil {
			return fmt.Errorf("bench: scenario %s %s: %w", s.Name, s.Cases[0].Label, err)
		}
	}
	return nil
}

// runOneRSS is runOne with the run's peak RSS measured: the peak is reset
// (after a collection that returns freed memory to the OS) just before the
// run and read just after it.
func (h *harness) runOneRSS(ctx context.Context, con Contender, spec RunSpec) (Result, error) {
	start := resetPeakRSS()
	r, err := h.runOne(ctx, con, spec)
	if start > 0 {
		r.RSSStart, r.RSSPeak = start, procStatus("VmHWM")
	}
	return r, err
}

// ReadReport loads a results.json written by WriteFiles, so that its
// tables and charts can be written again (after a change to how they are
// drawn) without measuring again.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r := &Report{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("bench: read %s: %w", path, err)
	}
	r.index = map[[3]string]*Row{}
	for _, row := range r.Rows {
		r.index[[3]string{row.Scenario, row.Case, row.Contender}] = row
	}
	return r, nil
}
