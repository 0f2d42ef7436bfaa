package group

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
)

// Offset resets. A committed offset can fall out of the partition's range:
// below the log start once retention or DeleteRecords removed records
// nobody in the group had read, or above the high watermark after a topic
// was recreated. sarama then starts the claim at Consumer.Offsets.Initial
// instead (Consumer.Group.ResetInvalidOffsets), and a partition consumer
// whose fetch offset falls below the log start while it runs (retention
// overtaking a lagging consumer) stops with OFFSET_OUT_OF_RANGE. Either
// way records were skipped that were never handled; this file makes that
// visible, and lets a user refuse it.

// ResetPolicy is what a Group does when a partition's committed offset (or
// its fetch position while running) is out of the partition's range.
type ResetPolicy int

const (
	// ResetFollow (the default): the partition goes on from
	// Sarama.Consumer.Offsets.Initial (the log start with OffsetOldest,
	// the high watermark with OffsetNewest), as sarama and Kafka's
	// auto.offset.reset do. Each reset is logged as a warning (topic,
	// partition, the committed offset, the log start and high watermark,
	// how many records were skipped) and counted (Stats.OffsetResets,
	// Stats.SkippedByReset). A fetch that runs out of range mid-run
	// ends the member's session: the group rejoins at once and the
	// partition's claim starts again from its committed offset, which is
	// then reset and reported the same way.
	ResetFollow ResetPolicy = iota
	// ResetRefuse: Run ends (after draining and committing the rest) with
	// an error wrapping ErrOffsetReset that names the partition, the
	// committed offset and the log start, and nothing is skipped; an
	// operator decides (e.g. moves the committed offset with
	// kafka-consumer-groups --reset-offsets) and starts it again.
	ResetRefuse
)

func (p ResetPolicy) String() string {
	switch p {
	case ResetFollow:
		return "ResetFollow"
	case ResetRefuse:
		return "ResetRefuse"
	}
	return fmt.Sprintf("ResetPolicy(%d)", int(p))
}

// ErrOffsetReset is wrapped by the error Run returns with ResetRefuse when
// a partition's committed offset or fetch position is out of range.
var ErrOffsetReset = errors.New("group: offset out of range (records deleted before they were handled, or the topic recreated)")

// offsetCounters are the Stats of offset resets and of the
// control-record frontier (markers.go).
type offsetCounters struct {
	resets  atomic.Int64 // claims that started from a reset position
	skipped atomic.Int64 // records skipped by those resets
	midRun  atomic.Int64 // fetches that ran out of range while consuming
	control atomic.Int64 // offsets of control records and aborted batches passed while idle
}

func (r *offsetCounters) fill(s *Stats) {
	s.OffsetResets, s.SkippedByReset, s.OutOfRangeMidRun = r.resets.Load(), r.skipped.Load(), r.midRun.Load()
	s.ControlSkipped = r.control.Load()
}

// applyResetPolicy sets sarama's reset switch from the policy: sarama
// resets an out-of-range committed offset itself only when
// ResetInvalidOffsets is on; off, the claim fails with OFFSET_OUT_OF_RANGE
// on the group's error channel, where Run ends (outOfRange).
func applyResetPolicy(sc *sarama.Config, p ResetPolicy) {
	sc.Consumer.Group.ResetInvalidOffsets = p != ResetRefuse
}

// checkReset runs when a claim starts at OffsetOldest or OffsetNewest:
// either nothing was committed for the partition (a new group or a new
// partition) or sarama reset an out-of-range committed offset. It tells
// them apart by asking the coordinator for the committed offset, and
// reports a reset. Either way it learns where the claim starts (the log
// start or the high watermark), which the claim's lag and the
// control-record frontier (markers.go) need. Errors are logged: the claim
// runs on without knowing.
func (c *claimLoop[T]) checkReset(initial int64) {
	g := c.g
	committed, _, err := g.fetchCommitted(c.topic, c.part)
	if err != nil {
		g.errs.add(errOffsets)
		c.log.Warn("claim starts at the reset position; cannot tell whether a committed offset was reset", zap.Error(err))
		return
	}
	logStart, hw, err := g.logBounds(c.topic, c.part)
	if err != nil {
		g.errs.add(errOffsets)
		c.log.Warn("claim starts at the reset position; cannot read the partition's offsets", zap.Int64("committed", committed), zap.Error(err))
		return
	}
	start := logStart
	if initial == sarama.OffsetNewest {
		start = hw
	}
	c.start = start
	c.st.next.Store(start)
	if committed < 0 {
		return // nothing committed yet: not a reset
	}
	skipped := max(start-committed, 0)
	g.offs.resets.Add(1)
	g.offs.skipped.Add(skipped)
	c.log.Warn("committed offset out of range: reset; records from it to where the claim starts are not handled by this group",
		zap.Int64("committed", committed), zap.Int64("log_start", logStart), zap.Int64("high_watermark", hw),
		zap.Int64("reset_to", start), zap.Int64("skipped", skipped), zap.Stringer("policy", g.cfg.OnOffsetReset))
}

// logBounds returns a partition's log start offset and high watermark.
func (g *Group[T]) logBounds(topic string, part int32) (logStart, hw int64, err error) {
	if logStart, err = g.client.GetOffset(topic, part, sarama.OffsetOldest); err != nil {
		return 0, 0, fmt.Errorf("log start of %s/%d: %w", topic, part, err)
	}
	if hw, err = g.client.GetOffset(topic, part, sarama.OffsetNewest); err != nil {
		return 0, 0, fmt.Errorf("high watermark of %s/%d: %w", topic, part, err)
	}
	return logStart, hw, nil
}

// outOfRange handles OFFSET_OUT_OF_RANGE from a partition: a fetch that
// ran out of range while consuming (sarama then shuts the partition's
// consumer down and closes its Messages; the claim loop returns, which
// ends the session, and the claim starts again from the committed offset,
// reset by sarama: checkReset reports it), or, with ResetRefuse, a claim
// that could not start from its committed offset. It returns the error
// Run must end with, if any.
func (g *Group[T]) outOfRange(ce *sarama.ConsumerError) error {
	fields := []zap.Field{zap.String("topic", ce.Topic), zap.Int32("partition", ce.Partition), zap.Error(ce.Err)}
	committed, logStart, hw := int64(-1), int64(-1), int64(-1)
	if g.client != nil {
		if off, _, err := g.fetchCommitted(ce.Topic, ce.Partition); err == nil {
			committed = off
		}
		if ls, h, err := g.logBounds(ce.Topic, ce.Partition); err == nil {
			logStart, hw = ls, h
		}
	}
	fields = append(fields, zap.Int64("committed", committed), zap.Int64("log_start", logStart), zap.Int64("high_watermark", hw))
	if g.cfg.OnOffsetReset == ResetRefuse { // Run returns it: its caller logs it, once
		return fmt.Errorf("%w: group %q, %s/%d: committed offset %d, log start %d, high watermark %d: %w",
			ErrOffsetReset, g.cfg.GroupID, ce.Topic, ce.Partition, committed, logStart, hw, ce.Err)
	}
	g.offs.midRun.Add(1)
	g.log.Warn("fetch offset out of range while consuming (retention or DeleteRecords passed this member); "+
		"the session restarts and the partition goes on from the reset position", fields...)
	return nil
}
