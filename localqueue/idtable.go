package localqueue

import (
	"encoding/binary"
	"math/bits"
)

// idTable maps the IDs of in-flight messages to their records. It is an
// open-addressing table (linear probing, backward-shift deletion) keyed by
// a Fibonacci hash of the ID, and replaces map[ID]*record on the hot path:
// Finish finds and removes a record in one probe sequence (a map needs a
// lookup and a delete, each hashing 16 bytes), and emptying it costs
// nothing (a map draws a new random seed whenever a delete empties it).
// IDs are made by this package, so their hashes are not chosen by anyone
// who could cluster them. Not safe for concurrent use: the queue guards it
// with inFlightMu.
type idTable struct {
	slots []*record // power-of-two length; nil is empty
	shift uint      // 64 - log2(len(slots))
	n     int
}

const minIDTable = 16

func newIDTable() *idTable {
	t := &idTable{}
	t.resize(minIDTable)
	return t
}

// home is the slot an ID hashes to: the top bits of the product of its two
// halves' mix with the golden ratio, which spreads sequence numbers evenly.
func (t *idTable) home(id *ID) int {
	h := binary.BigEndian.Uint64(id[8:]) ^ bits.RotateLeft64(binary.BigEndian.Uint64(id[:8]), 31)
	return int((h * 0x9E3779B97F4A7C15) >> t.shift)
}

func (t *idTable) len() int { return t.n }

// get returns the record of id, or nil.
func (t *idTable) get(id ID) *record {
	mask := len(t.slots) - 1
	for i := t.home(&id); ; i = (i + 1) & mask {
		r := t.slots[i]
		if r == nil || r.m.ID == id {
			return r
		}
	}
}

// put adds r, whose ID must not be in the table.
func (t *idTable) put(r *record) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(2 * len(t.slots))
	}
	t.place(r)
	t.n++
}

func (t *idTable) place(r *record) {
	mask := len(t.slots) - 1
	i := t.home(&r.m.ID)
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = r
}

// remove takes id's record out of the table and returns it, or nil.
func (t *idTable) remove(id ID) *record {
	mask := len(t.slots) - 1
	i := t.home(&id)
	for {
		r := t.slots[i]
		if r == nil {
			return nil
		}
		if r.m.ID == id {
			break
		}
		i = (i + 1) & mask
	}
	r := t.slots[i]
	// Backward shift: move later members of the probe run into the gap
	// when their home slot is not between the gap and where they are.
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		if k := t.home(&t.slots[j].m.ID); (j-k)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	// Give memory back after a burst.
	if len(t.slots) > minIDTable && 8*t.n < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
	return r
}

func (t *idTable) resize(size int) {
	old := t.slots
	t.slots = make([]*record, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, r := range old {
		if r != nil {
			t.place(r)
		}
	}
}

// reset empties the table.
func (t *idTable) reset() {
	t.slots, t.n = nil, 0
	t.resize(minIDTable)
}
