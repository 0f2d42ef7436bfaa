package group

import (
	"testing"
	"time"
)

// TestResumedSetPassedOn: a claim commits what the previous owner
// finished beyond the messages it has received itself. Member A finishes
// everything but one lane (held by a failure waiting for its retry) and
// leaves; member B, with a small in-flight share, receives only the start
// of the partition before its fetching pauses behind that lane. B's
// commits, read back from the broker, must still cover every offset A's
// commit covered, and member C, after B leaves, handles only the held
// lane: nothing A finished is handled again.
func TestResumedSetPassedOn(t *testing.T) {
	t.Parallel() // mostly waits on the broker and a retry's backoff
	const n, keys, target = 300, 10, 5
	r := newRig(t, "pass-on", 1, n, keys)
	do, failing := r.work(0, 0).failingAt(target)
	cfg := r.config("pass-on")
	cfg.Size, cfg.Num = 1, 4
	cfg.Retry = Retry{Backoff: 2 * time.Second, MaxBackoff: 2 * time.Second, Jitter: -1}
	interval := cfg.Sarama.Consumer.Offsets.AutoCommit.Interval

	a := newGroup(t, cfg, do)
	stopA := run(t, a)
	waitFor(t, time.Minute, "A to finish all but one lane", func() bool { return a.Stats().Handled >= n-n/keys })
	time.Sleep(5 * interval)
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	byA := r.b.Commits(cfg.GroupID, r.topic)[0]
	if byA.Offset != target {
		t.Fatalf("A's committed offset: got %d, want %d (the held message)", byA.Offset, target)
	}

	// B: the held lane takes its whole share (MaxInFlight 8, one
	// partition), so it stops receiving long before the end.
	cfgB := cfg
	cfgB.MaxInFlight, cfgB.Chan = 8, 1
	b := newGroup(t, cfgB, do)
	stopB := run(t, b)
	waitFor(t, time.Minute, "B to skip what A finished", func() bool { return b.Stats().Resumed > 0 })
	time.Sleep(10 * interval)
	byB := r.b.Commits(cfg.GroupID, r.topic)[0]
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if got, all := b.Stats().Resumed, int64(n-n/keys); got >= all {
		t.Fatalf("B skipped %d messages as finished by A: got all %d, want fewer (B must stop short of the end)", got, all)
	}
	if off, lost := uncovered(coverage(byA), coverage(byB)); lost > 0 {
		t.Errorf("B's commit (offset %d) leaves out %d offsets that A's covered, the first %d: got metadata %q after %q",
			byB.Offset, lost, off, byB.Metadata, byA.Metadata)
	}

	failing.Store(false)
	c := newGroup(t, cfg, do)
	r.runToEnd(c, cfg.GroupID)
	if got, want := c.Stats().Handled, int64(n/keys); got != want {
		t.Errorf("C handled %d messages; want %d (the held lane only)", got, want)
	}
	r.check(false)
}
