package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, progress, err := runCmd2(ctx, "bench",
		"--scenario", "noop,io", "--contenders", "raw,databus,limit",
		"--messages", "2000", "--rounds", "1", "--num", "8,64", "--out", dir,
	)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	for _, want := range []string{
		"| noop | Size=1024 Num=8 | databus |",
		"| io | Num=64 | limit |",
		"`orderly bench --scenario noop,io --contenders raw,databus,limit --messages 2000 --rounds 1 --num 8,64 --out " + dir + "`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(progress, "round 1/1 raw") {
		t.Errorf("no progress:\n%s", progress)
	}
	for _, f := range []string{"results.json", "table.md", "chart.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if table, err := os.ReadFile(filepath.Join(dir, "table.md")); err != nil || string(table) != out {
		t.Errorf("table.md: got %q (err %v), want the table printed on stdout:\n%s", table, err, out)
	}
}

// TestBenchOutUnwritable: an --out directory that cannot be made ends the
// command before any run, naming the flag; nothing is printed on stdout.
func TestBenchOutUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, progress, err := runCmd2(context.Background(), "bench", "--scenario", "noop", "--out", filepath.Join(file, "sub"))
	if err == nil || !strings.HasPrefix(err.Error(), "--out "+filepath.Join(file, "sub")+": ") {
		t.Fatalf("got error %v, want one naming --out %s", err, filepath.Join(file, "sub"))
	}
	if out != "" || strings.Contains(progress, "round") || time.Since(start) > 10*time.Second {
		t.Fatalf("ran before failing (%v): stdout %q, progress %q", time.Since(start), out, progress)
	}
}

// TestBenchScale: the scale flags reach the harness: one tiny data set per
// --scale-partitions value, its rows in the table, scale.png written.
func TestBenchScale(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, progress, err := runCmd2(ctx, "bench",
		"--scenario", "scale", "--contenders", "raw,franz", "--messages", "500", "--rounds", "1",
		"--scale-partitions", "3", "--scale-keys", "50", "--scale-values", "200", "--out", dir,
	)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	if want := "| p=3 k=50 v=200B | franz |"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "scale.png")); err != nil {
		t.Error(err)
	}
}

// TestBenchTimeoutNamed: a run cut short by the run timeout fails naming
// --timeout and its value, and ORDERLY_TIMEOUT when the value came from
// there: a consuming run that outlasts it, and a stall run whose
// in-flight count has not settled by then.
func TestBenchTimeoutNamed(t *testing.T) {
	noop := []string{"--scenario", "noop", "--contenders", "raw", "--messages", "2000", "--rounds", "1"}
	// In flight cannot reach 100000 of 200 messages, nor settle, within
	// the first poll.
	stall := []string{"--scenario", "stall", "--messages", "200", "--max-in-flight", "100000"}
	tests := []struct {
		name string
		vars map[string]string // ORDERLY_* variables
		args []string
		want string // in the error
	}{
		{"run, flag", nil, slices.Concat(noop, []string{"--timeout", "1ms"}), ": the run outlasted --timeout 1ms: raw: handled "},
		{"run, variable", map[string]string{"ORDERLY_TIMEOUT": "1ms"}, noop, ": the run outlasted --timeout 1ms (from ORDERLY_TIMEOUT): raw: handled "},
		{"stall, flag", nil, slices.Concat(stall, []string{"--timeout", "10ms"}), ": orderly: in-flight did not settle within --timeout 10ms: "},
		{"stall, variable", map[string]string{"ORDERLY_TIMEOUT": "10ms"}, stall, ": orderly: in-flight did not settle within --timeout 10ms (from ORDERLY_TIMEOUT): "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lookup := func(k string) (string, bool) { v, ok := tt.vars[k]; return v, ok }
			var progress strings.Builder
			err := run(ctx, append([]string{"bench"}, tt.args...), env{stdout: io.Discard, stderr: &progress, lookup: lookup})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("orderly bench %q: got error %v, want one with %q\nprogress:\n%s", tt.args, err, tt.want, progress.String())
			}
		})
	}
}
