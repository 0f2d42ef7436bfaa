package commit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Commit metadata carries what a frontier alone cannot: which messages
// above the committed offset are already finished. Workers finish messages
// of different lanes out of offset order, so when a partition changes owner
// the frontier stops at the oldest unfinished message while later ones are
// done; the next owner reads the metadata and skips those, so a graceful
// handoff repeats nothing.
//
// Format: "orderly:" + base64url (no padding) of
//
//	byte    version (1)
//	byte    encoding: 1 = runs, 2 = bitset
//	uvarint base (the committed offset the ranges are relative to)
//	runs:   uvarint n, then n pairs of uvarint (gap since the previous
//	        range's end, or base), uvarint (length >= 1)
//	bitset: uvarint nbits, then ceil(nbits/8) bytes; bit i (LSB first) set
//	        means offset base+i is finished
//
// Kafka rejects a commit whose metadata exceeds offset.metadata.max.bytes
// (4096 by default), so encoders stop at a size limit: finished messages
// that do not fit are left out and will be handled again.

// MetaPrefix starts every metadata string this package writes.
const MetaPrefix = "orderly:"

const (
	metaVersion    = 1
	encodingRuns   = 1
	encodingBitset = 2
	// maxMetaRanges bounds what a decoder accepts, whatever the input.
	maxMetaRanges = 1 << 16
	maxMetaBits   = 1 << 20
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
// finished. Contains must be called with increasing offsets.
type Done struct {
	Base   int64
	Ranges []Range
	i      int
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

// Count is the number of offsets the ranges cover.
func (d *Done) Count() int64 {
	var n int64
	for _, r := range d.Ranges {
		n += r.End - r.Start
	}
	return n
}

// EncodeMeta encodes ranges (sorted, disjoint, at or above base) as
// metadata of at most maxLen bytes, choosing the smaller of the two
// encodings. It returns the metadata ("" when there is nothing to say) and
// how many offsets of the ranges it had to leave out to fit.
func EncodeMeta(base int64, ranges []Range, maxLen int) (meta string, left int64) {
	if len(ranges) == 0 || maxLen <= len(MetaPrefix)+8 {
		for _, r := range ranges {
			left += r.End - r.Start
		}
		return "", left
	}
	budget := base64.RawURLEncoding.DecodedLen(maxLen - len(MetaPrefix))
	runs, runsLeft := encodeRuns(base, ranges, budget)
	bits, bitsLeft := encodeBitset(base, ranges, budget)
	payload, left := runs, runsLeft
	if bitsLeft < runsLeft || (bitsLeft == runsLeft && len(bits) < len(runs)) {
		payload, left = bits, bitsLeft
	}
	if payload == nil {
		return "", left
	}
	return MetaPrefix + base64.RawURLEncoding.EncodeToString(payload), left
}

func header(enc byte, base int64) []byte {
	b := []byte{metaVersion, enc}
	return binary.AppendUvarint(b, uint64(base))
}

func encodeRuns(base int64, ranges []Range, budget int) ([]byte, int64) {
	b := header(encodingRuns, base)
	body := make([]byte, 0, 64)
	prev, kept := base, 0
	var left int64
	for i, r := range ranges {
		var pair [2 * binary.MaxVarintLen64]byte
		n := binary.PutUvarint(pair[:], uint64(r.Start-prev))
		n += binary.PutUvarint(pair[n:], uint64(r.End-r.Start))
		// the count prefix can grow by a byte or two as ranges are added
		if len(b)+binary.MaxVarintLen32+len(body)+n > budget {
			for _, rest := range ranges[i:] {
				left += rest.End - rest.Start
			}
			break
		}
		body = append(body, pair[:n]...)
		prev, kept = r.End, kept+1
	}
	if kept == 0 {
		return nil, left
	}
	b = binary.AppendUvarint(b, uint64(kept))
	return append(b, body...), left
}

func encodeBitset(base int64, ranges []Range, budget int) ([]byte, int64) {
	b := header(encodingBitset, base)
	room := int64(budget-len(b)-binary.MaxVarintLen32) * 8
	if room <= 0 {
		return nil, 1 << 62
	}
	nbits := min(ranges[len(ranges)-1].End-base, room)
	var left int64
	bits := make([]byte, (nbits+7)/8)
	for _, r := range ranges {
		for off := r.Start; off < r.End; off++ {
			i := off - base
			if i >= nbits {
				left += r.End - off
				break
			}
			bits[i/8] |= 1 << (i % 8)
		}
	}
	if left > 0 && nbits == 0 {
		return nil, left
	}
	b = binary.AppendUvarint(b, uint64(nbits))
	return append(b, bits...), left
}

// DecodeMeta parses metadata written by EncodeMeta. Metadata written by
// anything else gives ErrNotOrderlyMetadata; corrupt orderly metadata gives
// an error wrapping ErrBadMetadata. It never panics, whatever the input.
func DecodeMeta(meta string) (Done, error) {
	if !strings.HasPrefix(meta, MetaPrefix) {
		return Done{}, ErrNotOrderlyMetadata
	}
	raw, err := base64.RawURLEncoding.DecodeString(meta[len(MetaPrefix):])
	if err != nil {
		return Done{}, fmt.Errorf("%w: %w", ErrBadMetadata, err)
	}
	bad := func(what string) (Done, error) {
		return Done{}, fmt.Errorf("%w: %s", ErrBadMetadata, what)
	}
	if len(raw) < 2 {
		return bad("too short")
	}
	if raw[0] != metaVersion {
		return bad(fmt.Sprintf("version %d", raw[0]))
	}
	enc, p := raw[1], raw[2:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	ubase, ok := next()
	if !ok || ubase > 1<<62 {
		return bad("base offset")
	}
	d := Done{Base: int64(ubase)}
	switch enc {
	case encodingRuns:
		n, ok := next()
		if !ok || n > maxMetaRanges || n > uint64(len(p)) {
			return bad("range count")
		}
		d.Ranges = make([]Range, 0, n)
		prev := d.Base
		for range n {
			gap, ok1 := next()
			length, ok2 := next()
			if !ok1 || !ok2 || length == 0 || gap > 1<<62 || length > 1<<62 {
				return bad("range")
			}
			start := prev + int64(gap)
			end := start + int64(length)
			if start < prev || end <= start || end > 1<<62 {
				return bad("range overflow")
			}
			d.Ranges = append(d.Ranges, Range{start, end})
			prev = end
		}
	case encodingBitset:
		nbits, ok := next()
		if !ok || nbits > maxMetaBits || (nbits+7)/8 != uint64(len(p)) || d.Base+int64(nbits) > 1<<62 {
			return bad("bitset length")
		}
		for i := int64(0); i < int64(nbits); i++ {
			if p[i/8]&(1<<(i%8)) == 0 {
				continue
			}
			off := d.Base + i
			if k := len(d.Ranges); k > 0 && d.Ranges[k-1].End == off {
				d.Ranges[k-1].End++
			} else {
				d.Ranges = append(d.Ranges, Range{off, off + 1})
			}
		}
		p = nil
	default:
		return bad(fmt.Sprintf("encoding %d", enc))
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return d, nil
}
