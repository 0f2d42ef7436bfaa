package group

import (
	"sync/atomic"

	"github.com/orderly-go/orderly/dispatch"
)

// Outcomes count what became of a partition's messages on this member.
// Each message its claims finished counts once, as Handled, DeadLettered,
// Parked, Skipped or Resumed; a message this member finished and then
// skipped, after its final commit of the partition was lost, counts twice
// (Handled, then Resumed).
//
// Parked counts events, not messages: each time one of the partition's
// messages was moved to the parked queue (Unordered with a DataPath),
// from its claim, or again from the queue when its redelivery failed or
// was deferred. The claim counts a parked message finished there; the
// parked queue hands it to Do again, and how that redelivery ends counts
// too, under the partition it came from, whether or not this member still
// claims it: Handled, DeadLettered, or Parked once more. So Handled
// counts each message Do handled, from its claim or from the parked
// queue, and Handled summed over the partitions is Stats.Handled (PartitionStats lists the claimed
// partitions only: one that has left this member keeps its counts, shown
// again once claimed). A parked message a stop drops or leaves unfinished
// (Stats.Dropped, Stats.Abandoned) has no end counted: the next run takes
// it from the queue. A dead letter written after the drain that held its
// message gave up on it (past DrainTimeout: Stats.Abandoned counts the
// message, and the next owner, or the next run, handles it again) counts
// DeadLettered all the same, under its partition, as Stats.DeadLettered
// counts it: DeadLettered summed over the partitions is
// Stats.DeadLettered. A park written that late counts Parked all the
// same: its parked copy is Do's to see again, and counts its end too.
type Outcomes struct {
	// Handled: Do returned nil for it while its claim, or the parked
	// queue's redelivery, still took it back; not after a drain gave up on
	// its call (Stats.Abandoned counts that one, and the partition's next
	// owner, or the next run for a parked message, handles it again).
	Handled      int64
	DeadLettered int64 // its dead letter was written (then it counted as finished)
	Parked       int64 // moved to the parked queue on disk: Do sees it again from there, and its end counts again
	Skipped      int64 // skipped past: undecodable, or to dead-letter with no destination
	Resumed      int64 // finished by a previous owner (commit metadata), or by this member before its final commit was lost; not handled again
	// FailedAttempts counts the failed attempts charged to the messages
	// above, when each finishes (Message.Attempt minus 1: one handled at
	// its third attempt adds 2; one dead-lettered after Retry.MaxAttempts
	// 3 adds 3; a rejection, BatchError.DeadLetter, is not charged). A
	// parked message's count when it is parked, and those charged to it
	// since, when its redelivery ends: each failed attempt counts once.
	FailedAttempts int64
}

func (o *Outcomes) add(x Outcomes) {
	o.Handled += x.Handled
	o.DeadLettered += x.DeadLettered
	o.Parked += x.Parked
	o.Skipped += x.Skipped
	o.Resumed += x.Resumed
	o.FailedAttempts += x.FailedAttempts
}

// Item fates (dispatch.Item.Fate): how an item finished when not by a
// successful Do.
const (
	fateHandled uint8 = iota
	fateDeadLettered
	fateSkipped
	fateParked
)

// outcomeCounts are a claim's Outcomes as its claim loop last published
// them, for Stats.
type outcomeCounts struct {
	handled, deadLettered, parked, skipped, resumed, failedAttempts atomic.Int64
}

func (c *outcomeCounts) load() Outcomes {
	return Outcomes{Handled: c.handled.Load(), DeadLettered: c.deadLettered.Load(), Parked: c.parked.Load(), Skipped: c.skipped.Load(),
		Resumed: c.resumed.Load(), FailedAttempts: c.failedAttempts.Load()}
}

func (c *outcomeCounts) store(o Outcomes) {
	c.handled.Store(o.Handled)
	c.deadLettered.Store(o.DeadLettered)
	c.parked.Store(o.Parked)
	c.skipped.Store(o.Skipped)
	c.resumed.Store(o.Resumed)
	c.failedAttempts.Store(o.FailedAttempts)
}

// count counts a message that finished, by its fate (dispatch.Item.Fate),
// with failed, the failed attempts charged to it and not counted yet.
func (o *Outcomes) count(fate uint8, failed int) {
	switch fate {
	case fateHandled:
		o.Handled++
	case fateDeadLettered:
		o.DeadLettered++
	case fateSkipped:
		o.Skipped++
	case fateParked:
		o.Parked++
	}
	o.FailedAttempts += int64(failed)
}

// countFinished is the claim loop's AdvanceFunc: it counts each finished
// item by its fate (published at the end of advance).
func (c *claimLoop[T]) countFinished(it *dispatch.Item[Message, T]) {
	c.out.count(it.Fate, it.Attempt-1)
}

// countUnclaimed counts a message that ended outside its partition's
// claim, by its fate, in the outcomes of tp, the partition it came from,
// with failed, the failed attempts charged to it and not counted yet: one
// whose dead letter or park was written, or that was skipped, after its
// owner let go of it (finishWritten). The parked queue's redeliveries
// count theirs a pass at a time (parking.settle).
func (g *Group[T]) countUnclaimed(tp topicPartition, fate uint8, failed int) {
	g.claimsMu.Lock()
	o := g.past[tp]
	o.count(fate, failed)
	g.past[tp] = o
	g.claimsMu.Unlock()
}

// finishWritten runs done, which finishes it once its write landed (its
// dead letter or its park) or was skipped (no dead-letter destination),
// and counts it in its partition's outcomes should its owner have let go
// of it before (a drain past DrainTimeout): the dead letter, skip or park
// happened all the same, and its partition counts it, as Stats does.
func (g *Group[T]) finishWritten(it *dispatch.Item[Message, T], done func() (taken bool)) {
	tp, fate, failed := g.lateCount(it)
	if !done() {
		g.countUnclaimed(tp, fate, failed)
	}
}

// lateCount is what countUnclaimed needs of it, an item whose dead
// letter or park is written (or that is skipped), should its owner have
// let go of it before (its claim ended, or the parked side partition
// drained, past DrainTimeout): the partition its message came from, its
// fate, and the failed attempts its owner would have counted, all of
// them for a claim's item, and those since it was taken from the parked
// queue for a side item. Read before the item is finished: its owner may
// recycle it then.
func (g *Group[T]) lateCount(it *dispatch.Item[Message, T]) (tp topicPartition, fate uint8, failed int) {
	failed = it.Attempt - 1
	if p := g.fail.park; p != nil {
		if s, ok := p.sideMsgOf(it); ok {
			failed = it.Attempt - s.attempt // those before were counted when it was parked
		}
	}
	return topicPartition{it.Msg.Topic, it.Msg.Partition}, it.Fate, failed
}
