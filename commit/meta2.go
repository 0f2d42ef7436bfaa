package commit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Version 2 of the commit metadata adds the messages that wait for a
// retry or a deferred redelivery ("waiting" entries): for each, its offset,
// its attempt count and its not-before time, so that the next owner of the
// partition (after a rebalance or a crash) goes on with the count and the
// backoff instead of starting again at attempt 1. An entry whose
// not-before has passed is still waiting: its attempt count matters.
// Version 3 adds to each entry when the message first failed, so that the
// next owner's dead letter for it reports the first failure under the
// previous owner, not its own.
//
// Format: "orderly2:" (version 2) or "orderly3:" (version 3) + base64url
// (no padding) of
//
//	uvarint base       the committed offset, at most 2^62; offsets below
//	                   are relative to it
//	varint  timeBase   Unix milliseconds (zigzag, as binary.AppendVarint)
//	                   that not-before times are relative to: the earliest
//	                   of the entries' not-before times, 0 when none has one
//	varint  failBase   version 3 only: Unix milliseconds that first-failure
//	                   times are relative to, the earliest of them (0: none)
//	uvarint n          the number of waiting entries (at most 2^16), then
//	                   n entries in increasing offset order:
//	  uvarint gap        offset - base for the first entry,
//	                     offset - (previous entry's offset + 1) after it
//	  uvarint attempt    the Attempt of the message's next delivery,
//	                     1 to 2^31-1
//	  uvarint notBefore  0: none (redeliver at once); otherwise
//	                     1 + (not-before in Unix milliseconds - timeBase)
//	  uvarint first      version 3 only: 0: none (it never failed, as a
//	                     deferral); otherwise 1 + (first failure in Unix
//	                     milliseconds - failBase)
//	byte    encoding   of the finished offsets: 0 = none (nothing follows),
//	                   1 = runs, 2 = bitset, then the body as in version 1
//	                   (meta.go), relative to base:
//	runs:   uvarint count (at most 2^16), then count pairs of uvarint (gap
//	        since the previous range's end, or base), uvarint (length >= 1)
//	bitset: uvarint nbits (at most 2^20), then ceil(nbits/8) bytes; bit i
//	        (LSB first) set means offset base+i is finished
//
// Every offset, and every range's end, is below 2^62 (ends at most 2^62),
// so no sum overflows. Times are kept to the millisecond and clamped to
// ±2^62 ms from 1970 (about 146 million years); a not-before is rounded
// up (a message is never redelivered before it), a first failure down (as
// a dead letter's header shows it). The gap encoding cannot express
// unsorted or repeated entries; the decoder rejects as corrupt an entry
// whose offset would reach 2^62, an attempt out of range, a time beyond
// the clamp, a waiting entry that lies within a finished range, and
// trailing bytes.
//
// The encoder writes version 3 only when some waiting entry has a first
// failure, and version 2 otherwise (no waiting entries, or only deferrals
// that never failed), so that members still on version 2 keep reading the
// metadata of every partition without a failed message during a rolling
// upgrade. A member on version 2 reads version 3 as someone else's
// metadata (its DecodeMeta answers ErrNotOrderlyMetadata, which group
// ignores without a warning): taking such a partition over, it handles
// again the messages the metadata lists as finished and starts the
// waiting ones again at attempt 1, at once (at-least-once, as with no
// metadata at all); a member on version 1 does the same with versions 2
// and 3.
//
// Within the size limit the waiting entries come first: the encoder keeps
// as many of them as fit, lowest offsets first, and gives the finished
// offsets whatever room is left (which may hold a short range even when
// the next waiting entry did not fit). What does not fit is left out and
// counted; a waiting message left out starts again at attempt 1 with the
// next owner, a finished one left out is handled again.
//
// There is no version byte: the prefix is the version. This decoder, too,
// rejects as corrupt what it cannot parse after "orderly2:" or
// "orderly3:", so a later version that members on this one must ignore
// needs a prefix of its own that starts with none of "orderly:",
// "orderly2:" and "orderly3:"; any other prefix gives
// ErrNotOrderlyMetadata.

// MetaPrefix2 starts every version 2 metadata string. It does not start
// with MetaPrefix, so the version 1 decoder ignores it.
const MetaPrefix2 = "orderly2:"

