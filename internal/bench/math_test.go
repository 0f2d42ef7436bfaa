package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7, 7, 1, 9, 100}, 7},
	} {
		in := append([]float64(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Fatalf("Median reordered its input: %v", c.in)
			}
		}
	}
	if got := Median([]Seconds{2, 1, 3}); got != 2 {
		t.Errorf("Median of Seconds = %v, want 2", got)
	}
}

func TestRatio(t *testing.T) {
	if got := Ratio(44, 100); math.Abs(got-0.44) > 1e-12 {
		t.Errorf("Ratio(44, 100) = %v", got)
	}
	if got := Ratio(5, 0); got != 0 {
		t.Errorf("Ratio(5, 0) = %v, want 0 (no baseline)", got)
	}
}

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	ys := []float64{10, 12, 14, 16, 18}
	if got := Slope(xs, ys); math.Abs(got-2) > 1e-9 {
		t.Errorf("Slope = %v, want 2", got)
	}
	if got := Slope([]float64{1}, []float64{1}); got != 0 {
		t.Errorf("Slope of one point = %v, want 0", got)
	}
	if got := Slope([]float64{1, 1}, []float64{1, 5}); got != 0 {
		t.Errorf("Slope with equal xs = %v, want 0", got)
	}
}

func TestKeyOrderCap(t *testing.T) {
	// 30k messages, the hottest key 4500 of them, 1 ms each: 4.5 s at
	// least, so at most 6667 msg/s (the BRIEF's anchor).
	ds := &dataset{dataSpec: dataSpec{Messages: 30000}, HotCount: 4500}
	if got := ds.KeyOrderCap(time.Millisecond); math.Abs(got-30000/4.5) > 1e-6 {
		t.Errorf("KeyOrderCap = %v, want %v", got, 30000/4.5)
	}
	if got := ds.HotShare(); got != 0.15 {
		t.Errorf("HotShare = %v", got)
	}
	if got := (&dataset{}).KeyOrderCap(time.Millisecond); got != 0 {
		t.Errorf("KeyOrderCap of no data = %v, want 0", got)
	}
}

func TestWorkFailsIsDeterministicAndNearRate(t *testing.T) {
	w := Work{FailRate: 0.01}
	fails := 0
	const n = 200000
	for i := range n {
		a, b := w.Fails(int32(i%8), int64(i), 1), w.Fails(int32(i%8), int64(i), 1)
		if a != b {
			t.Fatalf("Fails(%d, %d, 1) is not deterministic", i%8, i)
		}
		if a {
			fails++
		}
	}
	if rate := float64(fails) / n; rate < 0.009 || rate > 0.011 {
		t.Errorf("failure rate %.4f, want about 0.01", rate)
	}
	// A retry is a fresh draw: almost every failing call succeeds next time.
	again := 0
	for i := range n {
		if w.Fails(0, int64(i), 1) && w.Fails(0, int64(i), 2) {
			again++
		}
	}
	if again > 3*n/10000 {
		t.Errorf("%d messages failed twice in a row, want about %d", again, n/10000)
	}
	if (Work{}).Fails(0, 0, 1) {
		t.Error("FailRate 0 failed")
	}
}

func TestWorkCost(t *testing.T) {
	w := Work{PerCall: 2 * time.Millisecond, PerItem: 20 * time.Microsecond}
	if got := w.Cost(100); got != 4*time.Millisecond {
		t.Errorf("Cost(100) = %v, want 4ms", got)
	}
}

func TestTracker(t *testing.T) {
	var dones atomic.Int32
	tr := newTracker(100, func() { dones.Add(1) })
	time.Sleep(20 * time.Millisecond) // the "join"
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 10 {
				tr.begin()
				time.Sleep(time.Millisecond)
				tr.finish(1)
			}
		})
	}
	wg.Wait()
	if !tr.complete() {
		t.Fatal("tracker not complete after 100 of 100")
	}
	if got := dones.Load(); got != 1 {
		t.Errorf("onDone called %d times, want once", got)
	}
	r := tr.result()
	if r.Handled != 100 {
		t.Errorf("Handled = %d", r.Handled)
	}
	if r.Elapsed < 10*time.Millisecond || r.Elapsed >= r.Total || r.Total < 30*time.Millisecond {
		t.Errorf("Elapsed %v, Total %v: want elapsed >= 10ms, total >= elapsed + the 20ms join", r.Elapsed, r.Total)
	}
	if got := r.Rate(); got <= 0 || got > 100/r.Elapsed.Seconds()+1 {
		t.Errorf("Rate = %v", got)
	}
}

