package group

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
)

// The frontier past control records. A transaction ends with a marker (a
// control batch) one offset long, and an aborted transaction's records
// never reach Do (read-committed). sarama skips both and does not say
// where its fetch position went, so the frontier, which is one past the
// last message received, stayed one short of the high watermark after
// every marker for as long as nothing followed it: lag never reached 0.
//
// What the claim loop cannot see, it asks for: once a partition is idle
// (nothing unfinished or held, nothing received for a whole commit
// interval) and its high watermark is above the frontier, it reads the
// log from the frontier with a side Fetch (same isolation level as the
// consumer, through the partition leader's connection), and finds how far
// the batches there hold only what the consumer skips: control batches,
// aborted transactional batches (read-committed), and batches whose
// records all lie below the frontier (compaction). The frontier moves to
// the end of that run, and no further: the first batch with a record for
// Do ends it, since that record is on its way (the fetch never commits to
// the high watermark blindly). A probe that finds nothing to skip (a
// record on its way, an open transaction) backs off, doubling up to
// maxProbeBackoff commit intervals, until the partition moves again.

// maxProbeBackoff is the most commit intervals between two side fetches of
// an idle partition that found nothing to skip.
const maxProbeBackoff = 64

// gapProbe is a claim's side-fetch state; owned by the claim loop.
type gapProbe struct {
	done     chan gapResult // the running probe's result (cap 1: never blocks)
	running  bool
	seen     bool  // lastBase is set
	lastBase int64 // the frontier base seen at the previous commit tick
	wait     int   // commit ticks to let pass before the next probe
	backoff  int
}

// gapResult says that [base, end) holds nothing for Do.
type gapResult struct {
	base, end int64
	err       error
}

// probeGap starts a side fetch if the partition is idle below its high
// watermark (see above). The claim loop calls it at every commit tick.
func (c *claimLoop[T]) probeGap() {
	pr := &c.probe
	if c.g.client == nil || pr.running {
		return
	}
	base := c.p.Last() + 1
	if c.p.Last() < 0 {
		base = c.start // nothing received: the claim's first offset
	}
	if base < 0 {
		return
	}
	if !pr.seen || base != pr.lastBase {
		pr.seen, pr.lastBase, pr.wait, pr.backoff = true, base, 0, 0
		return // it moved since the last tick: not idle
	}
	if c.p.Unfinished() > 0 || c.undispatched.len() > 0 || c.st.claim.HighWaterMarkOffset() <= base {
		return
	}
	if pr.wait > 0 {
		pr.wait--
		return
	}
	if pr.done == nil {
		pr.done = make(chan gapResult, 1)
	}
	pr.running = true
	g, topic, part, done := c.g, c.topic, c.part, pr.done
	g.probes.Go(func() {
		end, err := g.gapEnd(topic, part, base)
		done <- gapResult{base: base, end: end, err: err}
	})
}

// gapDone takes a probe's result: if nothing was received meanwhile, the
// frontier passes the gap (a Skip of its last offset: the tracker then
// commits one past it).
func (c *claimLoop[T]) gapDone(r gapResult) {
	pr := &c.probe
	pr.running = false
	received := c.p.Last() + 1
	if c.p.Last() < 0 {
		received = c.start
	}
	if r.err != nil || r.end <= r.base || received != r.base {
		if r.err != nil {
			c.log.Debug("side fetch for the control-record frontier failed", zap.Int64("offset", r.base), zap.Error(r.err))
		}
		pr.backoff = min(2*pr.backoff+1, maxProbeBackoff)
		pr.wait = pr.backoff
		return
	}
	released := c.p.Released()
	if err := c.p.Skip(c.p.Alloc(), r.end-1); err != nil {
		c.badOffset(r.end-1, err)
		return
	}
	// The skip passes offsets, not a message: Stats.Committed counts
	// messages (the partition is idle, so the frontier passed it at once).
	c.counted += c.p.Released() - released
	c.g.offs.control.Add(r.end - r.base)
	pr.lastBase, pr.wait, pr.backoff = r.end, 0, 0
	c.log.Debug("frontier passed control records and aborted batches", zap.Int64("from", r.base), zap.Int64("to", r.end))
}

