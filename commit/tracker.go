// Package commit keeps a partition's commit frontier: the offset below which
// every received message has finished. It tracks the messages actually
// received, in the order received, so sparse offsets (compacted topics,
// transaction markers) need no arithmetic on offsets.
//
// Only unfinished messages are kept: a Tracker is an intrusive list of them
// in offset order. A message that finishes leaves the list at once, wherever
// it is, so the finished messages above a stuck frontier cost nothing: the
// offsets between two unfinished entries are the finished ones (or offsets
// that do not exist, which are as good as finished). Add, Skip and Finish
// are O(1); the commit metadata's ranges (Finished) are O(unfinished).
//
// One Tracker per claimed partition (a slow partition never holds back
// another's commits), used by its owner goroutine alone.
package commit

import (
	"errors"
	"fmt"
)

// Link is the tracker's part of an entry: embed one in each entry and
// return it from TrackLink. It is 20 bytes, so that it can share a cache
// line with an entry's other hot fields.
type Link[E any] struct {
	prev, next E
	// seq is the receive index (how many entries came before it) modulo
	// 2^32: the tracker only ever subtracts two of them, and fewer than
	// 2^32 entries are unfinished at once.
	seq uint32
}

// Entry is one received message as the tracker sees it.
type Entry[E any] interface {
	comparable
	Offset() int64
	TrackLink() *Link[E]
}

// ErrOffsetOrder reports an offset that does not follow the last one added.
var ErrOffsetOrder = errors.New("commit: offset not above the previous one")

// ErrFenced reports an Add or Skip after Fence.
var ErrFenced = errors.New("commit: tracker fenced")

// Tracker is the per-partition frontier. Not safe for concurrent use.
type Tracker[E Entry[E]] struct {
	head, tail E      // unfinished entries, oldest first
	n          int    // entries in the list
	received   uint64 // entries added or skipped
	released   uint64 // entries below the frontier (received ones before head)
	lastAdded  int64  // offset of the last entry added or skipped, -1 before any
	fenced     bool
}

// New returns an empty tracker.
func New[E Entry[E]]() *Tracker[E] { return &Tracker[E]{lastAdded: -1} }

// Skip records a message received at off that is finished already (it
// needs no work): the frontier may pass it at once.
func (t *Tracker[E]) Skip(off int64) error {
	if t.fenced {
		return ErrFenced
	}
	if off <= t.lastAdded {
		return fmt.Errorf("%w: offset %d after %d", ErrOffsetOrder, off, t.lastAdded)
	}
	t.lastAdded = off
	t.received++
	if t.n == 0 {
		t.released = t.received // everything received has finished
	}
	return nil
}

// Add appends e, unfinished, received after every entry added before it.
func (t *Tracker[E]) Add(e E) error {
	var zero E
	if t.fenced {
		return ErrFenced
	}
	if off := e.Offset(); off <= t.lastAdded {
		return fmt.Errorf("%w: offset %d after %d", ErrOffsetOrder, off, t.lastAdded)
	}
	t.lastAdded = e.Offset()
	l := e.TrackLink()
	*l = Link[E]{prev: t.tail, seq: uint32(t.received)}
	t.received++
	if t.tail == zero {
		t.head = e
	} else {
		t.tail.TrackLink().next = e
	}
	t.tail = e
	t.n++
	return nil
}

// Finish removes e, which was added and has finished, and reports whether
// it was tracked: finishing an entry that is not (after Fence, twice, or
// one that Replace swapped out) does nothing.
func (t *Tracker[E]) Finish(e E) bool {
	l := e.TrackLink()
	var zero E
	wasHead := t.head == e
	if !wasHead && l.prev == zero {
		return false // not tracked: only the head has no predecessor
	}
	if wasHead {
		t.head = l.next
		if l.next == zero {
			t.released = t.received
		} else {
			t.released += uint64(l.next.TrackLink().seq - l.seq)
		}
	} else {
		l.prev.TrackLink().next = l.next
	}
	if l.next == zero {
		t.tail = l.prev
	} else {
		l.next.TrackLink().prev = l.prev
	}
	*l = Link[E]{}
	t.n--
	return true
}

// Replace puts e in old's place: old is no longer tracked (Finish of old
// does nothing), and e, which must not be tracked, is, with old's receive
// index. It reports false when old is not tracked.
func (t *Tracker[E]) Replace(old, e E) bool {
	l := old.TrackLink()
	var zero E
	if t.head != old && l.prev == zero {
		return false
	}
	nl := e.TrackLink()
	*nl = *l
	if l.prev == zero {
		t.head = e
	} else {
		l.prev.TrackLink().next = e
	}
	if l.next == zero {
		t.tail = e
	} else {
		l.next.TrackLink().prev = e
	}
	*l = Link[E]{}
	return true
}

// Head returns the oldest unfinished entry: the one whose finishing moves
// the frontier.
func (t *Tracker[E]) Head() (E, bool) {
	var zero E
	return t.head, t.head != zero
}

// Next returns the offset to commit: the oldest unfinished entry's offset,
// or one past the last offset received when every entry has finished; false
// before anything was received.
func (t *Tracker[E]) Next() (int64, bool) {
	if h, ok := t.Head(); ok {
		return h.Offset(), true
	}
	return t.lastAdded + 1, t.received > 0
}

// Received is how many entries were added or skipped.
func (t *Tracker[E]) Received() uint64 { return t.received }

// Released is how many received entries lie below the frontier.
func (t *Tracker[E]) Released() uint64 { return t.released }

// Pending is the number of unfinished entries.
func (t *Tracker[E]) Pending() int { return t.n }

// FinishedAbove is how many received entries above the frontier have
// finished (their offsets go in the commit metadata).
func (t *Tracker[E]) FinishedAbove() uint64 { return t.received - t.Released() - uint64(t.n) }

// Last returns the offset of the last entry added or skipped, -1 before any.
func (t *Tracker[E]) Last() int64 { return t.lastAdded }

// Finished returns the offset to commit along with the finished offsets
// above it, as ranges for EncodeMeta, reusing dst; ok is false before
// anything was received. The ranges are the gaps between unfinished
// entries, so they also cover offsets that do not exist (compacted topics,
// transaction markers), which no message will ever come for.
// O(unfinished).
func (t *Tracker[E]) Finished(dst []Range) (base int64, ranges []Range, ok bool) {
	ranges = dst[:0]
	base, ok = t.Next()
	h, any := t.Head()
	if !any {
		return base, ranges, ok
	}
	var zero E
	prev := h.Offset()
	for e := h.TrackLink().next; e != zero; e = e.TrackLink().next {
		off := e.Offset()
		if off > prev+1 {
			ranges = append(ranges, Range{prev + 1, off})
		}
		prev = off
	}
	if t.lastAdded > prev {
		ranges = append(ranges, Range{prev + 1, t.lastAdded + 1})
	}
	return base, ranges, ok
}

// Fence ends the tracker (its claim was revoked): later Adds and Skips
// fail, and Finish does nothing, so completions that arrive after the
// revoke can never move the frontier. It unlinks every entry (so that none
// keeps another alive) and returns how many were unfinished.
func (t *Tracker[E]) Fence() int {
	if t.fenced {
		return 0
	}
	t.fenced = true
	n := t.n
	var zero E
	for e := t.head; e != zero; {
		l := e.TrackLink()
		next := l.next
		*l = Link[E]{}
		e = next
	}
	t.head, t.tail, t.n = zero, zero, 0
	return n
}

// Fenced reports whether Fence was called.
func (t *Tracker[E]) Fenced() bool { return t.fenced }
