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
//
// Format: "orderly2:" + base64url (no padding) of
//
//	uvarint base       the committed offset, at most 2^62; offsets below
//	                   are relative to it
//	varint  timeBase   Unix milliseconds (zigzag, as binary.AppendVarint)
//	                   that not-before times are relative to: the earliest
//	                   of the entries' not-before times, 0 when none has one
//	uvarint n          the number of waiting entries (at most 2^16), then
//	                   n entries in increasing offset order:
//	  uvarint gap        offset - base for the first entry,
//	                     offset - (previous entry's offset + 1) after it
//	  uvarint attempt    the Attempt of the message's next delivery,
//	                     1 to 2^31-1
//	  uvarint notBefore  0: none (redeliver at once); otherwise
//	                     1 + (not-before in Unix milliseconds - timeBase)
//	byte    encoding   of the finished offsets: 0 = none (nothing follows),
//	                   1 = runs, 2 = bitset, then the body as in version 1
//	                   (meta.go), relative to base:
//	runs:   uvarint count (at most 2^16), then count pairs of uvarint (gap
//	        since the previous range's end, or base), uvarint (length >= 1)
//	bitset: uvarint nbits (at most 2^20), then ceil(nbits/8) bytes; bit i
//	        (LSB first) set means offset base+i is finished
//
// Every offset, and every range's end, is below 2^62 (ends at most 2^62),
// so no sum overflows. Not-before times are kept to the millisecond,
// rounded up (a message is never redelivered before its not-before), and
// clamped to ±2^62 ms from 1970 (about 146 million years). The gap
// encoding cannot express unsorted or repeated entries; the decoder
// rejects as corrupt an entry whose offset would reach 2^62, an attempt
// out of range, a not-before beyond the clamp, a waiting entry that lies
// within a finished range, and trailing bytes.
//
// Within the size limit the waiting entries come first: the encoder keeps
// as many of them as fit, lowest offsets first, and gives the finished
// offsets whatever room is left (which may hold a short range even when
// the next waiting entry did not fit). What does not fit is left out and
// counted; a waiting message left out starts again at attempt 1 with the
// next owner, a finished one left out is handled again.
//
// There is no version byte: the prefix is the version. This decoder, too,
// rejects as corrupt what it cannot parse after "orderly2:", so a later
// version that members on this one must ignore needs a prefix of its own
// that does not start with "orderly2:" (nor "orderly:"); any other prefix
// gives ErrNotOrderlyMetadata.

// MetaPrefix2 starts every version 2 metadata string. It does not start
// with MetaPrefix, so the version 1 decoder ignores it.
const MetaPrefix2 = "orderly2:"

const (
	// maxMetaWaiting bounds the waiting entries a decoder accepts; the
	// encoder never writes more.
	maxMetaWaiting = 1 << 16
	// maxMetaAttempt is the largest attempt count written or accepted
	// (an int on every platform).
	maxMetaAttempt = 1<<31 - 1
	// maxNotBeforeMillis bounds not-before times, as Unix milliseconds,
	// in both directions.
	maxNotBeforeMillis = 1 << 62
	// minWaitingBytes is the least an entry takes: three one-byte uvarints.
	minWaitingBytes = 3
)

