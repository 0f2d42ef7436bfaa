package group

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/commit"
)

// Commit metadata: besides the frontier, every commit of a claim (see
// commit.go) carries the offsets above the frontier that are already
// finished (see commit.EncodeMeta). The next owner of the partition reads
// them back when its claim starts and skips those messages, so a graceful
// handoff repeats nothing even though lanes finish out of offset order,
// and a crash repeats only what finished after the last commit.

// resumeFrom reads the committed offset and metadata of the claim's
// partition and returns the finished offsets it lists, if the metadata was
// written by orderly for the offset the claim starts from; or, when this
// member's previous claim of the partition lost its final commit and the
// coordinator still holds what it held then, the offsets that claim
// finished (lostfinal.go). It reports
// ending when the claim's session or the group ended while it waited to
// read again: the claim should let go at once, before it takes a message.
// When the read failed, the claim keeps the broker's metadata as it is
// until its frontier moves (see metaUnread in mark), and tries to read it
// again at each commit tick until then (readAgain).
func (c *claimLoop[T]) resumeFrom(initial int64) (done commit.Done, ending bool) {
	if c.g.client == nil {
		return commit.Done{}, false
	}
	c.ownLost = c.g.lost.take(topicPartition{c.topic, c.part}) // lostfinal.go; put back if the claim ends having marked nothing (released)
	if initial < 0 {
		c.checkReset(initial) // no commit yet, or sarama reset it (reset.go)
		c.ownLost = nil       // kept only against a committed offset (newLostFinal)
		return commit.Done{}, false
	}
	if c.g.cfg.CommitMetadata < 0 && c.ownLost == nil {
		return commit.Done{}, false
	}
	off, meta, err := c.readCommitted()
	switch {
	case errors.Is(err, errClaimEnding):
		return commit.Done{}, true
	case err != nil:
		// With metadata, the claim keeps the broker's as it is and reads
		// it again (readAgain); without, there is nothing to keep.
		c.metaUnread = c.g.cfg.CommitMetadata >= 0
		c.g.errs.add(errOffsets)
		c.log.Warn("reading commit metadata failed; messages finished by the previous owner may be handled again",
			zap.Int64("offset", initial), zap.Error(err))
		return commit.Done{}, false
	}
	return c.resumeWith(initial, off, meta), false
}

// resumeWith returns what a claim that starts at initial may skip, the
// coordinator holding off with meta (see resumeListed), less anything
// listed at or above the partition's high watermark when the claim
// started: no record there had been written, so none can have finished,
// and skipping the records written there later would lose them. Only a
// truncated log (an unclean leader election) or metadata not written for
// this partition lists such offsets; the claim says so (warning, counted
// in ErrorsBy.Offsets).
func (c *claimLoop[T]) resumeWith(initial, off int64, meta string) commit.Done {
	done := c.resumeListed(initial, off, meta)
	hw := c.st.claim.HighWaterMarkOffset()
	if hw < 0 {
		return done
	}
	if finished, waiting := done.DropFrom(hw); finished > 0 || waiting > 0 {
		c.g.errs.add(errOffsets)
		c.log.Warn("ignoring what the commit metadata lists at or above the high watermark, where no record had been written",
			zap.Int64("offset", off), zap.Int64("high_watermark", hw),
			zap.Int64("finished_above", finished), zap.Int("waiting", waiting))
	}
	return done
}

// resumeListed is what the claim may skip as listed: what this member's
// lost final commit of the partition (ownLost) says it finished, if that
// applies (otherwise ownLost is dropped); else the finished offsets meta
// lists, if orderly wrote it for initial.
func (c *claimLoop[T]) resumeListed(initial, off int64, meta string) commit.Done {
	if own := c.ownLost; own != nil {
		done, ok := own.resume(off, meta, time.Now(), c.g.lost.ttl)
		if ok && off == initial {
			c.log.Info("resuming from this member's own final frontier, which its last claim of the partition could not commit",
				zap.Int64("committed", off), zap.Int64("to", own.next), zap.Int64("finished_above", done.Count()-(own.next-off)),
				zap.Int("waiting", len(done.Waiting)))
			return done
		}
		c.ownLost = nil
	}
	if c.g.cfg.CommitMetadata < 0 {
		return commit.Done{}
	}
	done, err := commit.DecodeMeta(meta)
	switch {
	case errors.Is(err, commit.ErrNotOrderlyMetadata):
		return commit.Done{}
	case err != nil:
		c.g.errs.add(errOffsets)
		c.log.Warn("ignoring corrupt commit metadata", zap.Int64("offset", off), zap.String("metadata", meta), zap.Error(err))
		return commit.Done{}
	case off != initial || done.Base != off:
		c.log.Warn("ignoring commit metadata for another offset",
			zap.Int64("offset", initial), zap.Int64("committed", off), zap.Int64("metadata_base", done.Base))
		return commit.Done{}
	}
	return done
}

