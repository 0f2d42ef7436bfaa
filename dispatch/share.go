package dispatch

import "sync/atomic"

// shares divides the in-flight budget (Options.MaxInFlight messages and
// Options.MaxInFlightBytes bytes, fetched and not yet finished) evenly
// among the claimed partitions. A partition whose share is spent reads no
// further (its claim loop pauses that partition's fetching) until its own
// messages finish; the others keep theirs. Shares are not lent: a partition
// that borrowed and then got stuck would keep what it borrowed, which is
// how one stuck message used to take the whole budget.
type shares struct {
	maxCount, maxBytes int64
	claimed            atomic.Int64 // partitions with a live Partition
	// paused counts partitions out of share now: nothing more comes from
	// them until their work finishes, so a partial batch should not wait
	// out its Ticker.
	paused atomic.Int32
}

// count is each partition's share of MaxInFlight: at least 1.
func (s *shares) count() int64 { return max(1, s.maxCount/max(s.claimed.Load(), 1)) }

// bytes is each partition's share of MaxInFlightBytes. A partition with
// nothing in flight may always read one message, whatever its size.
func (s *shares) bytes() int64 { return max(1, s.maxBytes/max(s.claimed.Load(), 1)) }
