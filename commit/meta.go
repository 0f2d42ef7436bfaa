package commit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Commit metadata carries what a frontier alone cannot: which messages
// above the committed offset are already finished, and (versions 2 and 3,
// see meta2.go) which are waiting for a retry or a deferred redelivery,
// with their attempt count, not-before time and (version 3) first
// failure. Workers finish messages of different lanes out of offset
// order, so when a partition changes owner the frontier stops at the
// oldest unfinished message while later ones are done; the next owner
// reads the metadata and skips those, so a graceful handoff repeats
// nothing.
//
// Version 1: "orderly:" + base64url (no padding) of
//
//	byte    version (1)
//	byte    encoding: 1 = runs, 2 = bitset
//	uvarint base (the committed offset the ranges are relative to)
//	runs:   uvarint n, then n pairs of uvarint (gap since the previous
//	        range's end, or base), uvarint (length >= 1)
//	bitset: uvarint nbits, then ceil(nbits/8) bytes; bit i (LSB first) set
//	        means offset base+i is finished
//
// The decoder of version 1 as released (86bbeef) answers
// ErrNotOrderlyMetadata for anything that does not start with "orderly:"
// and ErrBadMetadata for any other version byte, so version 2 has its own
// prefix: members still on version 1 take it for someone else's metadata
// and ignore it without error (they redo the finished messages and start
// the attempt counts again: at-least-once). Version 3 has a prefix of its
// own for the same reason (meta2.go). DecodeMeta reads all three.
//
// Kafka rejects a commit whose metadata exceeds offset.metadata.max.bytes
// (4096 by default), so encoders stop at a size limit: finished messages
// that do not fit are left out and will be handled again.

// MetaPrefix starts every version 1 metadata string.
const MetaPrefix = "orderly:"

const (
	metaVersion    = 1
	encodingNone   = 0 // versions 2 and 3 only: no finished section body
	encodingRuns   = 1
	encodingBitset = 2
	// maxMetaRanges and maxMetaBits bound what a decoder accepts, whatever
	// the input; the encoders never write more.
	maxMetaRanges = 1 << 16
	maxMetaBits   = 1 << 20
	// maxMetaOffset bounds offsets and range ends, so that no sum of an
	// offset and a gap or length overflows int64.
	maxMetaOffset = 1 << 62
)

var (
	// ErrNotOrderlyMetadata: the metadata was written by someone else (or
	// is empty); it is not an error to find it, just nothing to use.
	ErrNotOrderlyMetadata = errors.New("commit: metadata not written by orderly")
	// ErrBadMetadata: the metadata has the orderly prefix but is corrupt.
	ErrBadMetadata = errors.New("commit: corrupt orderly metadata")
)

// Range is a half-open offset range [Start, End).
type Range struct{ Start, End int64 }

// Done is the decoded metadata: offsets at or above Base that are already
// finished (Ranges) and, from version 2 or 3 metadata, the messages at or
// above Base that are waiting for a redelivery (Waiting, sorted by offset,
// none of them within Ranges). Contains and WaitingAt must each be called
// with increasing offsets.
type Done struct {
	Base    int64
	Ranges  []Range
	Waiting []Waiting
	i, w    int // cursors of Contains and WaitingAt
}

// Contains reports whether off is finished. Offsets must be asked in
// increasing order (as a partition delivers them); cost is O(1) amortized.
func (d *Done) Contains(off int64) bool {
	for d.i < len(d.Ranges) && d.Ranges[d.i].End <= off {
		d.i++
	}
	return d.i < len(d.Ranges) && d.Ranges[d.i].Start <= off
}

// AppendAfter appends to dst the ranges' offsets above after, merging
// with dst's last range when adjacent. A claim that resumed from metadata
// and is let go before reaching all of it carries the rest forward this
// way, so the next owner still skips them.
func (d *Done) AppendAfter(dst []Range, after int64) []Range {
	for _, r := range d.Ranges {
		if r.End <= after+1 {
			continue
		}
		r.Start = max(r.Start, after+1)
		if k := len(dst); k > 0 && dst[k-1].End >= r.Start {
			dst[k-1].End = max(dst[k-1].End, r.End)
			continue
		}
		dst = append(dst, r)
	}
	return dst
}

// DropFrom drops the finished offsets and waiting messages at or above end
// (a partition's high watermark: no message there has been written yet, so
// none can have finished) and returns how many finished offsets and
// waiting messages it dropped.
func (d *Done) DropFrom(end int64) (finished int64, waiting int) {
	for i := len(d.Ranges) - 1; i >= 0 && d.Ranges[i].End > end; i-- {
		r := &d.Ranges[i]
		finished += r.End - max(r.Start, end)
		if r.Start >= end {
			d.Ranges = d.Ranges[:i]
		} else {
			r.End = end
		}
	}
	k := len(d.Waiting)
	for k > 0 && d.Waiting[k-1].Offset >= end {
		k--
	}
	waiting, d.Waiting = len(d.Waiting)-k, d.Waiting[:k]
	return finished, waiting
}

