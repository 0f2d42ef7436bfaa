package group

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
)

// Membership: the session's start and end as Ready, Live and the
// OnAssigned, OnRevoked and OnLost callbacks see them.

// sessionStarted is sarama's Setup: the member joined (again).
func (g *Group[T]) sessionStarted(sess sarama.ConsumerGroupSession) {
	g.joined.Store(true)
	g.lostAt.Store(0)
	g.joinFailure.Store(nil)
	g.noteMemberID(sess)
	g.log.Info("session started", zap.String("member", sess.MemberID()),
		zap.Int32("generation", sess.GenerationID()), zap.Any("claims", sess.Claims()))
}

// noteMemberID records sess's member ID as this member's (see
// instanceHolder), unless it is recorded already.
func (g *Group[T]) noteMemberID(sess sarama.ConsumerGroupSession) {
	id := sess.MemberID()
	if p := g.memberID.Load(); p == nil || *p != id {
		g.memberID.Store(&id)
	}
}

// sessionLost records that the member lost its session (evicted, or its
// final commits refused): Live fails once that lasts LostAfter, and
// Ready until the member joins again.
func (g *Group[T]) sessionLost() {
	g.lostAt.CompareAndSwap(0, time.Now().UnixNano())
}

// lostSession reports whether err says the member's session is gone.
func lostSession(err error) bool {
	return errors.Is(err, sarama.ErrUnknownMemberId) || errors.Is(err, sarama.ErrIllegalGeneration) ||
		errors.Is(err, sarama.ErrFencedInstancedId)
}

// checkRewind compares the claim's initial offset with the one last seen
// committed for the partition: lower is a REWIND (the group's offsets
// reset while it was empty, or another consumer committing older offsets).
func (c *claimLoop[T]) checkRewind(initial int64) {
	if initial < 0 {
		return
	}
	prev, ok := c.g.history.seen(topicPartition{c.topic, c.part}, initial)
	if !ok || initial >= prev {
		return
	}
	c.st.view.seedRewind(prev, initial, time.Now())
	c.log.Warn("the committed offset is below the one last seen: the group's offsets were reset, or another consumer committed older ones",
		zap.Int64("offset", initial), zap.Int64("seen", prev))
}

// released tells OnRevoked or OnLost that the claim ended with the
// frontier at next: revoked when the coordinator holds next or beyond (the
// final commit reached it), lost when it does not or cannot say. A claim
// that never marked and ends where it started (a committed offset) made
// no commit to confirm: revoked, without asking.
func (c *claimLoop[T]) released(next int64, releaseBy time.Time) error {
	var err error
	refused := false // the final commit did not reach the coordinator
	unchanged := !c.marked && next == c.st.claim.InitialOffset()
	if unchanged && c.ownLost != nil {
		// It took this member's lost final commit of the partition and
		// passes it on unused, to the member's next claim.
		c.g.lost.keep(topicPartition{c.topic, c.part}, *c.ownLost)
	}
	if c.g.client != nil && next >= 0 && !unchanged {
		var committed int64
		var meta string
		tp := topicPartition{c.topic, c.part}
		if committed, meta, err = c.readBack(releaseBy); err == nil {
			c.g.history.seen(tp, committed)
			if committed < next {
				refused = true
				err = fmt.Errorf("the coordinator holds offset %d, below the final frontier %d", committed, next)
				if f, ok := newLostFinal(c.start, committed, meta, next, c.meta, time.Now()); ok {
					c.g.lost.keep(tp, f.after(c.ownLost))
				}
			}
		}
	}
	parts := []int32{c.part}
	if err != nil {
		// OnLost either way: nothing confirms the final frontier. The
		// session counts as lost (Ready, Live) only when the coordinator
		// says so; a read-back that failed for a network error says
		// nothing about the session.
		if refused || lostSession(err) {
			c.g.sessionLost()
		}
		if c.g.cfg.OnLost != nil {
			c.g.cfg.OnLost(c.topic, parts, c.st.generation)
		}
		return err
	}
	if c.g.cfg.OnRevoked != nil {
		c.g.cfg.OnRevoked(c.topic, parts, c.st.generation)
	}
	return nil
}

// readBack reads the partition's committed offset and metadata for
// released, trying again (see readRetrying) within a quarter of
// Sarama.Consumer.Group.Rebalance.Timeout and not past releaseBy, and
// giving up on a read under way then too (one the coordinator does not
// answer would hold the claim for Net.ReadTimeout); the session's end
// does not cut it short (the claim is letting go because of it). A read
// that cannot say makes the partition lost (OnLost), and the member keeps
// no lost final commit to resume from.
func (c *claimLoop[T]) readBack(releaseBy time.Time) (off int64, meta string, err error) {
	budget := min(readBackBudget(c.g.cfg.Sarama), time.Until(releaseBy))
	late := time.NewTimer(budget)
	defer late.Stop()
	return c.readRetrying(budget, nil, nil, late.C)
}

// releaseBy is when a claim that starts letting go at start must have
// read back its final commit: releaseWindow after start (config.go). A
// drain that runs its whole DrainTimeout leaves the read-back
// readBackTime, which is its whole quarter of the rebalance timeout only
// while DrainTimeout is at most five eighths of the timeout less
// Heartbeat.Interval: with a default DrainTimeout of half the timeout,
// while Heartbeat.Interval is at most an eighth of it (a shorter default
// drain allows more; see readBackTime). A
// DrainTimeout past releaseWindow leaves it no time (New warns of less
// than minReadBack).
func (c *claimLoop[T]) releaseBy(start time.Time) time.Time {
	return start.Add(releaseWindow(c.g.cfg.Sarama))
}
