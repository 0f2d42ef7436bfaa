package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--num", "8,x"},
		{"--num", "0"},
		{"--scenario", "nope"},
		{"--contenders", "raw,kafka-streams"},
		{"--no-such-flag"},
		{"extra"},
		{"--scenario", "noop,"},
		{"--partitions", "-1"},
		{"--chan", "-2"},
		{"--rounds", "-1"},
		{"--timeout", "-1s"},
		{"--duration", "-5s"},
	} {
		var out, progress bytes.Buffer
		err := benchMain(context.Background(), args, &out, &progress)
		if err == nil {
			t.Errorf("bench %v: no error", args)
			continue
		}
		if !errors.Is(err, errUsage) {
			t.Errorf("bench %v: %v, want a usage error", args, err)
		}
	}
	var progress bytes.Buffer
	if err := benchMain(context.Background(), []string{"-h"}, &bytes.Buffer{}, &progress); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("bench -h: %v", err)
	}
	if !strings.Contains(progress.String(), "-scenario") {
		t.Errorf("bench -h printed no flags:\n%s", progress.String())
	}
}

func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	err := benchMain(ctx, []string{
		"--scenario", "noop,io", "--contenders", "raw,databus,limit",
		"--messages", "2000", "--rounds", "1", "--num", "8,64", "--out", dir,
	}, &out, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	for _, want := range []string{
		"| noop | Size=1024 Num=8 | databus |",
		"| io | Num=64 | limit |",
		"`orderly bench --scenario noop,io --contenders raw,databus,limit --messages 2000",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "round 1/1 raw") {
		t.Errorf("no progress:\n%s", progress.String())
	}
	for _, f := range []string{"results.json", "table.md", "chart.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if table, err := os.ReadFile(filepath.Join(dir, "table.md")); err != nil || string(table) != out.String() {
		t.Errorf("table.md: got %q (err %v), want the table printed on stdout:\n%s", table, err, out.String())
	}
}
