package group

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/merge"
)

// binding is the sarama.ConsumerGroupHandler: every claimed partition runs
// its claim loop in the goroutine sarama gives ConsumeClaim.
type binding[T any] struct{ g *Group[T] }

var _ sarama.ConsumerGroupHandler = (*binding[*Message])(nil)

func (b *binding[T]) Setup(sess sarama.ConsumerGroupSession) error {
	b.g.sessionStarted(sess)
	return nil
}

func (b *binding[T]) Cleanup(sess sarama.ConsumerGroupSession) error {
	b.g.log.Info("session ended", zap.String("member", sess.MemberID()), zap.Int32("generation", sess.GenerationID()))
	return nil
}

func (b *binding[T]) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	b.g.noteMemberID(sess) // a cooperative rejoin may change it without Setup
	return b.g.consume(sess, claim)
}

// claimState is what Stats and the commit loop read of a running claim.
type claimState struct {
	claim         sarama.ConsumerGroupClaim
	sess          sarama.ConsumerGroupSession
	tick          chan struct{} // the commit loop's signal to mark (see commitLoop)
	topic         string
	part          int32
	fetched       atomic.Int64
	committed     atomic.Int64 // messages behind the frontier last marked (Stats.Committed)
	released      atomic.Int64 // messages behind the frontier now (as of the last advance), marked or not
	next          atomic.Int64 // offset last marked for commit (the claim's initial offset at first); -1 unknown
	finishedAbove atomic.Int64
	unfinished    atomic.Int64 // fetched, dispatched and not finished (as of the last advance)
	undispatched  atomic.Int64
	received      atomic.Int64 // offset after the last message received, -1 none
	listedHW      atomic.Int64 // high watermark listed by the read-back (readback.go)
	outcomes      outcomeCounts
	fetchPaused   atomic.Bool // sarama's fetching of the partition is paused (out of share, or paced past what the share holds)
	noMeta        atomic.Bool // the broker refused this partition's commit metadata
	generation    int32
	view          partitionView // published at each commit interval (partitionstats.go)
}

func (c *claimState) lag() int64 {
	next := c.next.Load()
	if next < 0 {
		return 0
	}
	return max(c.highWatermark()-next, 0)
}

// highWatermark is the partition's, as of the last fetch response or the
// read-back's listing, whichever is newer.
func (c *claimState) highWatermark() int64 {
	return max(c.claim.HighWaterMarkOffset(), c.listedHW.Load())
}

// claimLoop is one claim's goroutine state: it reads the claim, decodes,
// hands items to the scheduler, takes finished items back, marks the
// commit frontier at every commit tick, and on revoke drains and commits.
// It owns its Partition's tracker and free list.
type claimLoop[T any] struct {
	g      *Group[T]
	sess   sarama.ConsumerGroupSession
	p      *dispatch.Partition[Message, T]
	st     *claimState
	log    *zap.Logger
	topic  string
	part   int32
	resume commit.Done // offsets a previous owner finished (commit metadata)
	start  int64       // the claim's first offset (for OffsetOldest/Newest: from checkReset); -1 unknown

	undispatched undispatched // read while out of share or paced (see undispatched.go)
	pauser       fetchPauser  // nil if the claim cannot pause fetching
	paused       bool         // fetching paused through pauser
	probe        gapProbe     // side fetches past control records (markers.go)

	marked     bool       // mark has given sarama an offset
	metaUnread bool       // the commit metadata could not be read (resumeFrom); read again at commit ticks (readAgain)
	ownLost    *lostFinal // this member's lost final commit of the partition, taken by this claim (lostfinal.go)
	// takenBelowLost counts the messages taken, while metaUnread, below
	// what ownLost's claims counted in committed: readAgainDone leaves
	// them out of committed if ownLost applies.
	takenBelowLost uint64
	reread         chan committedRead // readAgain's read under way, nil if none
	meta           string             // metadata last marked (the offset is st.next)
	metaFull       bool               // the finished set does not fit CommitMetadata: take nothing new
	ranges         []commit.Range
	held           []dispatch.WaitingItem[Message, T] // scratch for waiting
	counted        uint64                             // the partition's Released when last marked, counted in committed (and the skipped messages counted before: markers.go, ownLost)
	workers        []merge.WorkerState                // scratch for observe
	waitingBuf     []commit.Waiting
	finished       func(*dispatch.Item[Message, T]) // countFinished, made once
	out            Outcomes                         // counted here, published to st.outcomes by advance
}

