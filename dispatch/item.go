package dispatch

import "sync/atomic"

// Item is one message on its way through the pipeline. Items are recycled
// by their partition once the commit frontier has passed them, so the
// steady state allocates nothing per message.
type Item[M, T any] struct {
	Msg     M      // the message, as the binding built it
	Val     T      // the decoded value handed to Do
	Lane    uint64 // ordering lane within the partition
	Attempt int    // 1 on first delivery, +1 on each retry of its batch

	offset int64
	stamp  uint64 // arrival order across partitions (oldest first in the ready heap)
	part   *Partition[M, T]
	next   *Item[M, T] // lane queue link, and free-list link
	done   atomic.Bool
}

// Offset is the message's Kafka offset.
func (it *Item[M, T]) Offset() int64 { return it.offset }

// Finished reports whether the item is finished: handled, or skipped past.
func (it *Item[M, T]) Finished() bool { return it.done.Load() }

// Partition is the item's partition.
func (it *Item[M, T]) Partition() *Partition[M, T] { return it.part }