// errProbe reports a side fetch the broker answered without the partition.
var errProbe = errors.New("group: side fetch")

// gapEnd reads the partition from base with the consumer's isolation level
// and returns the end of the run of batches from base that hold nothing
// for Do (base itself if there is none).
func (g *Group[T]) gapEnd(topic string, part int32, base int64) (int64, error) {
	sc := g.cfg.Sarama
	req := &sarama.FetchRequest{MinBytes: 1, MaxWaitTime: 0}
	switch {
	case sc.Version.IsAtLeast(sarama.V2_1_0_0):
		req.Version = 10
	case sc.Version.IsAtLeast(sarama.V0_11_0_0):
		req.Version = 5
	default:
		return base, nil // no control records before message format 2
	}
	req.MaxBytes = sc.Consumer.Fetch.MaxBytes
	req.Isolation = sc.Consumer.IsolationLevel
	if req.Version >= 7 {
		req.SessionID, req.SessionEpoch = 0, -1 // no fetch session
	}
	req.AddBlock(topic, part, base, sc.Consumer.Fetch.Default, -1)
	leader, err := g.client.Leader(topic, part)
	if err != nil {
		return base, fmt.Errorf("%w of %s/%d at %d: leader: %w", errProbe, topic, part, base, err)
	}
	resp, err := leader.Fetch(req)
	if err != nil {
		return base, fmt.Errorf("%w of %s/%d at %d: %w", errProbe, topic, part, base, err)
	}
	block := resp.GetBlock(topic, part)
	if block == nil {
		return base, fmt.Errorf("%w of %s/%d at %d: no answer for the partition", errProbe, topic, part, base)
	}
	if !errors.Is(block.Err, sarama.ErrNoError) {
		return base, fmt.Errorf("%w of %s/%d at %d: %w", errProbe, topic, part, base, block.Err)
	}
	return gapEndOf(block, base, req.Isolation == sarama.ReadCommitted), nil
}

// gapEndOf scans a fetched partition block from base: batches that hold
// nothing a consumer delivers (control batches; with readCommitted,
// transactional batches of aborted transactions, told by the block's
// AbortedTransactions as sarama's consumer does; batches whose records all
// lie below base) are passed, the first other batch (or a partial one)
// ends the scan. It returns the offset after the last batch passed, at
// most the high watermark.
func gapEndOf(block *sarama.FetchResponseBlock, base int64, readCommitted bool) int64 {
	end := base
	txns := slices.Clone(block.AbortedTransactions)
	slices.SortFunc(txns, func(a, b *sarama.AbortedTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	aborted := map[int64]bool{}
scan:
	for _, recs := range block.RecordsSet {
		b := recs.RecordBatch
		if b == nil || b.PartialTrailingRecord {
			break // a legacy message set (data), or a batch cut short
		}
		for len(txns) > 0 && txns[0].FirstOffset <= b.LastOffset() {
			aborted[txns[0].ProducerID] = true
			txns = txns[1:]
		}
		switch {
		case b.Control:
			if isAbortMarker(b) {
				delete(aborted, b.ProducerID)
			}
		case readCommitted && b.IsTransactional && aborted[b.ProducerID]:
		default:
			for _, r := range b.Records {
				if b.FirstOffset+r.OffsetDelta >= end {
					break scan // a record for Do: on its way
				}
			}
		}
		end = max(end, b.LastOffset()+1)
	}
	if end > block.HighWaterMarkOffset {
		end = max(block.HighWaterMarkOffset, base)
	}
	return end
}

// isAbortMarker reports whether a control batch is an ABORT marker: its
// record's key is a version (int16) and a type (int16), 0 for abort.
func isAbortMarker(b *sarama.RecordBatch) bool {
	if len(b.Records) == 0 || len(b.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(b.Records[0].Key[2:4]) == 0
}