func (g *Group[T]) consume(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	c := &claimLoop[T]{
		g:    g,
		sess: sess,
		p:    g.sched.NewPartition(g.cfg.Chan),
		st: &claimState{claim: claim, sess: sess, topic: claim.Topic(), part: claim.Partition(), tick: make(chan struct{}, 1),
			generation: sess.GenerationID()},
		topic: claim.Topic(),
		part:  claim.Partition(),
		start: max(claim.InitialOffset(), -1),
	}
	c.finished = c.countFinished
	c.log = g.log.With(zap.String("topic", c.topic), zap.Int32("partition", c.part), zap.Int32("generation", sess.GenerationID()))
	c.st.next.Store(max(claim.InitialOffset(), -1)) // OffsetOldest/Newest (< 0): unknown
	c.st.received.Store(-1)
	c.st.view.init(g.cfg.Status.Window)
	c.checkRewind(claim.InitialOffset())
	var ending bool
	c.resume, ending = c.resumeFrom(claim.InitialOffset())
	g.ctr.claims.Add(1)
	g.claimsMu.Lock()
	g.claims[c.st] = struct{}{}
	g.claimsMu.Unlock()
	defer func() {
		g.claimsMu.Lock()
		delete(g.claims, c.st)
		g.ctr.fetched.Add(c.st.fetched.Load())
		g.ctr.committed.Add(c.st.committed.Load())
		tp := topicPartition{c.topic, c.part}
		o := g.past[tp]
		o.add(c.st.outcomes.load())
		g.past[tp] = o
		g.claimsMu.Unlock()
	}()
	c.log.Info("claim started", zap.Int64("offset", claim.InitialOffset()),
		zap.Int64("finished_above", c.resume.Count()), zap.Int("waiting", len(c.resume.Waiting))) // per the commit metadata, or a lost final commit of this member
	if g.cfg.OnAssigned != nil {
		// Here, not in Setup: under a cooperative protocol Setup runs
		// only at the member's first join, and later rounds start claims
		// in the same session.
		g.cfg.OnAssigned(c.topic, []int32{c.part}, c.st.generation)
	}

	if ending {
		return c.revoke(c.endReason()) // before any message: nothing is marked
	}
	msgs := claim.Messages()
	sessDone := sess.Context().Done()
	c.pauser, _ = claim.(fetchPauser)
	for {
		share := c.shareRoom()
		paced := c.listPacing(share)
		room := share && !paced
		c.steerFetch(room, paced)
		if room && c.undispatched.len() > 0 {
			c.intakeHeld()
			continue
		}
		in := msgs
		switch {
		case room, c.pauser != nil:
			// Out of room, read on into held: a revoke is seen at once,
			// and sarama's fetch loop, which waits for every partition
			// to take its last response, is not held up by this one
			// (steerFetch pauses fetching past the hold limit).
		case paced && c.undispatched.len() < c.g.cfg.Chan:
			// Fetching cannot be paused: read on into held for a
			// channel's worth, then wait for the backlog to drain.
		default:
			in = nil // fetching cannot be paused: stop reading until room returns
		}
		select {
		case m, ok := <-in:
			if !ok {
				return c.revoke(endRevoked)
			}
			if c.intakeBurst(m, msgs, room) {
				return c.revoke(endRevoked)
			}
		case <-c.p.Wake():
			c.advance()
		case <-c.st.tick:
			c.commitTick()
		case r := <-c.probe.done:
			c.gapDone(r)
		case <-sessDone:
			return c.revoke(endSessionEnded)
		case <-c.g.stopping:
			return c.revoke(endShutdown)
		}
	}
}