// Count is the number of offsets the ranges cover.
func (d *Done) Count() int64 {
	var n int64
	for _, r := range d.Ranges {
		n += r.End - r.Start
	}
	return n
}

// EncodeMeta encodes ranges (sorted, disjoint, at or above base) as
// version 1 metadata of at most maxLen bytes, choosing the smaller of the
// two encodings. It returns the metadata ("" when there is nothing to say)
// and how many offsets of the ranges it had to leave out to fit. Version 1
// cannot carry waiting messages; EncodeWaitingMeta writes versions 2 and 3.
func EncodeMeta(base int64, ranges []Range, maxLen int) (meta string, left int64) {
	if len(ranges) == 0 || maxLen <= len(MetaPrefix)+8 {
		return "", countRanges(ranges)
	}
	budget := base64.RawURLEncoding.DecodedLen(maxLen - len(MetaPrefix))
	runs, runsLeft := encodeRuns(header(encodingRuns, base), base, ranges, budget)
	bits, bitsLeft := encodeBitset(header(encodingBitset, base), base, ranges, budget)
	payload, left := runs, runsLeft
	if bitsLeft < runsLeft || (bitsLeft == runsLeft && len(bits) < len(runs)) {
		payload, left = bits, bitsLeft
	}
	if payload == nil {
		return "", left
	}
	return metaString(MetaPrefix, payload), left
}

func header(enc byte, base int64) []byte {
	b := []byte{metaVersion, enc}
	return binary.AppendUvarint(b, uint64(base))
}

// metaString is prefix + base64url(payload) with one allocation for the
// text besides the string itself.
func metaString(prefix string, payload []byte) string {
	b := make([]byte, len(prefix)+base64.RawURLEncoding.EncodedLen(len(payload)))
	copy(b, prefix)
	base64.RawURLEncoding.Encode(b[len(prefix):], payload)
	return string(b)
}

func countRanges(ranges []Range) int64 {
	var n int64
	for _, r := range ranges {
		n += r.End - r.Start
	}
	return n
}

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// encodeRuns appends to b (which ends with the encoding byte and whatever
// precedes it) the runs body of as many ranges as fit in budget bytes in
// all, at most maxMetaRanges. It returns nil when not one range fits, and
// how many offsets it left out.
func encodeRuns(b []byte, base int64, ranges []Range, budget int) ([]byte, int64) {
	// Size the pairs first, so the count can precede them without a
	// second buffer; the count's room is that of all the ranges' count.
	room := budget - len(b) - uvarintLen(uint64(len(ranges)))
	prev, kept, size := base, 0, 0
	for _, r := range ranges {
		n := uvarintLen(uint64(r.Start-prev)) + uvarintLen(uint64(r.End-r.Start))
		if size+n > room || kept == maxMetaRanges {
			break
		}
		size += n
		prev, kept = r.End, kept+1
	}
	left := countRanges(ranges[kept:])
	if kept == 0 {
		return nil, left
	}
	b = slices.Grow(b, uvarintLen(uint64(kept))+size)
	b = binary.AppendUvarint(b, uint64(kept))
	prev = base
	for _, r := range ranges[:kept] {
		b = binary.AppendUvarint(b, uint64(r.Start-prev))
		b = binary.AppendUvarint(b, uint64(r.End-r.Start))
		prev = r.End
	}
	return b, left
}

