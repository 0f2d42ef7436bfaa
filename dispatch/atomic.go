package dispatch

import "sync/atomic"

// atomicInt is an int64 counter on its own cache line: partition counters
// are written by every worker that finishes one of its items.
type atomicInt struct {
	_ [56]byte
	atomic.Int64
	_ [56]byte
}

// atomicBool is a bool on its own cache line.
type atomicBool struct {
	_ [56]byte
	atomic.Bool
	_ [56]byte
}
