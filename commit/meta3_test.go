package commit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// decodeMetaV2Landed is DecodeMeta as it landed in 705ec08 (commit/meta.go
// and meta2.go, unchanged up to version 3), the decoder of members still on
// version 2, with its constants inlined so that later changes to this
// package cannot change it. Version 1 it decodes as decodeMetaV1Landed
// (FuzzDecodeMeta checked that at 705ec08), so it hands that on. The tests
// check what it makes of version 3 (it must ignore it without error) and
// that today's DecodeMeta reads version 2 exactly as it did.
func decodeMetaV2Landed(meta string) (Done, error) {
	const (
		MetaPrefix         = "orderly:"
		MetaPrefix2        = "orderly2:"
		maxMetaOffset      = 1 << 62
		maxMetaWaiting     = 1 << 16
		maxMetaAttempt     = 1<<31 - 1
		maxNotBeforeMillis = 1 << 62
		minWaitingBytes    = 3
		maxMetaRanges      = 1 << 16
		maxMetaBits        = 1 << 20
		encodingNone       = 0
		encodingRuns       = 1
		encodingBitset     = 2
	)
	switch {
	case strings.HasPrefix(meta, MetaPrefix):
		return decodeMetaV1Landed(meta)
	case !strings.HasPrefix(meta, MetaPrefix2):
		return Done{}, ErrNotOrderlyMetadata
	}
	raw, err := base64.RawURLEncoding.DecodeString(meta[len(MetaPrefix2):])
	if err != nil {
		return Done{}, fmt.Errorf("%w: %w", ErrBadMetadata, err)
	}
	bad := func(what string) (Done, error) {
		return Done{}, fmt.Errorf("%w: %s", ErrBadMetadata, what)
	}
	p := raw
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	ubase, ok := uvarint()
	if !ok || ubase > maxMetaOffset {
		return bad("base offset")
	}
	d := Done{Base: int64(ubase)}
	timeBase, n := binary.Varint(p)
	if n <= 0 || timeBase > maxNotBeforeMillis || timeBase < -maxNotBeforeMillis {
		return bad("time base")
	}
	p = p[n:]
	count, ok := uvarint()
	if !ok || count > maxMetaWaiting || count > uint64(len(p))/minWaitingBytes {
		return bad("waiting count")
	}
	if count > 0 {
		d.Waiting = make([]Waiting, 0, count)
	}
	next := d.Base
	for range count {
		gap, ok1 := uvarint()
		att, ok2 := uvarint()
		nb, ok3 := uvarint()
		if !ok1 || !ok2 || !ok3 {
			return bad("waiting entry")
		}
		if gap >= uint64(maxMetaOffset-next) {
			return bad("waiting offset")
		}
		w := Waiting{Offset: next + int64(gap)}
		if att == 0 || att > maxMetaAttempt {
			return bad("attempt")
		}
		w.Attempt = int(att)
		if nb != 0 {
			if nb-1 > uint64(maxNotBeforeMillis)-uint64(timeBase) {
				return bad("not-before")
			}
			w.NotBefore = time.UnixMilli(int64(uint64(timeBase) + (nb - 1)))
		}
		d.Waiting = append(d.Waiting, w)
		next = w.Offset + 1
	}
	if len(p) == 0 {
		return bad("finished encoding")
	}
	enc := p[0]
	p = p[1:]
	switch enc {
	case encodingNone:
	case encodingRuns:
		n, ok := uvarint()
		if !ok || n > maxMetaRanges || n > uint64(len(p)) {
			return bad("range count")
		}
		d.Ranges = make([]Range, 0, n)
		prev := d.Base
		for range n {
			gap, ok1 := uvarint()
			length, ok2 := uvarint()
			if !ok1 || !ok2 || length == 0 || gap > maxMetaOffset || length > maxMetaOffset {
				return bad("range")
			}
			start := prev + int64(gap)
			end := start + int64(length)
			if start < prev || end <= start || end > maxMetaOffset {
				return bad("range overflow")
			}
			d.Ranges = append(d.Ranges, Range{start, end})
			prev = end
		}
	case encodingBitset:
		nbits, ok := uvarint()
		if !ok || nbits > maxMetaBits || (nbits+7)/8 != uint64(len(p)) || d.Base+int64(nbits) > maxMetaOffset {
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
		return bad("encoding")
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	i := 0
	for _, w := range d.Waiting {
		for i < len(d.Ranges) && d.Ranges[i].End <= w.Offset {
			i++
		}
		if i < len(d.Ranges) && d.Ranges[i].Start <= w.Offset {
			return bad("waiting offset listed as finished")
		}
	}
	return d, nil
}

// failed is ws with first failures set: an hour before each not-before,
// or 5 minutes before now for those without one.
func failed(ws []Waiting) []Waiting {
	out := slices.Clone(ws)
	for i := range out {
		out[i].FirstFailure = now.Add(-5 * time.Minute)
		if !out[i].NotBefore.IsZero() {
			out[i].FirstFailure = out[i].NotBefore.Add(-time.Hour)
		}
	}
	return out
}

func TestMeta3RoundTrip(t *testing.T) {
	const top = int64(1) << 62
	ws, rs := waitingAndFragments(1000, 300)
	deferral := Waiting{Offset: 9, Attempt: 1, NotBefore: now.Add(time.Minute)} // never failed
	tests := []struct {
		name    string
		base    int64
		waiting []Waiting
		ranges  []Range
	}{
		{"one failed", 100, []Waiting{{100, 2, now, now.Add(-time.Second)}}, nil},
		{"failed and a deferral", 7, []Waiting{{7, 3, now, now.Add(-time.Hour)}, deferral}, []Range{{8, 9}, {12, 20}}},
		{"first failure without a not-before (let go, due now)", 7, []Waiting{{7, 2, time.Time{}, now}, {8, 4, now, now.Add(-time.Minute)}}, nil},
		{"first failures out of offset order", 7, []Waiting{{7, 2, now, now}, {8, 2, now, now.Add(-72 * time.Hour)}, {10, 2, now, now.Add(time.Hour)}}, []Range{{9, 10}}},
		{"both, fragmented (bitset)", 1000, failed(ws), rs},
		{"huge offsets near 2^62", top - 100, []Waiting{{top - 100, 2, now, now}, {top - 1, 9, now, now.Add(-time.Hour)}}, []Range{{top - 99, top - 1}}},
		{"first failure at 1970 and before", 7, []Waiting{{7, 2, now, time.UnixMilli(0)}, {8, 2, now, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}}, nil},
		{"first failures far apart", 7, []Waiting{{7, 2, now, time.UnixMilli(-maxMetaMillis)}, {8, 2, now, time.UnixMilli(maxMetaMillis)}}, nil},
		{"first failures just inside the bounds", 7,
			[]Waiting{{7, 2, now, time.UnixMilli(-maxMetaMillis + 137)}, {8, 2, now, time.UnixMilli(maxMetaMillis - 137)}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { roundTripWaiting(t, MetaPrefix3, tt.base, tt.waiting, tt.ranges) })
	}
}

// TestMeta3Normalizes: first failures are kept to the millisecond,
// rounded down (as a dead letter's header shows them), and clamped.
func TestMeta3Normalizes(t *testing.T) {
	tests := []struct {
		name     string
		in, want time.Time
	}{
		{"sub-millisecond rounds down", now.Add(time.Millisecond - 1), now},
		{"before 1970 rounds down too", time.UnixMilli(-5).Add(1), time.UnixMilli(-5)},
		{"beyond 2^62 ms is clamped", time.Unix(1<<60, 0), time.UnixMilli(maxMetaMillis)},
		{"before -2^62 ms is clamped", time.Unix(-1<<60, 0), time.UnixMilli(-maxMetaMillis)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, leftW, _ := EncodeWaitingMeta(0, []Waiting{{0, 2, now, tt.in}}, nil, 4000)
			d, err := DecodeMeta(meta)
			if err != nil || leftW != 0 || len(d.Waiting) != 1 || !d.Waiting[0].FirstFailure.Equal(tt.want) {
				t.Fatalf("got %v (left %d, %v), want first failure %v", d.Waiting, leftW, err, tt.want)
			}
		})
	}
}

// TestMetaVersionChoice: version 3 only when a waiting entry has a first
// failure, so that members still on version 2 read everything else.
func TestMetaVersionChoice(t *testing.T) {
	tests := []struct {
		name    string
		waiting []Waiting
		ranges  []Range
		want    string
	}{
		{"finished only", nil, []Range{{11, 12}}, MetaPrefix2},
		{"waiting without first failures (resumed from version 2)", []Waiting{{10, 3, now, time.Time{}}}, nil, MetaPrefix2},
		{"a deferral that never failed", []Waiting{{10, 1, now, time.Time{}}}, []Range{{11, 12}}, MetaPrefix2},
		{"one of several failed", []Waiting{{10, 1, now, time.Time{}}, {12, 2, now, now.Add(-time.Second)}, {13, 2, now, time.Time{}}}, nil, MetaPrefix3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, _, _ := EncodeWaitingMeta(10, tt.waiting, tt.ranges, 4000)
			if !strings.HasPrefix(meta, tt.want) {
				t.Fatalf("EncodeWaitingMeta: got %q, want the prefix %q", meta, tt.want)
			}
			if _, err := decodeMetaV2Landed(meta); (err == nil) != (tt.want == MetaPrefix2) {
				t.Fatalf("landed version 2 decoder on %q: got %v, want it read only version 2", meta, err)
			}
		})
	}
}

// TestLandedDecodersIgnoreV3: members still on version 1 or 2 take version
// 3 metadata for someone else's (ErrNotOrderlyMetadata, which group
// ignores silently), not for corrupt orderly metadata (ErrBadMetadata,
// which it logs and counts); version 2 still reads as it did.
func TestLandedDecodersIgnoreV3(t *testing.T) {
	ws, rs := waitingAndFragments(0, 1000)
	full, leftW, _ := EncodeWaitingMeta(0, failed(ws), rs, 4000)
	some, frag := waitingAndFragments(1000, 50)
	if leftW == 0 {
		t.Fatalf("full: got every waiting entry in 4000 bytes, want some left out")
	}
	tests := []struct {
		name string
		meta string
	}{
		{"only waiting", must2(EncodeWaitingMeta(5, []Waiting{{5, 2, now, now}}, nil, 4000))},
		{"both, runs", must2(EncodeWaitingMeta(5, []Waiting{{5, 2, now, now}}, []Range{{6, 9}}, 4000))},
		{"both, bitset", must2(EncodeWaitingMeta(1000, failed(some), frag, 4000))},
		{"filled to the limit", full},
		{"corrupt version 3", MetaPrefix3 + "!!!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.HasPrefix(tt.meta, MetaPrefix3) {
				t.Fatalf("metadata %.40q...: want the prefix %q", tt.meta, MetaPrefix3)
			}
			for name, decode := range map[string]func(string) (Done, error){"1": decodeMetaV1Landed, "2": decodeMetaV2Landed} {
				if _, err := decode(tt.meta); errKind(err) != "ErrNotOrderlyMetadata" {
					t.Fatalf("landed version %s decoder on %.40q...: got %v, want ErrNotOrderlyMetadata", name, tt.meta, err)
				}
			}
		})
	}
	// Why version 3 has a prefix of its own: its payload after the
	// version 2 prefix is corrupt to the landed version 2 decoder (here
	// the first-failure base is read as a count of entries that are not
	// there).
	v3 := must2(EncodeWaitingMeta(5, []Waiting{{5, 2, now, now}}, []Range{{6, 9}}, 4000))
	if _, err := decodeMetaV2Landed(MetaPrefix2 + v3[len(MetaPrefix3):]); errKind(err) != "ErrBadMetadata" {
		t.Fatalf("landed version 2 decoder on a version 3 payload: got %v, want ErrBadMetadata", err)
	}
	// Version 2 as today's encoder writes it reads the same to the landed
	// version 2 decoder as to DecodeMeta.
	for _, meta := range []string{
		must2(EncodeWaitingMeta(5, []Waiting{{5, 2, now, time.Time{}}, {9, 1, now, time.Time{}}}, []Range{{6, 9}}, 4000)),
		must2(EncodeWaitingMeta(1000, some, frag, 4000)),
	} {
		got, err := DecodeMeta(meta)
		landed, lerr := decodeMetaV2Landed(meta)
		if err != nil || lerr != nil || landed.Base != got.Base || !slices.Equal(landed.Ranges, got.Ranges) || !sameWaiting(landed.Waiting, got.Waiting) {
			t.Fatalf("landed version 2 decoder on %.40q...: got %+v, %v, want %+v, %v", meta, landed, lerr, got, err)
		}
	}
}

