package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/dispatch"
)

// callPartition is the partition of the first item of the Do call that
// received ctx. Call it in that call, on its goroutine.
func callPartition(g *Group[*Message], ctx context.Context) *dispatch.Partition[Message, *Message] {
	bi, _ := ctx.Value(batchKey{}).(*batchInfo)
	for i := range g.workers {
		if &g.workers[i].info == bi {
			return g.workers[i].items[0].Part()
		}
	}
	return nil
}

// TestOrphanCopyDroppedAtRevokeStaysCharged: with Unordered, a call hung
// past MsgTimeout and its grace is given up on (Orphan) after the claim
// loop last took back what finished, and the partition is revoked before
// it does again: the copy of the hung call's message is made in the
// drain and dropped unrun. The final commit lists the message waiting at
// attempt 2, and the next owner runs it at attempt 2: the hung attempt
// stays charged, as a retry's does at a revoke, so a message that hangs at
// every rebalance still runs out of Retry.MaxAttempts.
//
// The claim loop is held in a commit tick (its status view's lock, taken
// after the tick took back what finished) while the watchdog gives up on
// the call, and the wake Orphan sends it is taken away, so that the next
// thing it sees is the shutdown, as when both arrive at once and its
// select picks the shutdown.
func TestOrphanCopyDroppedAtRevokeStaysCharged(t *testing.T) {
	t.Parallel() // mostly waits out MsgTimeout and its grace
	const n, target = 10, 3
	r := newRig(t, "orphan-revoke", 1, n, n)
	w := r.work(0, 0)
	release := make(chan struct{})
	var closeRelease sync.Once
	t.Cleanup(func() { closeRelease.Do(func() { close(release) }) })
	var first attemptLog
	cfg := r.config("orphan-revoke")
	cfg.Size, cfg.Num, cfg.Ordering = 1, 2, Unordered
	// Given up on after MsgTimeout and its grace (1s): time to hold the
	// claim loop before that.
	cfg.MsgTimeout = time.Second
	cfg.Sarama.Consumer.Offsets.AutoCommit.Interval = time.Hour // the test ticks the claim itself
	logger, logs := observedTee(t)
	cfg.Logger = logger
	hung := make(chan *dispatch.Partition[Message, *Message], 1)
	var g *Group[*Message]
	hang := hangOnFirstAttempt(target, release, &first, w.Do)
	g = newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		if batch[0].Offset == target && batch[0].Attempt == 1 {
			hung <- callPartition(g, ctx)
		}
		return hang(ctx, batch)
	})
	stop := run(t, g)
	var p *dispatch.Partition[Message, *Message]
	select {
	case p = <-hung:
	case <-time.After(time.Minute):
		t.Fatalf("offset %d did not reach Do within a minute", target)
	}
	waitFor(t, time.Minute, "every message above the hung one to be handled", func() bool { return g.Stats().Handled == n-1 })
	st := claimOf(g, r.topic, 0)
	view := &st.view.mu
	view.Lock()
	locked := true
	defer func() {
		if locked {
			view.Unlock()
		}
	}()
	st.tick <- struct{}{}
	// Not g.Stats: it takes the view's lock.
	waitFor(t, time.Minute, "the tick to take back every message above the hung one", func() bool {
		return st.finishedAbove.Load() == n-1-target
	})
	waitFor(t, time.Minute, "the watchdog to give up on the hung call", func() bool { return g.ctr.redelivered.Load() == 1 })
	select {
	case <-p.Wake(): // Orphan's, for the copy: the claim loop sees the shutdown first
	default:
		t.Fatal("no wake pending for the orphan's copy")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case <-g.stopping:
	case <-time.After(time.Minute):
		t.Fatal("the stop did not reach the group within a minute")
	}
	view.Unlock()
	locked = false
	waitFor(t, time.Minute, "the partition's release", func() bool {
		return logs.FilterMessage("partition released").Len() == 1
	})
	closeRelease.Do(func() { close(release) }) // the hung call returns: ignored
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if seen, _ := first.get(); len(seen) != 1 {
		t.Fatalf("attempts of offset %d under the first member: got %v, want [1] (its copy dropped unrun at the revoke)", target, seen)
	}
	c := r.b.Commits(cfg.GroupID, r.topic)[0]
	d, err := commit.DecodeMeta(c.Metadata)
	if err != nil {
		t.Fatalf("final commit's metadata %q: %v", c.Metadata, err)
	}
	if wt, ok := d.WaitingAt(target); c.Offset != target || !ok || wt.Attempt != 2 {
		t.Errorf("final commit: got offset %d, offset %d listed waiting %v at attempt %d; want offset %d, listed at attempt 2",
			c.Offset, target, ok, wt.Attempt, target)
	}

	var next attemptLog
	cfg = r.config(cfg.GroupID) // commits at the rig's interval
	cfg.Size, cfg.Num, cfg.Ordering = 1, 2, Unordered
	b := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target {
				next.add(m.Attempt)
			}
		}
		return w.Do(ctx, batch)
	})
	stopB := run(t, b)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if seen, _ := next.get(); len(seen) != 1 || seen[0] != 2 {
		t.Errorf("attempts of offset %d under the next owner: got %v, want [2] (the hung attempt 1 charged)", target, seen)
	}
}