func TestReportRatiosAndMarkdown(t *testing.T) {
	rep := newReport(Options{Rounds: 3, Command: "orderly bench --scenario io"})
	s := scenario{Name: "io"}
	c := caseSpec{Label: "Num=64", Num: 64, Baseline: "limit", Target: 0.95}
	limit := rep.addRow(s, c, "limit")
	orderly := rep.addRow(s, c, "orderly")
	for _, d := range []time.Duration{600, 500, 400} {
		limit.add(Result{Handled: 30000, Elapsed: d * time.Millisecond, Total: (d + 100) * time.Millisecond})
		orderly.add(Result{Handled: 30000, Elapsed: (d + 100) * time.Millisecond, Total: (d + 200) * time.Millisecond})
	}
	fs := scenario{Name: "fail"}
	f0 := rep.addRow(fs, caseSpec{Label: "0%"}, "orderly")
	f1 := rep.addRow(fs, caseSpec{Label: "1%", BaselineCase: "0%", Target: 0.9}, "orderly")
	f0.add(Result{Handled: 1000, Elapsed: time.Second})
	f1.add(Result{Handled: 1000, Elapsed: 2 * time.Second})
	ns := scenario{Name: "noop"}
	tiny := caseSpec{Label: "tiny", Baseline: "raw", Target: 1}
	rep.addRow(ns, tiny, "raw").add(Result{Handled: 1, Elapsed: time.Microsecond})
	rep.addRow(ns, tiny, "orderly").add(Result{Handled: 1, Elapsed: time.Microsecond})
	rep.finish()

	if want := 30000 / 0.5; limit.Median != want {
		t.Errorf("limit median %v, want %v", limit.Median, want)
	}
	if want := (30000 / 0.6) / (30000 / 0.5); math.Abs(orderly.Ratio-want) > 1e-9 || orderly.Baseline != "limit" {
		t.Errorf("orderly ratio %v vs %q, want %v vs limit", orderly.Ratio, orderly.Baseline, want)
	}
	if limit.Ratio != 0 || limit.Baseline != "" {
		t.Errorf("the baseline has a ratio: %v %q", limit.Ratio, limit.Baseline)
	}
	if f1.Ratio != 0.5 || f1.Baseline != "0%/orderly" {
		t.Errorf("failure ratio %v vs %q, want 0.5 vs 0%%/orderly", f1.Ratio, f1.Baseline)
	}
	var buf bytes.Buffer
	if err := rep.WriteMarkdown(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| io | Num=64 | orderly | 50.0k | 0.83x | limit | >= 0.95x: not met | 600ms | 700ms |",
		"| fail | 1% | orderly | 500 | 0.50x | 0%/orderly | >= 0.90x: not met |",
		"| noop | tiny | orderly | 1.00M | 1.00x | raw | >= 1.00x: too short to judge (--messages) |",
		"`orderly bench --scenario io`",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, buf.String())
		}
	}

	dir := t.TempDir()
	files, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("wrote %v, want results.json, table.md and chart.png", files)
	}
	table, err := os.ReadFile(filepath.Join(dir, TableFile))
	if err != nil || string(table) != buf.String() {
		t.Errorf("table.md: got %q (err %v), want what WriteMarkdown writes:\n%s", table, err, buf.String())
	}
	png, err := os.ReadFile(filepath.Join(dir, ChartFile))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("chart.png is not a PNG (err %v)", err)
	}
}

func TestStallSummary(t *testing.T) {
	flat := &StallResult{}
	growing := &StallResult{}
	for i := range 11 {
		flat.Samples = append(flat.Samples, MemSample{T: Seconds(i), HeapInuse: 100 << 20, RSS: 300<<20 + uint64(i%2)<<20})
		growing.Samples = append(growing.Samples, MemSample{T: Seconds(i), HeapInuse: 100<<20 + uint64(i)<<21, RSS: 300 << 20})
	}
	flat.summarize()
	growing.summarize()
	if !flat.Flat || flat.Duration != 10 {
		t.Errorf("flat memory judged %v over %v", flat.Flat, flat.Duration)
	}
	if growing.Flat {
		t.Errorf("heap growing 2 MiB/s judged flat")
	}
	if math.Abs(growing.HeapSlope-2<<20) > 1 {
		t.Errorf("heap slope %v, want %v", growing.HeapSlope, 2<<20)
	}
	if procStatus("VmRSS") == 0 {
		t.Error("VmRSS not read from /proc/self/status")
	}
}