// TestMeta3EveryLimit: with first failures, for every limit up to a few
// hundred bytes, the metadata fits it, the counts add up, and more room
// never keeps less.
func TestMeta3EveryLimit(t *testing.T) {
	ws, rs := waitingAndFragments(1<<40, 40)
	ws = failed(ws)
	rs = append(rs, Range{1<<40 + 1000, 1<<40 + 5000})
	prevW, prevF := len(ws)+1, countRanges(rs)+1
	for maxLen := 0; maxLen <= 800; maxLen++ {
		meta, leftW, leftF := EncodeWaitingMeta(1<<40, ws, rs, maxLen)
		if len(meta) > maxLen || meta != "" && !strings.HasPrefix(meta, MetaPrefix3) {
			t.Fatalf("maxLen %d: got %d bytes %.20q, want at most %d with the prefix %q", maxLen, len(meta), meta, maxLen, MetaPrefix3)
		}
		var d Done
		if meta != "" {
			var err error
			if d, err = DecodeMeta(meta); err != nil {
				t.Fatalf("maxLen %d: %v", maxLen, err)
			}
		}
		if !sameWaiting(d.Waiting, ws[:len(ws)-leftW]) || d.Count() != countRanges(rs)-leftF {
			t.Fatalf("maxLen %d: decoded %d waiting, %d finished, want the first %d, %d", maxLen, len(d.Waiting), d.Count(), len(ws)-leftW, countRanges(rs)-leftF)
		}
		if leftW > prevW || (leftW == prevW && leftF > prevF) {
			t.Fatalf("maxLen %d: left %d waiting, %d finished, want no more than at maxLen %d (%d, %d)", maxLen, leftW, leftF, maxLen-1, prevW, prevF)
		}
		prevW, prevF = leftW, leftF
	}
	if prevW != 0 || prevF != 0 {
		t.Fatalf("at 800 bytes: left %d waiting, %d finished, want 0, 0", prevW, prevF)
	}
}

