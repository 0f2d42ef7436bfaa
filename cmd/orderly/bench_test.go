package main

import (
	"context"
	"os"
	"path/filepath"
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
