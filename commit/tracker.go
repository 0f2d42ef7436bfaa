// Package commit keeps a partition's commit frontier: the offset below which
// every received message has finished. It tracks the messages actually
// received, in the order received, so sparse offsets (compacted topics,
// transaction markers) need no arithmetic on offsets.
//
// One Tracker per claimed partition (a slow partition never holds back
// another's commits). The owner goroutine adds and advances; any goroutine
// may finish an entry, since Finished is read through the entry itself
// (an atomic flag in practice). Add and Advance are O(1) amortized.
package commit

import (
	"errors"
	"fmt"
)

// Entry is one received message as the tracker sees it.
type Entry interface {
	comparable
	Offset() int64
	Finished() bool
}

// ErrOffsetOrder reports an offset that does not follow the last one added.
var ErrOffsetOrder = errors.New("commit: offset not above the previous one")

// ErrFenced reports an Add after Fence.
var ErrFenced = errors.New("commit: tracker fenced")

// Tracker is the per-partition frontier. Not safe for concurrent use except
// that entries may finish concurrently.
type Tracker[E Entry] struct {
	ring       []E // power-of-two ring of unreleased entries in receive order
	head, tail uint64
	lastAdded  int64 // offset of the last entry added, -1 before any
	next       int64 // offset to commit (last released + 1), -1 before any
	fenced     bool
}

// New returns a tracker whose ring starts with room for capacity entries
// and grows as needed.
func New[E Entry](capacity int) *Tracker[E] {
	n := 16
	for n < capacity {
		n <<= 1
	}
	return &Tracker[E]{ring: make([]E, n), lastAdded: -1, next: -1}
}

// Add appends e, received after every entry added before it.
func (t *Tracker[E]) Add(e E) error {
	if t.fenced {
		return ErrFenced
	}
	if off := e.Offset(); off <= t.lastAdded {
		return fmt.Errorf("%w: offset %d after %d", ErrOffsetOrder, off, t.lastAdded)
	}
	if t.tail-t.head == uint64(len(t.ring)) {
		t.grow()
	}
	t.ring[t.tail&uint64(len(t.ring)-1)] = e
	t.tail++
	t.lastAdded = e.Offset()
	return nil
}

func (t *Tracker[E]) grow() {
	bigger := make([]E, 2*len(t.ring))
	mask := uint64(len(t.ring) - 1)
	for i := t.head; i < t.tail; i++ {
		bigger[i-t.head] = t.ring[i&mask]
	}
	t.tail -= t.head
	t.head = 0
	t.ring = bigger
}

// Advance releases the finished prefix, calling release (if non-nil) for
// each released entry in order, and returns how many it released. After
// Fence it releases nothing.
func (t *Tracker[E]) Advance(release func(E)) int {
	if t.fenced {
		return 0
	}
	var zero E
	mask := uint64(len(t.ring) - 1)
	n := 0
	for t.head < t.tail {
		slot := &t.ring[t.head&mask]
		e := *slot
		if !e.Finished() {
			break
		}
		t.next = e.Offset() + 1
		*slot = zero
		t.head++
		n++
		if release != nil {
			release(e)
		}
	}
	return n
}

// Head returns the oldest unreleased entry: the one whose finishing can
// move the frontier.
func (t *Tracker[E]) Head() (E, bool) {
	if t.head == t.tail {
		var zero E
		return zero, false
	}
	return t.ring[t.head&uint64(len(t.ring)-1)], true
}

// Finished returns the offset to commit along with the finished entries
// above it, as ranges for EncodeMeta. base is the offset after the last
// released entry, or the head's offset when nothing was released yet; ok
// is false when nothing is tracked or released. Consecutive finished
// entries form one range even across offset gaps (offsets that do not
// exist, as in compacted topics). O(pending).
func (t *Tracker[E]) Finished(dst []Range) (base int64, ranges []Range, ok bool) {
	ranges = dst[:0]
	base, ok = t.next, t.next >= 0
	mask := uint64(len(t.ring) - 1)
	if t.head < t.tail {
		if !ok {
			base, ok = t.ring[t.head&mask].Offset(), true
		}
		inRun := false
		for i := t.head; i < t.tail; i++ {
			e := t.ring[i&mask]
			if !e.Finished() {
				inRun = false
				continue
			}
			off := e.Offset()
			if inRun {
				ranges[len(ranges)-1].End = off + 1
			} else {
				ranges = append(ranges, Range{off, off + 1})
				inRun = true
			}
		}
	}
	return base, ranges, ok
}

// Last returns the offset of the last entry added, -1 before any.
func (t *Tracker[E]) Last() int64 { return t.lastAdded }

// Next returns the offset to commit (the offset after the last released
// entry) and whether anything has been released yet.
func (t *Tracker[E]) Next() (int64, bool) { return t.next, t.next >= 0 }

// Pending is the number of entries added and not yet released.
func (t *Tracker[E]) Pending() int { return int(t.tail - t.head) }

// Fence ends the tracker (its claim was revoked): later Adds fail and
// Advance releases nothing, so completions that arrive after the revoke can
// never move the frontier. It returns the number of entries left pending.
func (t *Tracker[E]) Fence() int {
	if t.fenced {
		return 0
	}
	t.fenced = true
	n := t.Pending()
	var zero E
	for i := range t.ring {
		t.ring[i] = zero
	}
	t.head = t.tail
	return n
}