// shareRoom reports whether the claim may dispatch more as far as its
// budget goes: the partition is within its in-flight share and its
// finished set fits the commit metadata. It dispatches only if, besides,
// the workers are short of ready work (pacing, dispatch/pace.go); while
// paced, it reads on into undispatched as far as its share has room.
func (c *claimLoop[T]) shareRoom() bool { return c.p.Room() && !c.metaFull }

// listPacing reports whether the claim, with room in its share, is paced
// by the workers' ready backlog (see dispatch/pace.go), and keeps its
// place on the list of claims woken as that backlog drains: listed while
// paced and holding messages to dispatch, off the list otherwise (out of
// share, or holding none: it reads into undispatched and asks again with
// what it read), so that no wake goes to a claim that would push nothing.
func (c *claimLoop[T]) listPacing(share bool) (paced bool) {
	switch {
	case !share:
		c.p.UnlistPaced()
		return false
	case c.undispatched.len() == 0:
		c.p.UnlistPaced()
		return c.p.Paced()
	default:
		return c.p.ListIfPaced()
	}
}

// holdLimit is how many undispatched messages the claim holds before it
// pauses fetching: a channel's worth, and while paced (not out of share) as
// many more as its share has room for in count and in bytes. Fetching
// resumes at half of it (steerFetch): sarama's next fetch is then under
// way before the held messages run out. Resuming only once they ran out
// leaves the workers idle for the length of a fetch each time (io, Num 64,
// 150k messages: 0.54-0.69x of the sleep limit against 0.90x).
// count and bytes are the partition's Quota.
func (c *claimLoop[T]) holdLimit(paced bool, count int, bytes int64) int {
	limit := c.g.cfg.Chan
	if !paced || c.undispatched.bytes >= bytes {
		return limit
	}
	return max(limit, count)
}

// steerFetch pauses and resumes sarama's fetching of the partition from
// what the claim holds undispatched, with hysteresis. It pauses at the
// hold limit while the claim cannot dispatch (out of share, or paced). It
// resumes, while the claim may dispatch or is paced, once what it holds is
// down to half the limit and to half the bytes its share has room for
// (with large messages the limit is a channel's worth, and the bytes
// decide): the next fetch is then under way before the held messages run
// out. Out of share it stays paused until room returns.
func (c *claimLoop[T]) steerFetch(room, paced bool) {
	if c.pauser == nil {
		return
	}
	count, bytes := c.p.Quota()
	switch limit, n := c.holdLimit(paced, count, bytes), c.undispatched.len(); {
	case !room && n >= limit:
		c.pauseFetch(true)
	case (room || paced) && n <= limit/2 && c.undispatched.bytes <= bytes/2:
		c.pauseFetch(false)
	}
}

// pauseFetch pauses or resumes sarama's fetching of the partition (see
// held), if the claim supports it.
func (c *claimLoop[T]) pauseFetch(pause bool) {
	if c.pauser == nil || c.paused == pause {
		return
	}
	c.paused = pause
	c.st.fetchPaused.Store(pause)
	if pause {
		c.pauser.Pause()
	} else {
		c.pauser.Resume()
	}
}

// intakeHeld dispatches held messages, oldest first, as far as the
// partition's quota (and one burst of Chan) goes. They were counted as
// fetched when held.
func (c *claimLoop[T]) intakeHeld() {
	count, bytes := c.p.Quota()
	for n := min(c.undispatched.len(), c.g.cfg.Chan, max(count, 1)); n > 0; n-- {
		m, size := c.undispatched.pop()
		c.intake(m, size)
		if bytes -= size; bytes <= 0 {
			break
		}
	}
	c.endBurst()
}