// MetaPrefix3 starts every version 3 metadata string. It starts with
// neither MetaPrefix nor MetaPrefix2, so the version 1 and 2 decoders
// ignore it.
const MetaPrefix3 = "orderly3:"

const (
	// maxMetaWaiting bounds the waiting entries a decoder accepts; the
	// encoder never writes more.
	maxMetaWaiting = 1 << 16
	// maxMetaAttempt is the largest attempt count written or accepted
	// (an int on every platform).
	maxMetaAttempt = 1<<31 - 1
	// maxMetaMillis bounds not-before and first-failure times, as Unix
	// milliseconds, in both directions.
	maxMetaMillis = 1 << 62
	// minWaitingBytes is the least an entry takes: a one-byte uvarint
	// per field (three in version 2, four in version 3).
	minWaitingBytes = 3
)

// Waiting is a message that waits for a retry or a deferred redelivery.
type Waiting struct {
	Offset       int64
	Attempt      int       // the Attempt of the message's next delivery (>= 2 after one failure)
	NotBefore    time.Time // not redelivered before this (zero: at once)
	FirstFailure time.Time // when it first failed (zero: never, or not known); version 3 only
}

// WaitingAt returns the waiting entry at off, if there is one. Offsets must
// be asked in increasing order (as a partition delivers them); cost is O(1)
// amortized, like Contains, whose order it does not disturb.
func (d *Done) WaitingAt(off int64) (Waiting, bool) {
	for d.w < len(d.Waiting) && d.Waiting[d.w].Offset < off {
		d.w++
	}
	if d.w < len(d.Waiting) && d.Waiting[d.w].Offset == off {
		return d.Waiting[d.w], true
	}
	return Waiting{}, false
}

// WaitingAfter appends to dst the waiting entries with offsets above after
// and above dst's last entry, so dst stays sorted and its own entries win
// over the decoded ones at the same offset. A claim that resumed from
// metadata and is let go before reaching all of it carries the rest
// forward this way (as AppendAfter does for the finished ranges), so the
// next owner still goes on with their attempt counts and backoff.
func (d *Done) WaitingAfter(dst []Waiting, after int64) []Waiting {
	if k := len(dst); k > 0 {
		after = max(after, dst[k-1].Offset)
	}
	i, _ := slices.BinarySearchFunc(d.Waiting, after, func(w Waiting, after int64) int {
		if w.Offset <= after {
			return -1
		}
		return 1
	})
	return append(dst, d.Waiting[i:]...)
}

