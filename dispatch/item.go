package dispatch

import "github.com/orderly-go/orderly/commit"

// Item is one message on its way through the pipeline. Items are recycled
// by their partition as soon as they finish (not when the commit frontier
// passes them), so a finished message above a stuck frontier costs nothing
// and the steady state allocates nothing per message.
type Item[M, T any] struct {
	// The fields the scheduler and workers touch come first, in one cache
	// line (with a pointer-sized T): items move between cores, Msg stays
	// mostly with the claim loop that filled it.
	next   *Item[M, T] // lane queue link, completion chain link, free-list link
	part   *Partition[M, T]
	lane   *lane[M, T]
	stamp  uint64 // arrival order across partitions (oldest first)
	offset int64
	size   int64 // bytes counted against the partition's byte share

	Lane    uint64 // ordering lane within the partition
	Attempt int    // 1 on first delivery, +1 each time it failed (alone, or named)
	Val     T      // the decoded value handed to Do
	Msg     M      // the message, as the binding built it

	link commit.Link[*Item[M, T]] // the partition's tracker; owner only
}

// Offset is the message's Kafka offset.
func (it *Item[M, T]) Offset() int64 { return it.offset }

// TrackLink is the item's place in its partition's commit tracker.
func (it *Item[M, T]) TrackLink() *commit.Link[*Item[M, T]] { return &it.link }

// Revoked reports whether the item's partition was revoked: it must not
// start again.
func (it *Item[M, T]) Revoked() bool { return it.part.gone.Load() }
