package main

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDemoTerminalInterrupted runs a demo interrupted by --timeout with
// its stdout on a pseudo-terminal (the live progress line, redrawn in
// place) and one partition's first call hanging, so that records are left
// unhandled: the line left on screen must not claim a lag of 0 and
// nothing in flight above a report of records not handled and committed
// offsets below the high watermarks. It did: its final redraw came after
// Run returned, from a Stats with no partition claimed.
func TestDemoTerminalInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orderlyBin(t), "demo", "--messages", "20000", "--keys", "100", "--rate", "2000",
		"--io", "0", "--io-item", "0", "--timeout", "3s", "--stuck-partition", "0")
	cmd.Env = procEnv()
	term := startOnTerminal(t, cmd)
	cmd.Wait()
	out, stderr := term.shown(), &term.stderr
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d, want %d (interrupted)\nscreen:\n%q\nstderr:\n%s", code, exitInterrupted, out, stderr.String())
	}
	var live string
	for line := range strings.Lines(out) {
		if strings.Contains(line, "\r") {
			live = line
		}
	}
	if live == "" {
		t.Fatalf("no redrawn progress line in %q", out)
	}
	draws := strings.Split(strings.TrimRight(live, "\n"), "\r")
	last := strings.TrimSpace(draws[len(draws)-1])
	notHandled, err := strconv.Atoi(reportValue(t, out, "not handled"))
	if err != nil || notHandled == 0 || reportValue(t, out, "committed == high watermark") != "no" {
		t.Fatalf("want records not handled and committed offsets below the high watermarks (a stuck partition):\n%s", out)
	}
	if m := regexp.MustCompile(`\b(lag|in flight) 0\b`).FindString(last); m != "" {
		t.Errorf("the progress line left on screen says %q above %d records not handled:\n%s", m, notHandled, last)
	}
	t.Logf("last progress line: %s", last)
}