// EncodeWaitingMeta encodes waiting entries and finished ranges as metadata of
// at most maxLen bytes: version 3 when some waiting entry has a
// FirstFailure, version 2 otherwise (see the format above). It returns
// the metadata ("" when there is nothing to say or not even the header
// fits), how many waiting entries it left out and how many finished
// offsets.
//
// Waiting entries go first: as many as fit, lowest offsets first; the
// finished ranges get the room that is left, in the smaller of runs and
// bitset as EncodeMeta chooses. Entries whose not-before has passed are
// written like any other. An Attempt below 1 is written as 1, one above
// 2^31-1 as that.
//
// The encoder assumes, and does not check, that waiting is sorted by
// offset without repeats, ranges sorted and disjoint, all at or above
// base and below 2^62, and that no waiting offset lies within a range (a
// waiting message is not finished). It does not panic on inputs that
// break this, and what it then writes either is rejected by DecodeMeta as
// corrupt (the next owner starts from the committed offset alone) or, for
// ranges out of order or below base written as a bitset, lists only
// offsets it was given as finished: nothing is skipped that was not.
func EncodeWaitingMeta(base int64, waiting []Waiting, ranges []Range, maxLen int) (meta string, leftWaiting int, leftFinished int64) {
	if len(waiting) == 0 && len(ranges) == 0 {
		return "", 0, 0
	}
	v3 := slices.ContainsFunc(waiting, func(w Waiting) bool { return !w.FirstFailure.IsZero() })
	prefix := MetaPrefix2
	if v3 {
		prefix = MetaPrefix3
	}
	budget := 0
	if maxLen > len(prefix) {
		budget = base64.RawURLEncoding.DecodedLen(maxLen - len(prefix))
	}
	timeBase := earliest(waiting, func(w Waiting) time.Time { return w.NotBefore }, true)
	failBase := earliest(waiting, func(w Waiting) time.Time { return w.FirstFailure }, false)
	head := uvarintLen(uint64(base)) + uvarintLen(zigzag(timeBase))
	if v3 {
		head += uvarintLen(zigzag(failBase))
	}
	// The count's room is that of all the entries' count, and one byte
	// stays for the finished encoding.
	room := budget - head - uvarintLen(uint64(len(waiting))) - 1
	if room < 0 {
		return "", len(waiting), countRanges(ranges)
	}
	kept, size := 0, 0
	for prev := base; kept < len(waiting) && kept < maxMetaWaiting; kept++ {
		w := waiting[kept]
		n := uvarintLen(uint64(w.Offset-prev)) + uvarintLen(uint64(attempt(w.Attempt))) +
			uvarintLen(timeDelta(w.NotBefore, true, timeBase))
		if v3 {
			n += uvarintLen(timeDelta(w.FirstFailure, false, failBase))
		}
		if size+n > room {
			break
		}
		size += n
		prev = w.Offset + 1
	}
	b := make([]byte, 0, min(budget, head+uvarintLen(uint64(kept))+size+1))
	b = binary.AppendUvarint(b, uint64(base))
	b = binary.AppendVarint(b, timeBase)
	if v3 {
		b = binary.AppendVarint(b, failBase)
	}
	b = binary.AppendUvarint(b, uint64(kept))
	prev := base
	for _, w := range waiting[:kept] {
		b = binary.AppendUvarint(b, uint64(w.Offset-prev))
		b = binary.AppendUvarint(b, uint64(attempt(w.Attempt)))
		b = binary.AppendUvarint(b, timeDelta(w.NotBefore, true, timeBase))
		if v3 {
			b = binary.AppendUvarint(b, timeDelta(w.FirstFailure, false, failBase))
		}
		prev = w.Offset + 1
	}
	leftWaiting = len(waiting) - kept

	var finished []byte
	leftFinished = countRanges(ranges)
	if len(ranges) > 0 {
		// Each body is appended to its own copy of b (clipped, so append
		// cannot write into the other's).
		clipped := b[:len(b):len(b)]
		runs, runsLeft := encodeRuns(append(clipped, encodingRuns), base, ranges, budget)
		bits, bitsLeft := encodeBitset(append(clipped, encodingBitset), base, ranges, budget)
		finished, leftFinished = runs, runsLeft
		if bitsLeft < runsLeft || (bitsLeft == runsLeft && len(bits) < len(runs)) {
			finished, leftFinished = bits, bitsLeft
		}
		if finished == nil {
			leftFinished = countRanges(ranges)
		}
	}
	if finished == nil {
		if kept == 0 {
			return "", leftWaiting, leftFinished
		}
		finished = append(b, encodingNone)
	}
	return metaString(prefix, finished), leftWaiting, leftFinished
}

// attempt is a as written: within 1 and maxMetaAttempt.
func attempt(a int) int64 { return min(max(int64(a), 1), maxMetaAttempt) }

// metaMillis is t in Unix milliseconds, rounded up (roundUp, as for a
// not-before) or down, and clamped to ±maxMetaMillis; ok is false for the
// zero time (none).
func metaMillis(t time.Time, roundUp bool) (ms int64, ok bool) {
	if t.IsZero() {
		return 0, false
	}
	// Compare seconds first, with a second to spare: UnixMilli is
	// undefined for times whose milliseconds do not fit an int64.
	switch sec := t.Unix(); {
	case sec > maxMetaMillis/1000+1:
		return maxMetaMillis, true
	case sec < -maxMetaMillis/1000-1:
		return -maxMetaMillis, true
	}
	ms = t.UnixMilli() // rounded down: the nanoseconds are never negative
	if roundUp && t.Nanosecond()%1e6 != 0 {
		ms++
	}
	return min(max(ms, -maxMetaMillis), maxMetaMillis), true
}

