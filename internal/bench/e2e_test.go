package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHarnessEndToEnd runs every scenario but stall with tiny sizes on the
// kfake broker: raw, databus and limit, two alternating rounds.
func TestHarnessEndToEnd(t *testing.T) {
	dir := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Scenarios:  []string{"noop", "io", "batch", "skew", "fail"},
		Contenders: []string{"raw", "databus", "limit"},
		Messages:   2000,
		Rounds:     2,
		Nums:       []int{8, 64},
		Out:        dir,
		Progress:   &progress,
		Command:    "orderly bench --messages 2000",
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	rows := map[string]*Row{}
	for _, r := range rep.Rows {
		rows[r.Scenario+"/"+r.Case+"/"+r.Contender] = r
		if strings.HasPrefix(r.Contender, "cap") {
			continue
		}
		if len(r.Rates) != 2 || r.Median <= 0 {
			t.Errorf("%s/%s/%s: rates %v, median %v", r.Scenario, r.Case, r.Contender, r.Rates, r.Median)
		}
	}
	for key, base := range map[string]string{
		"noop/Size=1024 Num=8/databus": "raw",
		"io/Num=64/databus":            "limit",
		"io/Num=8/raw":                 "limit",
		"skew/Zipf s=1.1 Num=64/raw":   "cap",
		"fail/1% Num=64/databus":       "0% Num=64/databus",
	} {
		r := rows[key]
		if r == nil {
			t.Errorf("no row %s", key)
			continue
		}
		if r.Baseline != base || r.Ratio <= 0 {
			t.Errorf("%s: ratio %v vs %q, want a ratio vs %q", key, r.Ratio, r.Baseline, base)
		}
	}
	if _, ok := rows["noop/Size=1024 Num=8/limit"]; ok {
		t.Error("limit ran the no-op scenario")
	}
	// The key-order cap is computed from the produced data.
	capRow := rows["skew/Zipf s=1.1 Num=64/cap"]
	var skew ScenarioInfo
	for _, s := range rep.Scenarios {
		if s.Name == "skew" {
			skew = s
		}
	}
	if capRow == nil || skew.HotCount == 0 {
		t.Fatalf("no cap row or hot count: %+v %+v", capRow, skew)
	}
	if want := float64(skew.Messages) / (float64(skew.HotCount) * IOCost.Seconds()); capRow.Median != want {
		t.Errorf("cap %v, want %v", capRow.Median, want)
	}
	// time.Sleep(1ms) takes at least 1ms, so the measured cap is lower.
	if m := rows["skew/Zipf s=1.1 Num=64/"+CapMeasured]; m == nil || m.Median <= 0 || m.Median > capRow.Median {
		t.Errorf("measured cap row %+v, want one at most the nominal cap %v", m, capRow.Median)
	}
	// Raw is measured once per round in io, whatever Num says.
	if a, b := rows["io/Num=8/raw"], rows["io/Num=64/raw"]; a.Rates[0] != b.Rates[0] {
		t.Errorf("raw measured per Num: %v vs %v", a.Rates, b.Rates)
	}
	// Failures happened and were retried.
	if f := rows["fail/1% Num=64/raw"]; f.Failed[0] == 0 {
		t.Error("no failed calls in the 1% scenario")
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| scenario | case | contender |", "| skew | Zipf s=1.1 Num=64 | cap |",
		"against the cap with the measured call cost", "orderly bench --messages 2000"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(progress.String(), "round 2/2 databus") {
		t.Errorf("no progress lines:\n%s", progress.String())
	}
	// Each round runs the contenders in an order rotated by one.
	for round, want := range []string{"raw databus", "databus raw"} {
		var got []string
		prefix := fmt.Sprintf("bench: noop Size=1024 Num=8 round %d/2 ", round+1)
		for line := range strings.Lines(progress.String()) {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				name, _, _ := strings.Cut(rest, ":")
				got = append(got, name)
			}
		}
		if strings.Join(got, " ") != want {
			t.Errorf("noop round %d ran %v, want %s", round+1, got, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Fatalf("results.json: %v, %d rows", err, len(back.Rows))
	}
	if md, err := os.ReadFile(filepath.Join(dir, TableFile)); err != nil || !bytes.Contains(md, []byte("| scenario |")) {
		t.Errorf("%s: %v, want the Markdown table", TableFile, err)
	}
	if png, err := os.ReadFile(filepath.Join(dir, ChartFile)); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("chart.png: %v", err)
	}
}

// TestHarnessOrderly runs orderly side by side with raw and limit, and the
// stall scenario for a second.
func TestHarnessOrderly(t *testing.T) {
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Scenarios:     []string{"noop", "io", "fail", "stall"},
		Contenders:    []string{"raw", "limit", "orderly"},
		Messages:      2000,
		Rounds:        1,
		Nums:          []int{64},
		MaxInFlight:   300,
		StallDuration: time.Second,
		Progress:      &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	n := 0
	for _, r := range rep.Rows {
		if r.Contender == "orderly" {
			n++
			if r.Median <= 0 || r.Ratio <= 0 {
				t.Errorf("orderly %s/%s: median %v ratio %v", r.Scenario, r.Case, r.Median, r.Ratio)
			}
		}
	}
	if n != 4 {
		t.Errorf("%d orderly rows, want 4 (noop, io, fail 0%% and 1%%)", n)
	}
	if len(rep.Stall) != 2 { // limit has no place in the memory scenario
		t.Fatalf("%d stall results, want raw and orderly", len(rep.Stall))
	}
	for _, s := range rep.Stall {
		if len(s.Samples) < 5 || s.HeapFirst == 0 || s.RSSFirst == 0 {
			t.Errorf("stall %s: %d samples, heap %d, rss %d", s.Contender, len(s.Samples), s.HeapFirst, s.RSSFirst)
		}
		// Each of the 8 partitions may have 300/8 = 37 unfinished.
		if s.Contender == "orderly" && s.InFlight < 296 {
			t.Errorf("orderly stalled with %d in flight, want every partition's share of MaxInFlight 300 (296) reached", s.InFlight)
		}
	}
}
