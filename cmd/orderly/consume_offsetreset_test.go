package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
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

// TestConsumeResetPastDeletedRecords: a group whose committed offsets fall
// below the log start (records deleted by retention before it handled
// them) restarts at the log start and says so in its final line: the
// resets and the records they skipped, as the broker's log start shows
// them (30 per partition), and nothing else is lost.
func TestConsumeResetPastDeletedRecords(t *testing.T) {
	t.Parallel() // waits on the broker and child processes
	const topic, grp, parts, gone = "deleted", "deleted-group", 2, 30
	b := newTopic(t, topic, parts)
	args := []string{"--brokers", b.Addrs()[0], "--topic", topic, "--group", grp, "--exec", "cat >/dev/null",
		"--size", "10", "--progress", "off"}
	produceKeyed(t, b, topic, 100, 10)
	first := startConsume(t, args...)
	first.waitCommitted(b, grp, topic)
	if code := first.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("first run: exit %d, want 0\n%s", code, first.output())
	}
	wantFigures(t, finalFigures(t, first.stdout.String()), map[string]float64{"offset resets": 0, "skipped by reset": 0})
	committed := b.Committed(grp, topic)
	produceKeyed(t, b, topic, 100, 10)
	to := map[int32]int64{}
	for p, c := range committed {
		to[p] = c + gone
	}
	admin, err := sarama.NewClusterAdmin(b.Addrs(), group.DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords(topic, to); err != nil {
		t.Fatalf("DeleteRecords %v: %v", to, err)
	}
	second := startConsume(t, args...)
	second.waitCommitted(b, grp, topic)
	if code := second.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("second run: exit %d, want 0\n%s", code, second.output())
	}
	wantFigures(t, finalFigures(t, second.stdout.String()), map[string]float64{
		"offset resets": parts, "skipped by reset": parts * gone, "handled": 100 - parts*gone,
	})
}