// encodeBitset appends to b the bitset body of the ranges' offsets below
// base + nbits, with nbits as large as budget bytes in all allow (at most
// maxMetaBits). It returns how many offsets it left out, and nil with
// 1<<62 (worse than any runs body) when not one bit fits or there are no
// ranges.
func encodeBitset(b []byte, base int64, ranges []Range, budget int) ([]byte, int64) {
	room := min(int64(budget-len(b)-binary.MaxVarintLen32)*8, maxMetaBits)
	if room <= 0 || len(ranges) == 0 {
		return nil, 1 << 62
	}
	nbits := min(ranges[len(ranges)-1].End-base, room)
	if nbits <= 0 { // only for ranges not above base, which callers never give
		return nil, 1 << 62
	}
	var left int64
	b = binary.AppendUvarint(b, uint64(nbits))
	b = append(b, make([]byte, (nbits+7)/8)...)
	bits := b[len(b)-int((nbits+7)/8):]
	for _, r := range ranges {
		for off := max(r.Start, base); off < r.End; off++ {
			i := off - base
			if i >= nbits {
				left += r.End - off
				break
			}
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return b, left
}

// DecodeMeta parses metadata written by EncodeMeta (version 1) or
// EncodeWaitingMeta (versions 2 and 3; only they fill Done.Waiting, and only
// version 3 its FirstFailure). Metadata written by anything else, later
// versions included, gives ErrNotOrderlyMetadata; corrupt orderly
// metadata gives an error wrapping ErrBadMetadata. It never panics,
// whatever the input, and allocates at most a small multiple of the
// input's size, bounded by maxMetaRanges, maxMetaBits and maxMetaWaiting.
func DecodeMeta(meta string) (Done, error) {
	var prefix string
	switch {
	case strings.HasPrefix(meta, MetaPrefix):
		prefix = MetaPrefix
	case strings.HasPrefix(meta, MetaPrefix2):
		prefix = MetaPrefix2
	case strings.HasPrefix(meta, MetaPrefix3):
		prefix = MetaPrefix3
	default:
		return Done{}, ErrNotOrderlyMetadata
	}
	raw, err := base64.RawURLEncoding.DecodeString(meta[len(prefix):])
	if err != nil {
		return Done{}, fmt.Errorf("%w: %w", ErrBadMetadata, err)
	}
	var d Done
	if prefix == MetaPrefix {
		err = d.decode1(raw)
	} else {
		err = d.decode2(raw, prefix == MetaPrefix3)
	}
	if err != nil {
		return Done{}, fmt.Errorf("%w: %w", ErrBadMetadata, err)
	}
	return d, nil
}

// decode1 parses a version 1 payload into d.
func (d *Done) decode1(raw []byte) error {
	if len(raw) < 2 {
		return errors.New("too short")
	}
	if raw[0] != metaVersion {
		return fmt.Errorf("version %d", raw[0])
	}
	enc, r := raw[1], metaReader{raw[2:]}
	ubase, ok := r.uvarint()
	if !ok || ubase > maxMetaOffset {
		return errors.New("base offset")
	}
	d.Base = int64(ubase)
	switch enc {
	case encodingRuns, encodingBitset:
		return d.decodeFinished(enc, &r)
	default:
		return fmt.Errorf("encoding %d", enc)
	}
}

// decodeFinished parses a runs or bitset body, the last thing in the
// payload, into d.Ranges, relative to d.Base.
func (d *Done) decodeFinished(enc byte, r *metaReader) error {
	switch enc {
	case encodingRuns:
		n, ok := r.uvarint()
		if !ok || n > maxMetaRanges || n > uint64(len(r.p)) {
			return errors.New("range count")
		}
		d.Ranges = make([]Range, 0, n)
		prev := d.Base
		for range n {
			gap, ok1 := r.uvarint()
			length, ok2 := r.uvarint()
			if !ok1 || !ok2 || length == 0 || gap > maxMetaOffset || length > maxMetaOffset {
				return errors.New("range")
			}
			start := prev + int64(gap)
			end := start + int64(length)
			if start < prev || end <= start || end > maxMetaOffset {
				return errors.New("range overflow")
			}
			d.Ranges = append(d.Ranges, Range{start, end})
			prev = end
		}
	case encodingBitset:
		nbits, ok := r.uvarint()
		if !ok || nbits > maxMetaBits || (nbits+7)/8 != uint64(len(r.p)) || d.Base+int64(nbits) > maxMetaOffset {
			return errors.New("bitset length")
		}
		p := r.p
		r.p = nil
		// Bits at or above nbits in the last byte mean nothing (the loop
		// below never reads them); bitRuns may count them, which only
		// makes the capacity a few ranges larger.
		if runs := bitRuns(p); runs > 0 {
			d.Ranges = make([]Range, 0, runs)
		}
		for i := int64(0); i < int64(nbits); i++ {
			if p[i/8]&(1<<(i%8)) == 0 {
				if p[i/8] == 0 {
					i |= 7 // skip the rest of an empty byte
				}
				continue
			}
			off := d.Base + i
			if k := len(d.Ranges); k > 0 && d.Ranges[k-1].End == off {
				d.Ranges[k-1].End++
			} else {
				d.Ranges = append(d.Ranges, Range{off, off + 1})
			}
		}
	default:
		return fmt.Errorf("encoding %d", enc)
	}
	if len(r.p) != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

// bitRuns counts the runs of set bits in p (bit i of the set is bit i%8,
// LSB first, of byte i/8).
func bitRuns(p []byte) int {
	n := 0
	var prevTop byte // the last bit of the previous byte, as bit 0
	for _, x := range p {
		n += bits.OnesCount8(x &^ (x<<1 | prevTop))
		prevTop = x >> 7
	}
	return n
}

// metaReader reads varints off the front of p.
type metaReader struct{ p []byte }

func (r *metaReader) uvarint() (uint64, bool) {
	v, n := binary.Uvarint(r.p)
	if n <= 0 {
		return 0, false
	}
	r.p = r.p[n:]
	return v, true
}

func (r *metaReader) varint() (int64, bool) {
	v, n := binary.Varint(r.p)
	if n <= 0 {
		return 0, false
	}
	r.p = r.p[n:]
	return v, true
}

func (r *metaReader) byte() (byte, bool) {
	if len(r.p) == 0 {
		return 0, false
	}
	b := r.p[0]
	r.p = r.p[1:]
	return b, true
}
