package dispatch

import "sync/atomic"

// Item is one message on its way through the pipeline. Items are recycled
// by their partition once the commit frontier has passed them, so the
// steady state allocates nothing per message.
type Item[M, T any] struct {
	// The fields the scheduler and workers touch come first, in one cache
	// line (with a pointer-sized T): items move between cores, Msg stays
	// mostly with the claim loop that filled it.
	next   *Item[M, T] // lane queue link, and free-list link
	part   *Partition[M, T]
	lane   *lane[M, T]
	stamp  uint64 // arrival order across partitions (oldest first)
	offset int64
	// done is 1 once finished: set atomically by the finishing worker (a
	// sequentially consistent store, see Partition.head), read atomically
	// by the owner, reset with a plain store by the owner when it recycles
	// the item (nothing else refers to it then).
	done uint32

	Lane    uint64 // ordering lane within the partition
	Attempt int    // 1 on first delivery, +1 on each retry of its batch
	Val     T      // the decoded value handed to Do
	Msg     M      // the message, as the binding built it
}

// Offset is the message's Kafka offset.
func (it *Item[M, T]) Offset() int64 { return it.offset }

// Finished reports whether the item is finished: handled, or skipped past.
func (it *Item[M, T]) Finished() bool { return atomic.LoadUint32(&it.done) == 1 }
