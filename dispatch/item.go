package dispatch

import (
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/commit"
)

// Item is one message on its way through the pipeline. Items are recycled
// by their partition as soon as they finish (not when the commit frontier
// passes them), so a finished message above a stuck frontier costs nothing
// and the steady state allocates nothing per message.
type Item[M, T any] struct {
	// The fields the scheduler, the workers and the tracker touch come
	// first, 64 bytes: items move between cores, Msg stays mostly with the
	// claim loop that filled it, and unlinking a finished item from the
	// tracker touches its neighbours' links.
	next   *Item[M, T] // lane queue link, completion chain link
	part   *Partition[M, T]
	lane   *lane[M, T]
	stamp  uint64 // order of service: arrival within the partition (see ready.go)
	offset int64
	link   commit.Link[*Item[M, T]] // the partition's tracker; owner only

	Lane    uint64 // ordering lane within the partition
	Attempt int    // 1 on first delivery, +1 each time it failed (alone, or named)
	size    int32  // bytes counted against the partition's byte share (a Kafka record is under 2 GiB); owner only
	// waitAttempt is, once the item has been held (a retry's backoff, a
	// deferral, a dead letter being written) or arrived at an attempt
	// past the first, its Attempt as the scheduler last saw it: written
	// under the scheduler's lock while the item is in the scheduler, and
	// cleared by the owner when it recycles the item (WaitingItems, which
	// reads it, is called by the owner too), so that WaitingItems lists it
	// for the commit metadata while it is held and also after its lane is
	// let go, queued or running, until it finishes. 0: never held. A new
	// owner goes on at that attempt.
	waitAttempt int32
	// firstFailure is when the item first failed, in Unix nanoseconds
	// (0 until it does), for its dead letter; written by whoever holds
	// its lane, and read under the scheduler's lock by WaitingItems too,
	// which a worker charging it does not take: hence atomic. Not a
	// time.Time: 8 bytes rather than 24 keep group's item (T a pointer)
	// at 256 bytes, a size class of whole cache lines, so that no two
	// items share a line (TestItemSize).
	firstFailure atomic.Int64
	// arrival: AddHeld's outcome (Verdict Hold), held when it reaches its
	// lane (push takes it); or, with Verdict Done, the error LastError
	// reports: of its failure when it went back behind an earlier item of
	// its lane, or Options.CopyError for Orphan's copy.
	arrival *Outcome
	// orphan: its call hung and a copy runs in its place (Orphan); its
	// own completion is ignored. replaced and returned are the owner's:
	// the copy took its place in the tracker; it came back from its call.
	orphan             atomic.Bool
	replaced, returned bool
	// kept: held, and a revoke leaves it outstanding until its hold is
	// settled: Settle sets it before Options.Hold is told (or Finishing
	// does), so that a revoke in between, or a failure in the drain, does
	// not drop an item on its way to a dead letter or a park; Waits
	// clears it when the item waits for a timer instead, and Unhold when
	// its lane goes on. Guarded by the scheduler mutex.
	kept bool
	// Fate is what became of the item, as its owner records it for its
	// own counts (AdvanceFunc): 0 when a worker finished it, another
	// value the owner sets before finishing it some other way.
	Fate uint8
	Val  T // the decoded value handed to Do
	Msg  M // the message, as the binding built it
}

// Offset is the message's Kafka offset.
func (it *Item[M, T]) Offset() int64 { return it.offset }

// TrackLink is the item's place in its partition's commit tracker.
func (it *Item[M, T]) TrackLink() *commit.Link[*Item[M, T]] { return &it.link }

// LastError is the error of its last failed call when that call also
// sent it back behind an earlier item of its lane, or, for a copy Orphan
// made of a hung call's item, Options.CopyError (which its dead letter
// reports if that was its last allowed attempt); nil otherwise.
func (it *Item[M, T]) LastError() error {
	if it.arrival != nil && it.arrival.Verdict != Hold {
		return it.arrival.Err
	}
	return nil
}

// Part is the partition the item belongs to.
func (it *Item[M, T]) Part() *Partition[M, T] { return it.part }

// Revoked reports whether the item's partition was revoked: it must not
// start again.
func (it *Item[M, T]) Revoked() bool { return it.part.gone.Load() }

// FirstFailure is when the item first failed; zero until it does.
func (it *Item[M, T]) FirstFailure() time.Time {
	ns := it.firstFailure.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// SetFirstFailure records t as when the item first failed (zero: never).
func (it *Item[M, T]) SetFirstFailure(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	it.firstFailure.Store(ns)
}

// clearFirstFailure forgets the first failure of the item's previous
// message (Add and Track start it over). The owner's, before anyone else
// sees the item; a load costs less than a store, and most items never
// failed.
func (it *Item[M, T]) clearFirstFailure() {
	if it.firstFailure.Load() != 0 {
		it.firstFailure.Store(0)
	}
}

// NoteFailure records now as when the item first failed, unless a first
// failure is recorded already.
func (it *Item[M, T]) NoteFailure(now time.Time) {
	if it.firstFailure.Load() == 0 {
		it.firstFailure.Store(now.UnixNano())
	}
}
