package group

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
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
	const n, keys = heldN, heldKeys
	r, cfg, do, failing := heldLaneRig(t, "pass-on", 2*time.Second)

	byA := r.oneLaneHeld(cfg, do)
	stoppedA := time.Now()

	// B: the held lane takes its whole share (MaxInFlight 8, one
	// partition), so it stops receiving long before the end.
	cfgB := cfg
	cfgB.MaxInFlight, cfgB.Chan = 8, 1
	b := newGroup(t, cfgB, do)
	stopB := run(t, b)
	waitFor(t, time.Minute, "B to skip what A finished and commit", func() bool {
		return b.Stats().Resumed > 0 && r.b.Commits(cfg.GroupID, r.topic)[0].At.After(stoppedA)
	})
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

// The held-lane tests: heldN messages over heldKeys keys on one
// partition, and a first member that fails at offset heldTarget, so that
// it finishes all but that message's lane.
const heldN, heldKeys, heldTarget = 300, 10, 5

// heldLaneRig starts the rig of a held-lane test of group name, with its
// Config (Size 1, Num 4, retries backoff apart) and a Do that fails at
// heldTarget until failing is cleared.
func heldLaneRig(t *testing.T, name string, backoff time.Duration) (r *rig, cfg Config, do func(context.Context, []*Message) error, failing *atomic.Bool) {
	t.Helper()
	r = newRig(t, name, 1, heldN, heldKeys)
	do, failing = r.work(0, 0).failingAt(heldTarget)
	cfg = r.config(name)
	cfg.Size, cfg.Num = 1, 4
	cfg.Retry = Retry{Backoff: backoff, MaxBackoff: backoff, Jitter: -1}
	return r, cfg, do, failing
}

// oneLaneHeld runs a member of cfg on do (failing at heldTarget) until it
// has handled all but heldTarget's lane, stops it, and returns its final
// commit as the broker holds it: at offset heldTarget, listing in its
// metadata what the member finished above.
func (r *rig) oneLaneHeld(cfg Config, do func(context.Context, []*Message) error) broker.Commit {
	r.t.Helper()
	a := newGroup(r.t, cfg, do)
	stop := run(r.t, a)
	waitFor(r.t, time.Minute, "the first member to finish all but one lane", func() bool { return a.Stats().Handled >= heldN-heldN/heldKeys })
	if err := stop(); err != nil { // its final commit marks everything it finished
		r.t.Fatal(err)
	}
	c := r.b.Commits(cfg.GroupID, r.topic)[0]
	if c.Offset != heldTarget {
		r.t.Fatalf("the first member's committed offset: got %d, want %d (the held message)", c.Offset, heldTarget)
	}
	return c
}