// earliest is the earliest of the entries' times (of), as written
// (metaMillis), 0 when none has one.
func earliest(waiting []Waiting, of func(Waiting) time.Time, roundUp bool) int64 {
	base, found := int64(0), false
	for _, w := range waiting {
		if ms, ok := metaMillis(of(w), roundUp); ok && (!found || ms < base) {
			base, found = ms, true
		}
	}
	return base
}

// timeDelta is an entry's time field: 0 for none, else 1 + the
// milliseconds since timeBase (never negative: timeBase is the earliest).
func timeDelta(t time.Time, roundUp bool, timeBase int64) uint64 {
	ms, ok := metaMillis(t, roundUp)
	if !ok {
		return 0
	}
	return uint64(ms-timeBase) + 1
}

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// decode2 parses a version 2 payload, or a version 3 one (v3), into d.
func (d *Done) decode2(raw []byte, v3 bool) error {
	r := metaReader{raw}
	ubase, ok := r.uvarint()
	if !ok || ubase > maxMetaOffset {
		return errors.New("base offset")
	}
	d.Base = int64(ubase)
	timeBase, ok := r.millis()
	if !ok {
		return errors.New("time base")
	}
	var failBase int64
	minBytes := minWaitingBytes
	if v3 {
		if failBase, ok = r.millis(); !ok {
			return errors.New("first-failure base")
		}
		minBytes++
	}
	n, ok := r.uvarint()
	if !ok || n > maxMetaWaiting || n > uint64(len(r.p)/minBytes) {
		return errors.New("waiting count")
	}
	if n > 0 {
		d.Waiting = make([]Waiting, 0, n)
	}
	next := d.Base // the lowest offset the next entry can have
	for range n {
		gap, ok1 := r.uvarint()
		att, ok2 := r.uvarint()
		nb, ok3 := r.uvarint()
		ff, ok4 := uint64(0), true
		if v3 {
			ff, ok4 = r.uvarint()
		}
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return errors.New("waiting entry")
		}
		if gap >= uint64(maxMetaOffset-next) {
			return fmt.Errorf("waiting offset beyond 2^62 (gap %d after %d)", gap, next)
		}
		w := Waiting{Offset: next + int64(gap)}
		if att == 0 || att > maxMetaAttempt {
			return fmt.Errorf("attempt %d at offset %d", att, w.Offset)
		}
		w.Attempt = int(att)
		if w.NotBefore, ok = metaTime(timeBase, nb); !ok {
			return fmt.Errorf("not-before at offset %d", w.Offset)
		}
		if w.FirstFailure, ok = metaTime(failBase, ff); !ok {
			return fmt.Errorf("first failure at offset %d", w.Offset)
		}
		d.Waiting = append(d.Waiting, w)
		next = w.Offset + 1
	}
	enc, ok := r.byte()
	if !ok {
		return errors.New("finished encoding")
	}
	if enc != encodingNone {
		if err := d.decodeFinished(enc, &r); err != nil {
			return err
		}
	}
	if len(r.p) != 0 {
		return errors.New("trailing bytes")
	}
	// A waiting message is not finished.
	i := 0
	for _, w := range d.Waiting {
		for i < len(d.Ranges) && d.Ranges[i].End <= w.Offset {
			i++
		}
		if i < len(d.Ranges) && d.Ranges[i].Start <= w.Offset {
			return fmt.Errorf("waiting offset %d listed as finished", w.Offset)
		}
	}
	return nil
}

// metaTime is an entry's time field delta relative to base (within
// ±maxMetaMillis): the zero time for 0; ok is false for a time beyond
// maxMetaMillis.
func metaTime(base int64, delta uint64) (t time.Time, ok bool) {
	if delta == 0 {
		return time.Time{}, true
	}
	// base is within ±2^62, so the room up to the bound fits a uint64
	// and the sum below an int64.
	if delta-1 > uint64(maxMetaMillis)-uint64(base) {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(uint64(base) + (delta - 1))), true
}

// millis reads a varint of Unix milliseconds within ±maxMetaMillis.
func (r *metaReader) millis() (int64, bool) {
	v, ok := r.varint()
	return v, ok && v <= maxMetaMillis && v >= -maxMetaMillis
}
