package group

import (
	"sync/atomic"

	"github.com/orderly-go/orderly/dispatch"
)

// Outcomes count what became of a partition's messages: each message
// finished counts once, as Handled, DeadLettered, Parked, Skipped or
// Resumed; a message this member finished and then skipped, after its
// final commit of the partition was lost, counts twice (Handled, then
// Resumed).
type Outcomes struct {
	// Handled: Do returned nil for it while the claim still took it back;
	// not after the claim's drain gave up on its call (Stats.Abandoned
	// counts that one, and the partition's next owner handles it again).
	Handled      int64
	DeadLettered int64 // its dead letter was written (then it counted as finished)
	Parked       int64 // parked on disk (Unordered with a DataPath): Do sees it again from the parked queue
	Skipped      int64 // skipped past: undecodable, or to dead-letter with no destination
	Resumed      int64 // finished by a previous owner (commit metadata), or by this member before its final commit was lost; not handled again
	// FailedAttempts counts the failed attempts charged to the messages
	// above, when each finishes (Message.Attempt minus 1: one handled at
	// its third attempt adds 2; one dead-lettered after Retry.MaxAttempts
	// 3 adds 3; a rejection, BatchError.DeadLetter, is not charged).
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

// countFinished is the claim loop's AdvanceFunc: it counts each finished
// item by its fate (published at the end of advance).
func (c *claimLoop[T]) countFinished(it *dispatch.Item[Message, T]) {
	switch it.Fate {
	case fateHandled:
		c.out.Handled++
	case fateDeadLettered:
		c.out.DeadLettered++
	case fateSkipped:
		c.out.Skipped++
	case fateParked:
		c.out.Parked++
	}
	c.out.FailedAttempts += int64(it.Attempt - 1)
}
