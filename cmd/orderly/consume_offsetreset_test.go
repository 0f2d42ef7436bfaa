package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConsumeOffsetReset: a new group (no committed offsets) starts at
// the log start with --offset-reset earliest (the default), and with
// latest at the end: of 100 records there before it joined and 50
// produced after, it handles 150 and 50, and commits up to the high
// watermarks either way.
func TestConsumeOffsetReset(t *testing.T) {
	t.Parallel() // waits on the broker and child processes
	for _, tt := range []struct {
		reset   string
		handled float64
	}{{"earliest", 150}, {"latest", 50}} {
		t.Run(tt.reset, func(t *testing.T) {
			t.Parallel()
			const topic, grp, parts = "reset", "reset-group", 2
			b := newTopic(t, topic, parts)
			produceKeyed(t, b, topic, 100, 10)
			p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", topic, "--group", grp, "--exec", "cat >/dev/null",
				"--size", "10", "--progress", "off", "--log-level", "info", "--offset-reset", tt.reset)
			p.waitFor(30*time.Second, "both claims to start", func() bool { return strings.Count(p.stderr.String(), "claim started") == parts })
			produceKeyed(t, b, topic, 50, 10)
			p.waitCommitted(b, grp, topic)
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d, want 0\n%s", code, p.output())
			}
			if got := finalFigures(t, p.stdout.String())["handled"]; got != tt.handled {
				t.Fatalf("--offset-reset %s: handled %v, want %v\n%s", tt.reset, got, tt.handled, p.output())
			}
		})
	}
}