// intakeBurst takes m and whatever else is already buffered in msgs, up to
// Chan and the partition's quota, into the scheduler in one step; out of
// room (hold), up to Chan into held. It counts them as fetched and reports
// whether msgs was closed.
func (c *claimLoop[T]) intakeBurst(m *sarama.ConsumerMessage, msgs <-chan *sarama.ConsumerMessage, room bool) (closed bool) {
	more, bytes := c.g.cfg.Chan-1, int64(1<<62)
	if room {
		count, b := c.p.Quota()
		more, bytes = min(more, count-1), b
	}
	n, next := int64(0), int64(0)
	for {
		n++
		next = m.Offset + 1 // m is nil once a receive finds msgs closed
		if room {
			size := msgSize(m)
			c.intake(m, size)
			bytes -= size
		} else {
			c.undispatched.push(m)
		}
		if more <= 0 || bytes <= 0 {
			break
		}
		more--
		var ok bool
		select {
		case m, ok = <-msgs:
			closed = !ok
		default:
		}
		if !ok {
			break
		}
	}
	c.st.fetched.Add(n)
	c.st.received.Store(next)
	if room {
		c.endBurst()
	} else {
		c.st.undispatched.Store(int64(c.undispatched.len()))
	}
	return closed
}

// endBurst hands a burst of intake to the scheduler.
func (c *claimLoop[T]) endBurst() {
	c.p.Flush()
	c.advance() // skipped (undecodable) messages may be at the head
}

// msgSize is what a message counts against MaxInFlightBytes.
func msgSize(m *sarama.ConsumerMessage) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// intake turns one sarama message into an item: decoded, assigned a lane,
// tracked for commits and queued.
func (c *claimLoop[T]) intake(m *sarama.ConsumerMessage, size int64) {
	it := c.p.Alloc()
	msg := &it.Msg
	msg.Topic, msg.Partition, msg.Offset = m.Topic, m.Partition, m.Offset
	msg.Key, msg.Value, msg.Timestamp, msg.Attempt = m.Key, m.Value, m.Timestamp, 1
	msg.Headers = nil
	if len(m.Headers) > 0 {
		hs := make([]Header, len(m.Headers))
		for i, h := range m.Headers {
			hs[i] = Header{Key: h.Key, Value: h.Value}
		}
		msg.Headers = hs
	}
	if c.metaUnread && c.ownLost != nil && m.Offset < c.ownLost.counted {
		c.takenBelowLost++ // counted already, if the lost final commit applies (readAgainDone)
	}
	if c.resume.Contains(m.Offset) {
		// Finished by the previous owner, as its commit metadata says (or
		// by this member, before it lost its final commit).
		c.g.ctr.resumed.Add(1)
		c.out.Resumed++
		if c.ownLost != nil && m.Offset < c.ownLost.counted {
			c.counted++ // the lost claims counted it in committed when they marked it
		}
		if err := c.p.Skip(it, m.Offset); err != nil {
			c.badOffset(m.Offset, err)
		}
		return
	}
	// A message the previous owner left waiting for a retry goes on at
	// its attempt (New sees that attempt too), with its first failure.
	w, waiting := c.resume.WaitingAt(m.Offset)
	if waiting {
		msg.Attempt = max(w.Attempt, 1)
	}
	v, lane, err := c.g.decode(msg)
	if err != nil {
		c.g.ctr.decodeErrors.Add(1)
		if !c.g.fail.dead.enabled() {
			c.g.decodeLog.Warn(c.log, "decode failed; message skipped (no dead-letter destination)", zap.Int64("offset", m.Offset), zap.Error(err))
			c.g.fail.dead.skipped.Add(1) // a dead letter with nowhere to go, as deadLetters.add counts it
			c.out.Skipped++
			if err := c.p.Skip(it, m.Offset); err != nil {
				c.badOffset(m.Offset, err)
			}
			return
		}
		// A poison message: dead-lettered, on a lane of its own (nothing
		// can follow it in order: it was never decoded), its offset
		// committed once its dead letter is written.
		if err := c.p.Track(it, m.Offset, size); err != nil {
			c.badOffset(m.Offset, err)
			return
		}
		p := c.p
		c.g.fail.dead.add(it, func() bool { return p.Complete(it) }, reasonPoison, 0, err)
		return
	}
	it.Val, it.Lane = v, lane
	if waiting {
		// It runs after its backoff, at its attempt.
		err = c.p.AddHeld(it, m.Offset, size, dispatch.Outcome{Kind: kindResumed, Delay: time.Until(w.NotBefore)})
		it.Attempt = msg.Attempt
		it.SetFirstFailure(w.FirstFailure) // for its dead letter (zero from version 2 metadata: the next failure here)
		c.g.ctr.resumedWaiting.Add(1)
	} else {
		err = c.p.Add(it, m.Offset, size)
	}
	if err != nil {
		c.badOffset(m.Offset, err)
	}
}