// readAgain is the commit ticks' retry of the read of the commit
// metadata that failed when the claim started (metaUnread), while the
// claim has marked nothing of its own, so that the coordinator still holds
// the previous owner's commit. The read runs beside the claim loop (a
// coordinator that does not answer holds it up to Net.ReadTimeout, and
// the loop must go on seeing its messages and a revoke); a tick starts
// one, and a later tick takes its result. Once read, the claim skips what
// the previous owner finished above the messages it has taken, and its
// commits pass on the rest, as if it had read it at its start.
func (c *claimLoop[T]) readAgain() {
	initial := c.st.claim.InitialOffset()
	if !c.metaUnread || c.st.next.Load() != initial {
		return
	}
	if c.reread != nil {
		var r committedRead
		select {
		case r = <-c.reread:
			c.reread = nil
		default:
			return // still reading
		}
		if r.err == nil {
			c.readAgainDone(initial, r.off, r.meta)
			return
		}
		c.log.Debug("reading commit metadata failed again", zap.Int64("offset", initial), zap.Error(r.err))
	}
	c.reread = make(chan committedRead, 1) // cap 1: the reader never blocks
	c.startRead(c.reread)
}

// readAgainDone applies the metadata read by readAgain.
func (c *claimLoop[T]) readAgainDone(initial, off int64, meta string) {
	c.metaUnread = false
	c.resume = c.resumeWith(initial, off, meta)
	taken := c.p.Last()
	if c.ownLost != nil { // it applies (resumeListed): those messages are handled again, counted once
		c.counted += c.takenBelowLost
	}
	c.takenBelowLost = 0
	ahead := commit.Done{Ranges: c.resume.AppendAfter(nil, taken)}
	c.log.Info("commit metadata read at last: skipping what the previous owner finished above the messages taken",
		zap.Int64("offset", initial), zap.Int64("seen", taken),
		zap.Int64("finished_above", ahead.Count()), zap.Int("waiting", len(c.resume.WaitingAfter(nil, taken))))
}

// committedRead is one read of a partition's committed offset and
// metadata.
type committedRead struct {
	off  int64
	meta string
	err  error
}

// errClaimEnding: the claim's session or the group ended while the claim
// read its commit metadata or waited to read it again.
var errClaimEnding = errors.New("group: claim ending")

// errReadLate: a releasing claim's read of its committed offset had no
// answer by the time the claim had to let go (see releaseBy).
var errReadLate = errors.New("group: no answer before the claim had to let go")

// readCommitted reads the partition's committed offset and metadata for
// resumeFrom, trying again within half of
// Sarama.Consumer.Group.Rebalance.Timeout (see readRetrying): under a
// cooperative protocol a revoke of this partition is not seen until the
// claim reads its messages, and the rebalance waits for it. The wait, and
// a read under way, end early, with errClaimEnding, when the session or
// the group ends: a read the coordinator does not answer would otherwise
// hold the claim's revoke up to Net.ReadTimeout. Without the metadata the
// claim would handle again everything the previous owner finished above
// its frontier: a short wait costs less.
func (c *claimLoop[T]) readCommitted() (off int64, meta string, err error) {
	return c.readRetrying(c.g.cfg.Sarama.Consumer.Group.Rebalance.Timeout/2, c.sess.Context().Done(), c.g.stopping, nil)
}

// readRetrying reads the partition's committed offset and metadata. A
// failed read is tried again, Sarama.Metadata.Retry.Max more times,
// Retry.Backoff apart, as long as the try starts within budget of the
// first (a try itself can take up to Net.ReadTimeout). Each read runs
// beside the claim (startRead); waiting for it or for the backoff ends
// early, with errClaimEnding, when sessDone or stopping closes, and with
// errReadLate when late fires (a nil one never does).
func (c *claimLoop[T]) readRetrying(budget time.Duration, sessDone, stopping <-chan struct{}, late <-chan time.Time) (off int64, meta string, err error) {
	retry := c.g.cfg.Sarama.Metadata.Retry
	until := time.Now().Add(budget)
	done := make(chan committedRead, 1)
	for try := 1; ; try++ {
		c.startRead(done)
		select {
		case r := <-done:
			off, meta, err = r.off, r.meta, r.err
		case <-sessDone:
			return off, meta, errClaimEnding // the read finishes into done, unread
		case <-stopping:
			return off, meta, errClaimEnding
		case <-late:
			return off, meta, errReadLate
		}
		if err == nil || try > retry.Max || time.Now().Add(retry.Backoff).After(until) {
			return off, meta, err
		}
		c.log.Debug("reading commit metadata failed; retrying", zap.Int("try", try), zap.Duration("backoff", retry.Backoff), zap.Error(err))
		t := time.NewTimer(retry.Backoff)
		select {
		case <-t.C:
		case <-sessDone:
			t.Stop()
			return off, meta, errClaimEnding
		case <-stopping:
			t.Stop()
			return off, meta, errClaimEnding
		case <-late:
			t.Stop()
			return off, meta, errReadLate
		}
	}
}

// startRead reads the partition's committed offset and metadata in a
// goroutine the group waits for (probes) and sends the result on done,
// which must have room for it.
func (c *claimLoop[T]) startRead(done chan<- committedRead) {
	g, topic, part := c.g, c.topic, c.part
	g.probes.Go(func() {
		off, meta, err := g.fetchCommitted(topic, part)
		done <- committedRead{off: off, meta: meta, err: err}
	})
}

// fetchCommitted asks the group coordinator for the committed offset and
// metadata of one partition. The claims that ask at once (all of them at
// a rebalance or a shutdown) share requests: see committedFetches.
func (g *Group[T]) fetchCommitted(topic string, part int32) (int64, string, error) {
	return g.fetches.fetch(topicPartition{topic, part}, g.fetchCommittedMany)
}
