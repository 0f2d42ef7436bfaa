package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScaleScenario runs the scale scenario with tiny sizes: a data set per
// partition count, values of 10 KiB (a tenth of the messages: 100),
// raw against orderly, each row with its peak RSS, and the table and
// chart written.
func TestScaleScenario(t *testing.T) {
	dir := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Scenarios:       []string{ScaleScenario},
		Contenders:      []string{"raw", "orderly"},
		Messages:        1000,
		Rounds:          1,
		ScalePartitions: []int{2, 16},
		ScaleValues:     []int{10240},
		Out:             dir,
		Progress:        &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	want := map[string]int{ // case: messages
		"p=2 k=10k v=10KiB": 100, "p=16 k=10k v=10KiB": 100,
	}
	for _, s := range rep.Scenarios {
		l := ScaleLabel(s.Partitions, s.Keys, s.Value)
		if n, ok := want[l]; !ok || n != s.Messages {
			t.Errorf("data set %s of %d messages, want %v", l, s.Messages, want)
		}
	}
	if len(rep.Rows) != 2*len(want) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), 2*len(want))
	}
	for _, r := range rep.Rows {
		if _, ok := want[r.Case]; !ok || len(r.Rates) != 1 || r.Median <= 0 {
			t.Errorf("%s/%s: rates %v", r.Case, r.Contender, r.Rates)
		}
		if r.Contender == "orderly" && (r.Baseline != "raw" || r.Ratio <= 0) {
			t.Errorf("%s/orderly: ratio %v vs %q, want one vs raw", r.Case, r.Ratio, r.Baseline)
		}
		if _, err := os.Stat("/proc/self/clear_refs"); err == nil && (len(r.RSSPeak) != 1 || r.RSSPeak[0] == 0) {
			t.Errorf("%s/%s: peak RSS %v", r.Case, r.Contender, r.RSSPeak)
		}
	}
	table, err := os.ReadFile(filepath.Join(dir, TableFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(table), "| p=16 k=10k v=10KiB | orderly |") {
		t.Errorf("table lacks the scale rows:\n%s", table)
	}
	if _, err := os.Stat(filepath.Join(dir, ScaleChartFile)); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ChartFile)); err == nil {
		t.Errorf("%s written without the io scenario", ChartFile)
	}
}

func TestScaleOptions(t *testing.T) {
	o := Options{Scenarios: []string{"all", "scale"}}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.Scenarios, ","); got != strings.Join(append(ScenarioNames, "scale"), ",") {
		t.Errorf("all,scale runs %s", got)
	}
	o = Options{}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.Scenarios, ","); got != strings.Join(ScenarioNames, ",") {
		t.Errorf("the default runs %s, want all without scale", got)
	}
	for v, n := range map[int]int{100: 1_000_000, 1024: 1_000_000, 10240: 100_000} {
		if got := o.scaleMessages(v); got != n {
			t.Errorf("scale messages at %d B: %d, want %d", v, got, n)
		}
	}
	o = Options{ScaleValues: []int{0}}
	if err := o.setDefaults(); err == nil || !strings.Contains(err.Error(), "--scale-values") {
		t.Errorf("scale value 0: %v", err)
	}
}

// TestRedraw writes the tables and charts of the results.json in
// $ORDERLY_BENCH_REDRAW again, from the numbers it holds:
//
//	ORDERLY_BENCH_REDRAW=$PWD/docs/bench/scale go test ./internal/bench -run TestRedraw
//
// (an absolute path: go test runs in the package directory)
func TestRedraw(t *testing.T) {
	dir := os.Getenv("ORDERLY_BENCH_REDRAW")
	if dir == "" {
		t.Skip("set ORDERLY_BENCH_REDRAW to a directory holding a results.json")
	}
	r, err := ReadReport(filepath.Join(dir, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	files, err := r.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %v", files)
}

func TestReadReport(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Rounds: 1, index: map[[3]string]*Row{}}
	s := scenario{Name: ScaleScenario}
	c := caseSpec{Label: ScaleLabel(8, 10000, 100), Baseline: "raw"}
	r.addScenario(s, &dataset{dataSpec: dataSpec{Messages: 10, Partitions: 8, Keys: 10000}})
	for i, name := range []string{"raw", "orderly"} {
		r.addRow(s, c, name).add(Result{Handled: 10, Elapsed: time.Duration(i+1) * time.Millisecond, CPU: time.Millisecond, RSSStart: 1 << 20, RSSPeak: 2 << 20})
	}
	r.finish()
	if _, err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(filepath.Join(dir, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var want, again strings.Builder
	if err := r.WriteMarkdown(&want); err != nil {
		t.Fatal(err)
	}
	if err := got.WriteMarkdown(&again); err != nil {
		t.Fatal(err)
	}
	if want.String() != again.String() {
		t.Errorf("the table from results.json differs:\n%s\nwant:\n%s", again.String(), want.String())
	}
	if !strings.Contains(want.String(), "| p=8 k=10k v=100B | orderly | 5000 | 0.50x |") {
		t.Errorf("scale table:\n%s", want.String())
	}
}
