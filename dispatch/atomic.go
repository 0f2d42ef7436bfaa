package dispatch

import "sync/atomic"

// atomicInt is an int64 counter on its own cache line: partition counters
// are written by every worker that finishes one of its items.
type atomicInt struct {
	_ [56]byte
	atomic.Int64
	_ [56]byte
}
