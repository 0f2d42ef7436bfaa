package localqueue

import (
	"sync"
	"sync/atomic"
)

// memFIFO is where the ready messages of a memory-only queue (DataPath "")
// go when the memory chan is full or MemQueueSize is 0: an unbounded FIFO
// of records, so nothing is encoded, copied or checked on the way, and no
// goroutine runs for it. Unlike nsqd's ephemeral channels it never drops a
// message while the queue is open.
//
// Its ring is guarded by mu. ready (cap 1) holds a token whenever a record
// may be waiting: push leaves one, and pop leaves one while records remain,
// so a Get that found the FIFO empty waits on ready and tries again; a
// token may be stale (a spurious wake-up), never missing.
type memFIFO struct {
	ready chan struct{}
	n     atomic.Int64 // records held; read without mu by Depth and enqueue

	mu     sync.Mutex
	ring   []*record // guarded by mu; power-of-two length, or nil
	head   int       // guarded by mu
	closed bool      // guarded by mu
}

// memFIFOShrink is the ring length above which an emptied ring is
// dropped, so that a burst does not pin its memory.
const memFIFOShrink = 1024

func newMemFIFO() *memFIFO { return &memFIFO{ready: make(chan struct{}, 1)} }

// push appends r. It fails with ErrClosed after close.
func (f *memFIFO) push(r *record) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	n := int(f.n.Load())
	if n == len(f.ring) {
		f.grow()
	}
	f.ring[(f.head+n)&(len(f.ring)-1)] = r
	f.n.Store(int64(n + 1))
	f.mu.Unlock()
	signal(f.ready)
	return nil
}

// grow doubles the ring, unrolling it to start at 0. The caller holds mu.
func (f *memFIFO) grow() {
	ring := make([]*record, max(2*len(f.ring), 16))
	n := copy(ring, f.ring[f.head:])
	copy(ring[n:], f.ring[:f.head])
	f.ring, f.head = ring, 0
}

// pop removes and returns the oldest record, or nil.
func (f *memFIFO) pop() *record {
	f.mu.Lock()
	n := int(f.n.Load())
	if n == 0 {
		f.mu.Unlock()
		return nil
	}
	r := f.ring[f.head]
	f.ring[f.head] = nil
	f.head = (f.head + 1) & (len(f.ring) - 1)
	n--
	f.n.Store(int64(n))
	if n == 0 && len(f.ring) > memFIFOShrink {
		f.ring, f.head = nil, 0
	}
	f.mu.Unlock()
	if n > 0 {
		signal(f.ready) // wake the next waiting Get
	}
	return r
}

// len is the number of records held.
func (f *memFIFO) len() int64 { return f.n.Load() }

// empty drops every record; with closing set, later pushes fail with
// ErrClosed.
func (f *memFIFO) empty(closing bool) {
	f.mu.Lock()
	f.ring, f.head = nil, 0
	f.n.Store(0)
	f.closed = f.closed || closing
	f.mu.Unlock()
}