func enc3(parts ...[]byte) string { return MetaPrefix3 + enc(cat(parts...)) }

func TestDecodeMeta3Errors(t *testing.T) {
	const top = uint64(1) << 62
	z := uv(0)
	entry := cat(uv(0), uv(2), uv(1), uv(1)) // at base, attempt 2, not-before timeBase, first failure failBase
	tests := []struct {
		name string
		meta string
	}{
		{"bad base64", MetaPrefix3 + "!!!"},
		{"empty", MetaPrefix3},
		{"no first-failure base", enc3(z, z)},
		{"first-failure base beyond 2^62 ms", enc3(z, z, sv(1<<62+1), z, z)},
		{"first-failure base before -2^62 ms", enc3(z, z, sv(-1<<62-1), z, z)},
		{"entry without its first failure (a version 2 entry)", enc3(z, z, z, uv(1), cat(z, uv(2), z), z)},
		{"count beyond data", enc3(z, z, z, uv(2), entry, z)},
		{"first failure beyond 2^62 ms", enc3(z, z, sv(1<<62), uv(1), cat(z, uv(2), z, uv(2)), z)},
		{"first failure beyond 2^62 ms from a negative base", enc3(z, z, sv(-1<<62), uv(1), cat(z, uv(2), z, uv(1<<63+2)), z)},
		{"attempt 0", enc3(z, z, z, uv(1), cat(z, z, z, uv(1)), z)},
		{"offset reaching 2^62", enc3(uv(top-1), z, z, uv(1), cat(uv(1), uv(2), z, uv(1)), z)},
		{"no finished encoding", enc3(z, z, z, uv(1), entry)},
		{"trailing bytes after none", enc3(z, z, z, uv(1), entry, z, z)},
		{"waiting offset finished (runs)", enc3(uv(10), z, z, uv(1), cat(uv(2), uv(2), z, uv(1)), uv(encodingRuns), uv(1), uv(1), uv(3))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeMeta(tt.meta); !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("DecodeMeta(%.60q): got %v, want ErrBadMetadata", tt.meta, err)
			}
		})
	}
	// The edges of those bounds are fine.
	for _, tt := range []struct {
		meta string
		want time.Time
	}{
		{enc3(z, z, sv(1<<62), uv(1), cat(z, uv(2), z, uv(1)), z), time.UnixMilli(1 << 62)},
		{enc3(z, z, sv(-1<<62), uv(1), cat(z, uv(2), z, uv(1<<63+1)), z), time.UnixMilli(1 << 62)},
		{enc3(z, z, sv(-1<<62), uv(1), cat(z, uv(2), z, uv(1)), z), time.UnixMilli(-1 << 62)},
		{enc3(uv(5), z, sv(now.UnixMilli()), uv(1), cat(z, uv(2), z, z), z), time.Time{}}, // none
	} {
		d, err := DecodeMeta(tt.meta)
		if err != nil || len(d.Waiting) != 1 || !d.Waiting[0].FirstFailure.Equal(tt.want) || d.Waiting[0].FirstFailure.IsZero() != tt.want.IsZero() {
			t.Fatalf("DecodeMeta(%q): got %+v, %v, want one entry with first failure %v", tt.meta, d.Waiting, err, tt.want)
		}
	}
}