func (c *claimLoop[T]) badOffset(off int64, err error) {
	c.g.errs.add(errOffsets)
	c.log.Error("message ignored", zap.Int64("offset", off), zap.Error(err))
}

// advance takes back finished items and moves the frontier (marked for
// commit at the next commit tick).
func (c *claimLoop[T]) advance() {
	c.p.AdvanceFunc(c.finished)
	c.st.released.Store(int64(c.p.Released())) // skipped messages count too
	c.st.unfinished.Store(c.p.Unfinished())
	c.st.undispatched.Store(int64(c.undispatched.len()))
	c.st.outcomes.store(c.out)
}

// claimEnd is why a claim lets go, as its release log line says
// ("reason").
type claimEnd string

const (
	endRevoked      claimEnd = "claim revoked" // a rebalance took the partition
	endSessionEnded claimEnd = "session ended" // sarama ended the session under the claim
	endShutdown     claimEnd = "shutdown"      // Run's context ended
)

// endReason is why a claim lets go when its session or the group ended
// (see revoke).
func (c *claimLoop[T]) endReason() claimEnd {
	select {
	case <-c.g.stopping:
		return endShutdown
	default:
		return endSessionEnded
	}
}

// revoke lets the partition go: nothing more is dispatched, queued items are
// dropped, started batches get DrainTimeout to finish (then their ctx is
// cancelled), the final frontier is committed inside the session, and the
// partition is fenced so that later completions cannot be committed.
func (c *claimLoop[T]) revoke(reason claimEnd) error {
	releaseBy := c.releaseBy(time.Now())
	// The waiting messages are dropped with the rest of the queued work:
	// list them first, so that the final commit tells the next owner
	// where their attempts and backoffs stand.
	waiting, _ := c.waiting()
	dropped, abandoned := c.p.Revoke()
	dropped += c.undispatched.drop()
	// The status, lag and stuck head go on being published while the
	// drain waits (it marks nothing: the final mark below carries the
	// waiting messages listed above). What is late after it counts in
	// Stats.Abandoned, whatever its call returns.
	cause := ErrRevoked
	if reason == endShutdown {
		cause = ErrShutdown
	}
	late, inDrain, cancelled, timedOut := c.g.drainAndSeal(c.p, fmt.Errorf("%w: %s/%d after %v", cause, c.topic, c.part, c.g.cfg.DrainTimeout),
		c.advance, c.st.tick, func() {
			c.advance()
			c.observe(false, len(waiting))
		}, nil)
	if timedOut {
		c.log.Warn("drain timeout: cancelling and letting go of unfinished batches",
			zap.Duration("timeout", c.g.cfg.DrainTimeout), zap.Int64("unfinished", late), zap.Int("cancelled", cancelled))
	}
	abandoned += int(inDrain)
	c.mark(c.addDrained(waiting))
	if c.marked {
		// Nothing to commit for a claim that never marked: its commit
		// would only wait its turn on the coordinator's connection
		// (sarama holds it for each request's whole round trip).
		c.g.commits.commit(c.sess)
	}
	next := c.st.next.Load()
	left := c.p.Close()
	c.g.fail.forget(c.p)
	c.g.ctr.dropped.Add(int64(dropped))
	c.g.ctr.abandoned.Add(int64(abandoned) + late)
	c.g.ctr.revokes.Add(1)
	fields := []zap.Field{zap.String("reason", string(reason)), zap.Int64("offset", next),
		zap.Int("dropped", dropped), zap.Int("abandoned", abandoned), zap.Int64("late", late), zap.Int("uncommitted", left)}
	if err := c.released(next, releaseBy); err != nil {
		c.log.Warn("partition lost: the coordinator does not hold its final commit, or could not say; another owner may repeat what finished since the last commit it holds",
			append(fields, zap.Error(err))...)
		return nil
	}
	c.log.Info("partition released", fields...)
	return nil
}
