package group

import (
	"cmp"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"

	"github.com/orderly-go/orderly/commit"
)

// Commits. sarama's auto-commit is off (see Config.Sarama): its ticker is
// private and each MarkOffset replaces a partition's metadata, so the
// finished set marked once per interval was overwritten by the next
// advance's plain mark before the commit went out. Orderly keeps its own
// interval instead: every Consumer.Offsets.AutoCommit.Interval the commit
// loop signals every claim loop's own tick channel (a channel shared by
// all of them would be locked by every claim loop's select, each time
// round: contention that showed as 5% more time per message), each marks
// its frontier with its finished set encoded once (commitTick), and a
// moment later the loop commits every session that has claims. A claim's
// final commit (at a revoke or shutdown) marks and commits itself. So every
// commit that reaches the broker carries the finished set as of its mark.

// commitLoop ticks every commit interval until stop is closed: the claim
// loops mark, and markLead later every live session commits.
func (g *Group[T]) commitLoop(stop <-chan struct{}) {
	interval := g.cfg.Sarama.Consumer.Offsets.AutoCommit.Interval
	lead := min(max(interval/10, time.Millisecond), 100*time.Millisecond)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	for {
		select {
		case <-ticker.C:
		case <-stop:
			return
		}
		g.tickClaims()
		wait.Reset(lead) // the claim loops mark within microseconds, unless mid-burst
		select {
		case <-wait.C:
		case <-stop:
			wait.Stop()
			return
		}
		for _, sess := range g.liveSessions() {
			g.commits.commit(sess)
		}
	}
}

// tickClaims tells every claim loop to mark for the coming commit.
func (g *Group[T]) tickClaims() {
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	for c := range g.claims {
		select {
		case c.tick <- struct{}{}:
		default:
		}
	}
}

// liveSessions returns the sessions that have claims running.
func (g *Group[T]) liveSessions() []sarama.ConsumerGroupSession {
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	var out []sarama.ConsumerGroupSession
	for c := range g.claims {
		seen := false
		for _, s := range out {
			seen = seen || s == c.sess
		}
		if !seen {
			out = append(out, c.sess)
		}
	}
	return out
}

// metadataRejected handles OFFSET_METADATA_TOO_LARGE for a partition: its
// claim commits without metadata from now on.
func (g *Group[T]) metadataRejected(topic string, part int32, err error) {
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	for c := range g.claims {
		if c.topic == topic && c.part == part && !c.noMeta.Swap(true) {
			g.ctr.metadataRejected.Add(1)
			g.log.Warn("the broker refused the commit metadata; committing without it from now on (a handoff may repeat finished messages)",
				zap.String("topic", topic), zap.Int32("partition", part), zap.Int("limit", g.cfg.CommitMetadata), zap.Error(err))
		}
	}
}

// commitTick marks the claim's frontier and finished set for the commit
// that follows, and trims what the partition no longer needs.
func (c *claimLoop[T]) commitTick() {
	c.advance()
	c.p.Trim()
	c.readAgain() // resume.go
	w, held := c.waiting()
	committed := c.mark(w)
	c.st.finishedAbove.Store(c.p.FinishedAbove())
	c.probeGap() // markers.go
	c.observe(committed, held)
}

// observe publishes the interval for Stats: the frontier's message and
// since when it is, the held count, the metadata size, and the status.
func (c *claimLoop[T]) observe(committed bool, held int) {
	now := time.Now()
	v := &c.st.view
	head := int64(-1)
	if c.p.Unfinished() > 0 {
		head, _ = c.p.Next()
	}
	next := c.st.next.Load()
	lag := max(c.st.highWatermark()-next, 0)
	if next < 0 {
		lag = 0
	}
	v.mu.Lock()
	if head != v.headOffset {
		v.headOffset, v.headSince = head, now
	}
	v.held, v.metaBytes = int64(held), len(c.meta)
	headAge := time.Duration(0)
	if head >= 0 {
		headAge = now.Sub(v.headSince)
	}
	v.mu.Unlock()
	st := v.observe(sample{at: now, offset: next, lag: lag, committed: committed}, c.g.cfg.Status.StopAfter)
	stuck := 0
	if p := c.g.workerPool.Load(); p != nil && st.Code != StatusOK && p.StuckNow() > 0 {
		c.workers = p.Workers(c.workers[:0])
		for i, w := range c.workers {
			if w.Stuck && c.g.sched.Runs(p.Worker(i), c.p) {
				stuck++ // stuck on a call that holds this partition's messages
			}
		}
	}
	st = explain(st, head, headAge, c.g.cfg.Status.StuckHead, stuck, c.paused)
	v.mu.Lock()
	v.status = st
	v.mu.Unlock()
}

