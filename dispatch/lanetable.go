package dispatch

import "math/bits"

// laneTable maps lane keys to a partition's lanes: an open-addressing
// table with linear probing, owned by the partition's goroutine. A Go map
// would hash the key again (memhash) and match control bytes on every
// lookup, one per message; the keys are hashes already (or small
// integers), so a multiplicative (Fibonacci) spread of the key and one
// probe of a flat array usually find the lane. Entries leave only in
// sweep (in place; it rebuilds the table only to shrink it) and when the
// partition's revoke drops the whole table.
type laneTable[M, T any] struct {
	slots []laneSlot[M, T] // len is a power of two, or 0
	n     int
	shift uint // 64 - log2(len(slots))
}

type laneSlot[M, T any] struct {
	key uint64
	l   *lane[M, T] // nil: empty slot
}

// minLaneSlots is the smallest table: it holds 3/4 of it before growing.
const minLaneSlots = 64

func (t *laneTable[M, T]) index(key uint64) uint64 {
	return (key * 0x9E3779B97F4A7C15) >> t.shift
}

// get returns key's lane, nil if it has none.
func (t *laneTable[M, T]) get(key uint64) *lane[M, T] {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.l == nil {
			return nil
		}
		if s.key == key {
			return s.l
		}
	}
}

// put adds key's lane l; key must have none.
func (t *laneTable[M, T]) put(key uint64, l *lane[M, T]) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(len(t.slots)) // room for as many entries as slots now: twice the slots
	}
	t.insert(key, l)
	t.n++
}

func (t *laneTable[M, T]) insert(key uint64, l *lane[M, T]) {
	mask := uint64(len(t.slots) - 1)
	i := t.index(key)
	for t.slots[i].l != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = laneSlot[M, T]{key, l}
}

// resize rebuilds the table with room for at least n entries at 3/4 load.
func (t *laneTable[M, T]) resize(n int) {
	size := max(minLaneSlots, 1<<bits.Len(uint(4*n/3)))
	old := t.slots
	t.slots = make([]laneSlot[M, T], size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, s := range old {
		if s.l != nil {
			t.insert(s.key, s.l)
		}
	}
}

// len is how many lanes the table holds.
func (t *laneTable[M, T]) len() int { return t.n }

// each calls fn with every lane.
func (t *laneTable[M, T]) each(fn func(*lane[M, T])) {
	for _, s := range t.slots {
		if s.l != nil {
			fn(s.l)
		}
	}
}

// sweep removes the lanes for which drop reports true (drop may keep them
// for reuse), in place: a removed slot is filled by shifting back the
// entries that probed past it, so that no tombstones are left and nothing
// is allocated. The table shrinks only when it is mostly empty after.
func (t *laneTable[M, T]) sweep(drop func(key uint64, l *lane[M, T]) bool) {
	for i := 0; i < len(t.slots); {
		if s := t.slots[i]; s.l != nil && drop(s.key, s.l) {
			t.deleteAt(i)
			continue // an entry may have shifted into i: look again
		}
		i++
	}
	if len(t.slots) > minLaneSlots && 8*t.n < len(t.slots) {
		t.resize(t.n)
	}
}

// deleteAt empties slot i and shifts back the entries after it that
// would no longer be found (backward-shift deletion for linear probing).
// An entry moved may come from a slot before i (the probe sequence wraps):
// sweep then sees it again, and drop must give the same answer twice.
func (t *laneTable[M, T]) deleteAt(i int) {
	mask := uint64(len(t.slots) - 1)
	hole := uint64(i)
	for j := (hole + 1) & mask; t.slots[j].l != nil; j = (j + 1) & mask {
		// The entry at j may move to the hole if its home slot is not
		// in (hole, j], cyclically.
		home := t.index(t.slots[j].key)
		if (j-home)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = laneSlot[M, T]{}
	t.n--
}