// Waiting is a message that waits for a retry or a deferred redelivery.
type Waiting struct {
	Offset    int64
	Attempt   int       // the Attempt of the message's next delivery (>= 2 after one failure)
	NotBefore time.Time // not redelivered before this (zero: at once)
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

// EncodeMeta2 encodes waiting entries and finished ranges as version 2
// metadata of at most maxLen bytes. It returns the metadata ("" when
// there is nothing to say or not even the header fits), how many waiting
// entries it left out and how many finished offsets.
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
func EncodeMeta2(base int64, waiting []Waiting, ranges []Range, maxLen int) (meta string, leftWaiting int, leftFinished int64) {
	if len(waiting) == 0 && len(ranges) == 0 {
		return "", 0, 0
	}
	budget := 0
	if maxLen > len(MetaPrefix2) {
		budget = base64.RawURLEncoding.DecodedLen(maxLen - len(MetaPrefix2))
	}
	timeBase, found := int64(0), false
	for _, w := range waiting {
		if ms, ok := notBeforeMillis(w.NotBefore); ok && (!found || ms < timeBase) {
			timeBase, found = ms, true
		}
	}
	head := uvarintLen(uint64(base)) + uvarintLen(zigzag(timeBase))
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
			uvarintLen(notBeforeDelta(w.NotBefore, timeBase))
		if size+n > room {
			break
		}
		size += n
		prev = w.Offset + 1
	}
	b := make([]byte, 0, min(budget, head+uvarintLen(uint64(kept))+size+1))
	b = binary.AppendUvarint(b, uint64(base))
	b = binary.AppendVarint(b, timeBase)
	b = binary.AppendUvarint(b, uint64(kept))
	prev := base
	for _, w := range waiting[:kept] {
		b = binary.AppendUvarint(b, uint64(w.Offset-prev))
		b = binary.AppendUvarint(b, uint64(attempt(w.Attempt)))
		b = binary.AppendUvarint(b, notBeforeDelta(w.NotBefore, timeBase))
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
	return metaString(MetaPrefix2, finished), leftWaiting, leftFinished
}

// attempt is a as written: within 1 and maxMetaAttempt.
func attempt(a int) int64 { return min(max(int64(a), 1), maxMetaAttempt) }

// notBeforeMillis is t in Unix milliseconds, rounded up and clamped to
// ±maxNotBeforeMillis; ok is false for the zero time (no not-before).
func notBeforeMillis(t time.Time) (ms int64, ok bool) {
	if t.IsZero() {
		return 0, false
	}
	// Compare seconds first, with a second to spare: UnixMilli is
	// undefined for times whose milliseconds do not fit an int64.
	switch sec := t.Unix(); {
	case sec > maxNotBeforeMillis/1000+1:
		return maxNotBeforeMillis, true
	case sec < -maxNotBeforeMillis/1000-1:
		return -maxNotBeforeMillis, true
	}
	ms = t.UnixMilli() // rounded down: the nanoseconds are never negative
	if t.Nanosecond()%1e6 != 0 {
		ms++
	}
	return min(max(ms, -maxNotBeforeMillis), maxNotBeforeMillis), true
}

// notBeforeDelta is the notBefore field of an entry: 0 for none, else 1 +
// the milliseconds since timeBase (never negative: timeBase is the
// earliest).
func notBeforeDelta(t time.Time, timeBase int64) uint64 {
	ms, ok := notBeforeMillis(t)
	if !ok {
		return 0
	}
	return uint64(ms-timeBase) + 1
}

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// decode2 parses a version 2 payload into d.
func (d *Done) decode2(raw []byte) error {
	r := metaReader{raw}
	ubase, ok := r.uvarint()
	if !ok || ubase > maxMetaOffset {
		return errors.New("base offset")
	}
	d.Base = int64(ubase)
	timeBase, ok := r.varint()
	if !ok || timeBase > maxNotBeforeMillis || timeBase < -maxNotBeforeMillis {
		return errors.New("time base")
	}
	n, ok := r.uvarint()
	if !ok || n > maxMetaWaiting || n > uint64(len(r.p))/minWaitingBytes {
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
		if !ok1 || !ok2 || !ok3 {
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
		if nb != 0 {
			// timeBase is within ±2^62, so the room up to the bound fits
			// a uint64 and the sum below an int64.
			if nb-1 > uint64(maxNotBeforeMillis)-uint64(timeBase) {
				return fmt.Errorf("not-before at offset %d", w.Offset)
			}
			w.NotBefore = time.UnixMilli(int64(uint64(timeBase) + (nb - 1)))
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