// mark records the frontier, with the finished offsets above it and the
// waiting messages (see waiting) as metadata, for the next commit, and
// reports whether it marked anything. It marks again when nothing moved
// but the partition has work left (a stuck head): the commit then goes
// out anyway, as the Java client's auto-commit does, so lag monitors see a
// consumer that commits without progress (Burrow's STALL) rather than one
// that stopped; unless the group is paused (Pause): then it is STOP. A
// claim that could not read the previous owner's metadata marks nothing
// until its frontier moves past the committed offset, so that the
// broker keeps that metadata for the next owner (a stuck head there is
// then STOP).
func (c *claimLoop[T]) mark(waiting []commit.Waiting) bool {
	next, ok := c.p.Next()
	if !ok {
		// Nothing received yet. A claim that started at the reset
		// position knows it (checkReset): mark it once, so that a claim
		// revoked before it received anything leaves its start committed
		// (one that started at a committed offset has it committed, with
		// the previous owner's metadata, which must stay).
		start := c.st.next.Load()
		if c.marked || start < 0 || c.st.claim.InitialOffset() >= 0 {
			return false
		}
		c.sess.MarkOffset(c.topic, c.part, start, "")
		c.sess.ResetOffset(c.topic, c.part, start, "")
		c.marked = true
		return true
	}
	var meta string
	if limit := c.g.cfg.CommitMetadata; limit >= 0 && !c.st.noMeta.Load() {
		var ranges []commit.Range
		next, ranges, _ = c.p.Finished(c.ranges)
		// A message listed waiting before revoke's drain may have
		// finished in it.
		waiting = unfinishedOnly(waiting, next, ranges)
		// What the previous owner finished, or left waiting, beyond what
		// this claim has received still is: pass it on.
		ranges = c.resume.AppendAfter(ranges, c.p.Last())
		c.ranges = ranges
		waiting = c.resume.WaitingAfter(waiting, c.p.Last())
		var leftWaiting int
		var leftFinished int64
		meta, leftWaiting, leftFinished = commit.EncodeWaitingMeta(next, waiting, ranges, limit)
		c.watchMetadata(next, len(meta), leftFinished+int64(leftWaiting), limit)
	}
	switch marked := c.st.next.Load(); {
	case c.metaUnread && next == c.st.claim.InitialOffset():
		// The broker's metadata for this offset is the previous
		// owner's, unread (resumeFrom): marking the same offset again
		// would replace it with this claim's smaller view.
		return false
	case next > marked:
		c.sess.MarkOffset(c.topic, c.part, next, meta)
	case next == marked && (!c.marked || meta != c.meta || (c.p.Unfinished() > 0 || c.undispatched.len() > 0) && !c.g.paused.Load()):
		// A claim that started at the reset position has st.next set to
		// it (checkReset) while sarama's offset manager holds no offset
		// yet, and ResetOffset only moves an offset down: mark first. The
		// first mark always goes out, so that a claim revoked before it
		// received anything still leaves its start committed.
		c.sess.MarkOffset(c.topic, c.part, next, meta)
		c.sess.ResetOffset(c.topic, c.part, next, meta)
	default:
		return false
	}
	c.marked = true
	c.meta = meta
	c.st.next.Store(next)
	if r := c.p.Released(); r > c.counted { // what the frontier passed up to next
		c.st.committed.Add(int64(r - c.counted))
		c.counted = r
	}
	return true
}

// waiting lists the partition's messages held first in their lanes (a
// retry's backoff, a deferral, a dead letter being written) with their
// attempt count, due time and first failure, and those let go since and
// not finished yet (due now), sorted by offset, for the commit metadata: a
// new owner continues the count and the backoff, and its dead letter
// reports the first failure. held is how many of them wait
// first in their lanes now (PartitionStats.Held).
func (c *claimLoop[T]) waiting() (w []commit.Waiting, held int) {
	c.held = c.g.sched.WaitingItems(c.p, c.held[:0]) // Attempt read under the scheduler's lock
	w = c.waitingBuf[:0]
	for _, h := range c.held {
		if !h.Held && h.Attempt <= 1 {
			continue // a deferral that ran out: a new owner would do the same without it
		}
		var due time.Time // let go: due now
		if h.Held {
			due, _ = c.g.fail.dueOf(h.Item)
			held++
		}
		w = append(w, commit.Waiting{Offset: h.Offset, Attempt: h.Attempt, NotBefore: due, FirstFailure: h.FirstFailure})
	}
	clear(c.held)
	slices.SortFunc(w, func(a, b commit.Waiting) int { return cmp.Compare(a.Offset, b.Offset) })
	c.waitingBuf = w
	return w, held
}

// addDrained adds to waiting (sorted by offset) the messages that failed
// while the revoked partition drained, at their attempts (due at once: the
// hold hook never timed them), in place of an entry for the same offset
// listed before the revoke (the call then still running). Deferrals,
// uncharged, are left out.
func (c *claimLoop[T]) addDrained(waiting []commit.Waiting) []commit.Waiting {
	c.held = c.g.sched.DrainedWaiting(c.p, c.held[:0])
	for _, h := range c.held {
		if h.Attempt <= 1 {
			continue
		}
		i, found := slices.BinarySearchFunc(waiting, h.Offset, func(w commit.Waiting, off int64) int { return cmp.Compare(w.Offset, off) })
		switch {
		case found:
			if h.Attempt > waiting[i].Attempt {
				waiting[i] = commit.Waiting{Offset: h.Offset, Attempt: h.Attempt, FirstFailure: h.FirstFailure}
			}
		default:
			waiting = slices.Insert(waiting, i, commit.Waiting{Offset: h.Offset, Attempt: h.Attempt, FirstFailure: h.FirstFailure})
		}
	}
	clear(c.held)
	return waiting
}

// unfinishedOnly drops from waiting (sorted by offset) the messages below
// next or within the finished ranges (sorted, half-open), in place. The
// metadata's decoder rejects a waiting message that is finished, and with
// it the whole metadata.
func unfinishedOnly(waiting []commit.Waiting, next int64, finished []commit.Range) []commit.Waiting {
	out, j := waiting[:0], 0
	for _, w := range waiting {
		for j < len(finished) && finished[j].End <= w.Offset {
			j++
		}
		if w.Offset < next || j < len(finished) && finished[j].Start <= w.Offset {
			continue
		}
		out = append(out, w)
	}
	return out
}

// watchMetadata stops the partition from taking messages while its
// finished set no longer fits three quarters of CommitMetadata, and lets
// it go on once the set fits in half (see Config.CommitMetadata).
func (c *claimLoop[T]) watchMetadata(next int64, size int, left int64, limit int) {
	switch {
	case !c.metaFull && (left > 0 || size > limit*3/4):
		c.metaFull = true
		c.g.ctr.metadataFull.Add(1)
		c.log.Info("commit metadata nearly full: taking no new messages until the frontier moves",
			zap.Int64("offset", next), zap.Int("bytes", size), zap.Int64("left", left), zap.Int("limit", limit),
			zap.Int64("unfinished", c.p.Unfinished()))
	case c.metaFull && left == 0 && size <= limit/2:
		c.metaFull = false
		c.log.Info("commit metadata fits again: taking messages", zap.Int64("offset", next), zap.Int("bytes", size))
	}
}
