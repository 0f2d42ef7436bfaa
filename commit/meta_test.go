package commit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	dense := func(base int64, every int64, n int) []Range {
		var rs []Range
		for i := 0; i < n; i++ {
			s := base + 1 + int64(i)*every
			rs = append(rs, Range{s, s + 1})
		}
		return rs
	}
	tests := []struct {
		name   string
		base   int64
		ranges []Range
	}{
		{"one range", 100, []Range{{105, 110}}},
		{"adjacent to base", 7, []Range{{7, 8}, {9, 12}}},
		{"long runs", 1 << 40, []Range{{1<<40 + 3, 1<<40 + 50000}, {1<<40 + 60000, 1<<40 + 60001}}},
		{"fragmented (bitset wins)", 0, dense(0, 2, 500)},
		{"sparse (runs win)", 0, dense(0, 1000, 20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, left := EncodeMeta(tt.base, tt.ranges, 4000)
			if left != 0 {
				t.Fatalf("left out %d offsets, want 0", left)
			}
			if len(meta) > 4000 || !strings.HasPrefix(meta, MetaPrefix) {
				t.Fatalf("metadata: got %d bytes %q..., want at most 4000 with the prefix", len(meta), meta[:min(20, len(meta))])
			}
			d, err := DecodeMeta(meta)
			if err != nil {
				t.Fatalf("DecodeMeta: %v", err)
			}
			if d.Base != tt.base || !slices.Equal(d.Ranges, tt.ranges) {
				t.Fatalf("decoded base %d ranges %v, want %d %v", d.Base, d.Ranges, tt.base, tt.ranges)
			}
		})
	}
}

func TestMetaPicksSmallerEncoding(t *testing.T) {
	var frag []Range
	for i := int64(0); i < 1000; i++ {
		frag = append(frag, Range{1 + 2*i, 2 + 2*i})
	}
	meta, _ := EncodeMeta(0, frag, 4000)
	raw := decodeRaw(t, meta)
	if raw[1] != encodingBitset {
		t.Fatalf("fragmented ranges: got encoding %d, want bitset (%d)", raw[1], encodingBitset)
	}
	meta, _ = EncodeMeta(0, []Range{{1000, 900000}}, 4000)
	if raw := decodeRaw(t, meta); raw[1] != encodingRuns {
		t.Fatalf("one long range: got encoding %d, want runs (%d)", raw[1], encodingRuns)
	}
}

func decodeRaw(t *testing.T, meta string) []byte {
	t.Helper()
	d, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	_ = d
	raw, err := b64(meta)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestMetaTruncatesToFit: Kafka rejects oversized metadata, so the encoder
// leaves ranges out rather than exceed the limit, and says how many.
func TestMetaTruncatesToFit(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var ranges []Range
	off := int64(10)
	var total int64
	for range 20000 {
		off += 1 + r.Int64N(50)
		n := 1 + r.Int64N(3)
		ranges = append(ranges, Range{off, off + n})
		total += n
		off += n
	}
	meta, left := EncodeMeta(10, ranges, 4000)
	if len(meta) > 4000 {
		t.Fatalf("metadata length: got %d, want at most 4000", len(meta))
	}
	if left <= 0 {
		t.Fatalf("left out: got %d, want some (the ranges cannot fit)", left)
	}
	d, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Count(); got+left != total {
		t.Fatalf("kept %d + left %d, want the total %d", got, left, total)
	}
	// What was kept is a prefix of what was asked: nothing is claimed
	// finished that was not.
	for _, kr := range d.Ranges {
		if !coveredBy(kr, ranges) {
			t.Fatalf("decoded range %v is not within the encoded ranges", kr)
		}
	}
}

func coveredBy(r Range, rs []Range) bool {
	for _, x := range rs {
		if x.Start <= r.Start && r.End <= x.End {
			return true
		}
	}
	return false
}

func TestDecodeMetaErrors(t *testing.T) {
	tests := []struct {
		name string
		meta string
		want error
	}{
		{"empty", "", ErrNotOrderlyMetadata},
		{"someone else's", "checkpoint=42", ErrNotOrderlyMetadata},
		{"bad base64", MetaPrefix + "!!!", ErrBadMetadata},
		{"too short", MetaPrefix + enc([]byte{1}), ErrBadMetadata},
		{"future version", MetaPrefix + enc([]byte{9, 1, 0, 0}), ErrBadMetadata},
		{"unknown encoding", MetaPrefix + enc([]byte{1, 7, 0, 0}), ErrBadMetadata},
		{"zero-length range", MetaPrefix + enc([]byte{1, 1, 0, 1, 0, 0}), ErrBadMetadata},
		{"count beyond data", MetaPrefix + enc([]byte{1, 1, 0, 100, 1, 1}), ErrBadMetadata},
		{"trailing bytes", MetaPrefix + enc([]byte{1, 1, 0, 1, 1, 1, 9}), ErrBadMetadata},
		{"bitset length mismatch", MetaPrefix + enc([]byte{1, 2, 0, 16, 0xff}), ErrBadMetadata},
		{"truncated varint", MetaPrefix + enc([]byte{1, 1, 0x80}), ErrBadMetadata},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeMeta(tt.meta); !errors.Is(err, tt.want) {
				t.Fatalf("DecodeMeta(%q): got %v, want %v", tt.meta, err, tt.want)
			}
		})
	}
}

func TestDoneContains(t *testing.T) {
	d := Done{Base: 10, Ranges: []Range{{12, 14}, {20, 21}}}
	want := map[int64]bool{10: false, 11: false, 12: true, 13: true, 14: false, 19: false, 20: true, 21: false, 99: false}
	for off := int64(10); off < 100; off++ {
		w, listed := want[off]
		if got := d.Contains(off); listed && got != w {
			t.Fatalf("Contains(%d): got %v, want %v", off, got, w)
		}
	}
}

func TestTrackerFinishedRanges(t *testing.T) {
	tr := New[*entry]()
	offs := []int64{5, 6, 8, 9, 11, 12, 13} // 7 and 10 do not exist
	es := add(t, tr, offs...)
	for _, i := range []int{0, 2, 3, 4, 6} { // 5, 8, 9, 11, 13 finished
		tr.Finish(es[i])
	}
	base, ranges, ok := tr.Finished(nil)
	want := []Range{{7, 12}, {13, 14}} // 7..11 run over the missing 7 and 10
	if !ok || base != 6 || !slices.Equal(ranges, want) {
		t.Fatalf("Finished: got base %d ranges %v ok %v, want 6 %v true", base, ranges, ok, want)
	}
	fresh := New[*entry]()
	es = add(t, fresh, 40, 41)
	fresh.Finish(es[1])
	if base, ranges, ok := fresh.Finished(nil); !ok || base != 40 || !slices.Equal(ranges, []Range{{41, 42}}) {
		t.Fatalf("nothing released yet: got base %d ranges %v ok %v, want 40 [{41 42}] true", base, ranges, ok)
	}
}

// FuzzDecodeMeta covers all three versions: DecodeMeta never panics,
// reads version 1 as the landed version 1 decoder does and version 2 as
// the landed version 2 decoder does, returns only well-formed sets, and
// what it returns re-encodes to the same sets; the landed decoders ignore
// the later versions without error. The seeds in
// testdata/fuzz/FuzzDecodeMeta add version 2 and 3 strings (v2-*, v3-*)
// of each shape.
func FuzzDecodeMeta(f *testing.F) {
	m1, _ := EncodeMeta(3, []Range{{4, 9}, {12, 13}}, 4000)
	var frag []Range
	for i := int64(0); i < 40; i++ {
		frag = append(frag, Range{2 * i, 2*i + 1})
	}
	m2, _ := EncodeMeta(0, frag, 4000)
	ws, rs := waitingAndFragments(1<<40, 30)
	for _, seed := range []string{"", "x", MetaPrefix, m1, m2, MetaPrefix + enc([]byte{1, 1, 0, 1, 1, 1}),
		MetaPrefix2,
		must2(EncodeWaitingMeta(3, []Waiting{{3, 2, now, time.Time{}}, {9, 1e6, time.Time{}, time.Time{}}}, []Range{{4, 9}, {12, 13}}, 4000)),
		must2(EncodeWaitingMeta(1<<40, ws, rs, 4000)),
		must2(EncodeWaitingMeta(1<<40, ws, rs, 100)),
		MetaPrefix3,
		must2(EncodeWaitingMeta(3, []Waiting{{3, 2, now, now.Add(-time.Hour)}, {9, 1, now, time.Time{}}}, []Range{{4, 9}, {12, 13}}, 4000)),
		must2(EncodeWaitingMeta(1<<40, failed(ws), rs, 4000)),
		must2(EncodeWaitingMeta(1<<40, failed(ws), rs, 100)),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, meta string) {
		d, err := DecodeMeta(meta)
		landed, lerr := decodeMetaV1Landed(meta)
		switch {
		case strings.HasPrefix(meta, MetaPrefix):
			// Version 1 decodes exactly as the landed decoder decodes it.
			if errKind(err) != errKind(lerr) || landed.Base != d.Base || !slices.Equal(landed.Ranges, d.Ranges) || d.Waiting != nil {
				t.Fatalf("DecodeMeta(%q): got %+v, %v, want the landed decoder's %+v, %v", meta, d, err, landed, lerr)
			}
		case strings.HasPrefix(meta, MetaPrefix2):
			if errKind(lerr) != "ErrNotOrderlyMetadata" {
				t.Fatalf("landed decoder on %q: got %v, want ErrNotOrderlyMetadata", meta, lerr)
			}
			// Version 2 decodes exactly as the landed version 2 decoder
			// decodes it.
			landed2, lerr2 := decodeMetaV2Landed(meta)
			if errKind(err) != errKind(lerr2) || landed2.Base != d.Base || !slices.Equal(landed2.Ranges, d.Ranges) || !sameWaiting(landed2.Waiting, d.Waiting) {
				t.Fatalf("DecodeMeta(%q): got %+v, %v, want the landed version 2 decoder's %+v, %v", meta, d, err, landed2, lerr2)
			}
		case strings.HasPrefix(meta, MetaPrefix3):
			_, lerr2 := decodeMetaV2Landed(meta)
			if errKind(lerr) != "ErrNotOrderlyMetadata" || errKind(lerr2) != "ErrNotOrderlyMetadata" {
				t.Fatalf("landed decoders on %q: got %v (version 1), %v (version 2), want ErrNotOrderlyMetadata", meta, lerr, lerr2)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrBadMetadata) && !errors.Is(err, ErrNotOrderlyMetadata) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		prev := d.Base
		for _, r := range d.Ranges {
			if r.Start < prev || r.End <= r.Start || r.End > maxMetaOffset {
				t.Fatalf("decoded ranges not sorted and disjoint above base %d: %v", d.Base, d.Ranges)
			}
			prev = r.End
		}
		next := d.Base
		probe := d // Contains and WaitingAt move a copy's cursors
		for _, w := range d.Waiting {
			if w.Offset < next || w.Offset >= maxMetaOffset || w.Attempt < 1 || w.Attempt > maxMetaAttempt || probe.Contains(w.Offset) {
				t.Fatalf("decoded waiting entry %v: want sorted, distinct, at or above base %d, below 2^62, attempt 1 to 2^31-1, not finished", w, d.Base)
			}
			if ff := w.FirstFailure; !ff.IsZero() && (!strings.HasPrefix(meta, MetaPrefix3) || ff.UnixMilli() > maxMetaMillis || ff.UnixMilli() < -maxMetaMillis) {
				t.Fatalf("decoded first failure %v at offset %d: want none outside version 3, within ±2^62 ms", ff, w.Offset)
			}
			if got, ok := probe.WaitingAt(w.Offset); !ok || got != w {
				t.Fatalf("WaitingAt(%d): got %v %v, want %v", w.Offset, got, ok, w)
			}
			next = w.Offset + 1
		}
		if len(d.Ranges) == 0 && len(d.Waiting) == 0 {
			return // nothing to say re-encodes to ""
		}
		// What decodes must re-encode to the same sets, in version 2 or 3
		// and, without waiting entries, in version 1.
		again, leftW, leftF := EncodeWaitingMeta(d.Base, d.Waiting, d.Ranges, 1<<22)
		if leftW == 0 && leftF == 0 {
			d2, err := DecodeMeta(again)
			if err != nil || d2.Base != d.Base || !slices.Equal(merged(d2.Ranges), merged(d.Ranges)) || !sameWaiting(d2.Waiting, d.Waiting) {
				t.Fatalf("re-encode as version 2: got %v %v %v %v, want %v %v %v", d2.Base, d2.Ranges, d2.Waiting, err, d.Base, d.Ranges, d.Waiting)
			}
		}
		if len(d.Waiting) > 0 {
			return
		}
		again, left := EncodeMeta(d.Base, d.Ranges, 1<<22)
		if left != 0 {
			return // too large to re-encode in full; fine
		}
		d2, err := DecodeMeta(again)
		if err != nil || d2.Base != d.Base || !slices.Equal(merged(d2.Ranges), merged(d.Ranges)) {
			t.Fatalf("re-encode: got %v %v %v, want %v %v", d2.Base, d2.Ranges, err, d.Base, d.Ranges)
		}
	})
}

// merged is rs with adjacent ranges joined: runs may list [a,b) and [b,c)
// apart, a bitset cannot.
func merged(rs []Range) []Range {
	var out []Range
	for _, r := range rs {
		if k := len(out); k > 0 && out[k-1].End == r.Start {
			out[k-1].End = r.End
			continue
		}
		out = append(out, r)
	}
	return out
}

func enc(b []byte) string { return base64URL.EncodeToString(b) }

func b64(meta string) ([]byte, error) { return base64URL.DecodeString(meta[len(MetaPrefix):]) }

var base64URL = base64.RawURLEncoding

func TestDoneAppendAfter(t *testing.T) {
	d := Done{Base: 0, Ranges: []Range{{2, 4}, {6, 9}, {12, 13}}}
	tests := []struct {
		name  string
		dst   []Range
		after int64
		want  []Range
	}{
		{"before all", nil, 0, []Range{{2, 4}, {6, 9}, {12, 13}}},
		{"inside a range", nil, 6, []Range{{7, 9}, {12, 13}}},
		{"merges with dst", []Range{{5, 8}}, 7, []Range{{5, 9}, {12, 13}}},
		{"after all", []Range{{1, 2}}, 20, []Range{{1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := d.AppendAfter(tt.dst, tt.after); !slices.Equal(got, tt.want) {
				t.Fatalf("AppendAfter(%v, %d): got %v, want %v", tt.dst, tt.after, got, tt.want)
			}
		})
	}
}

// decodeMetaV1Landed is DecodeMeta as it landed in 86bbeef (commit/meta.go),
// before version 2 existed, with its constants inlined so that later
// changes to this package cannot change it. Members still running that
// code read the metadata newer members write: the tests check what it
// makes of version 2 (it must ignore it without error) and that today's
// DecodeMeta reads version 1 exactly as it did.
func decodeMetaV1Landed(meta string) (Done, error) {
	const (
		MetaPrefix     = "orderly:"
		metaVersion    = 1
		encodingRuns   = 1
		encodingBitset = 2
		maxMetaRanges  = 1 << 16
		maxMetaBits    = 1 << 20
	)
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

// errKind names the sentinel an error of this package wraps, so two
// decoders' answers can be compared.
func errKind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, ErrBadMetadata):
		return "ErrBadMetadata"
	case errors.Is(err, ErrNotOrderlyMetadata):
		return "ErrNotOrderlyMetadata"
	default:
		return "other: " + err.Error()
	}
}

// TestDecodeMetaV1Landed: strings the landed encoder wrote (copied from
// its output, not re-encoded here) decode as the landed decoder decodes
// them.
func TestDecodeMetaV1Landed(t *testing.T) {
	var frag []Range
	for i := int64(0); i < 12; i++ {
		frag = append(frag, Range{1001 + 2*i, 1002 + 2*i})
	}
	tests := []struct {
		name string
		meta string
		want Done
	}{
		{"runs", "orderly:AQFkAgUFWgE", Done{Base: 100, Ranges: []Range{{105, 110}, {200, 201}}}},
		{"bitset", "orderly:AQLoBxiqqqo", Done{Base: 1000, Ranges: frag}},
		{"fuzz seed", "orderly:AQE0AA", Done{Base: 52}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeMeta(tt.meta)
			if err != nil || got.Base != tt.want.Base || !slices.Equal(got.Ranges, tt.want.Ranges) || got.Waiting != nil {
				t.Fatalf("DecodeMeta(%q): got %+v, %v, want %+v, nil", tt.meta, got, err, tt.want)
			}
			landed, err := decodeMetaV1Landed(tt.meta)
			if err != nil || landed.Base != got.Base || !slices.Equal(landed.Ranges, got.Ranges) {
				t.Fatalf("landed decoder on %q: got %+v, %v, want %+v, nil", tt.meta, landed, err, got)
			}
		})
	}
}

// now is a fixed instant, to the millisecond, for not-before times.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func sameWaiting(a, b []Waiting) bool {
	return slices.EqualFunc(a, b, func(x, y Waiting) bool {
		return x.Offset == y.Offset && x.Attempt == y.Attempt &&
			x.NotBefore.Equal(y.NotBefore) && x.NotBefore.IsZero() == y.NotBefore.IsZero() &&
			x.FirstFailure.Equal(y.FirstFailure) && x.FirstFailure.IsZero() == y.FirstFailure.IsZero()
	})
}

func TestMeta2RoundTrip(t *testing.T) {
	const top = int64(1) << 62
	var frag []Range // every other offset above 1000 finished, the rest waiting
	var fragWaiting []Waiting
	for i := int64(0); i < 300; i++ {
		fragWaiting = append(fragWaiting, Waiting{1000 + 2*i, 2 + int(i%5), now.Add(time.Duration(i) * time.Second), time.Time{}})
		frag = append(frag, Range{1001 + 2*i, 1002 + 2*i})
	}
	tests := []struct {
		name    string
		base    int64
		waiting []Waiting
		ranges  []Range
	}{
		{"no waiting", 100, nil, []Range{{105, 110}, {200, 201}}},
		{"only waiting", 100, []Waiting{{100, 2, now, time.Time{}}, {104, 3, now.Add(time.Minute), time.Time{}}}, nil},
		{"both", 100, []Waiting{{100, 2, now, time.Time{}}, {150, 4, now.Add(-time.Hour), time.Time{}}}, []Range{{101, 150}, {151, 160}}},
		{"both, fragmented (bitset)", 1000, fragWaiting, frag},
		{"huge offsets near 2^62", top - 100,
			[]Waiting{{top - 100, 2, now, time.Time{}}, {top - 1, 9, now, time.Time{}}}, []Range{{top - 99, top - 1}}},
		{"finished up to 2^62", top - 100, []Waiting{{top - 100, 2, now, time.Time{}}}, []Range{{top - 50, top}}},
		{"attempts up to 1e6", 0,
			[]Waiting{{0, 1, now, time.Time{}}, {1, 2, now, time.Time{}}, {2, 127, now, time.Time{}}, {3, 128, now, time.Time{}}, {4, 1e6, now, time.Time{}}, {5, maxMetaAttempt, now, time.Time{}}}, nil},
		{"not-before in the past", 7,
			[]Waiting{{7, 2, now.Add(-72 * time.Hour), time.Time{}}, {8, 2, time.UnixMilli(0), time.Time{}}, {9, 3, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}}}, nil},
		{"not-before far in the future", 7,
			[]Waiting{{7, 2, time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC), time.Time{}}, {8, 2, time.UnixMilli(maxMetaMillis), time.Time{}}}, nil},
		{"not-before far apart", 7,
			[]Waiting{{7, 2, time.UnixMilli(-maxMetaMillis), time.Time{}}, {8, 2, time.UnixMilli(maxMetaMillis), time.Time{}}}, nil},
		{"not-before just inside the bounds", 7, // within a second of them (found by fuzzing)
			[]Waiting{{7, 2, time.UnixMilli(-maxMetaMillis + 137), time.Time{}}, {8, 2, time.UnixMilli(maxMetaMillis - 137), time.Time{}}}, nil},
		{"zero not-before", 7, []Waiting{{7, 2, time.Time{}, time.Time{}}, {9, 5, time.Time{}, time.Time{}}}, []Range{{8, 9}}},
		{"zero and set not-before", 7, []Waiting{{7, 2, time.Time{}, time.Time{}}, {8, 5, now, time.Time{}}, {10, 3, time.Time{}, time.Time{}}}, []Range{{9, 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { roundTripWaiting(t, MetaPrefix2, tt.base, tt.waiting, tt.ranges) })
	}
}

// TestMeta2Normalizes: what EncodeWaitingMeta writes for values the format
// cannot hold as given.
func TestMeta2Normalizes(t *testing.T) {
	tests := []struct {
		name string
		in   Waiting
		want Waiting
	}{
		{"sub-millisecond not-before rounds up", Waiting{0, 2, now.Add(1), time.Time{}}, Waiting{0, 2, now.Add(time.Millisecond), time.Time{}}},
		{"just below a millisecond rounds up", Waiting{0, 2, now.Add(time.Millisecond - 1), time.Time{}}, Waiting{0, 2, now.Add(time.Millisecond), time.Time{}}},
		{"before 1970 rounds up too", Waiting{0, 2, time.UnixMilli(-5).Add(-1), time.Time{}}, Waiting{0, 2, time.UnixMilli(-5), time.Time{}}},
		{"beyond 2^62 ms is clamped", Waiting{0, 2, time.Unix(1<<60, 0), time.Time{}}, Waiting{0, 2, time.UnixMilli(maxMetaMillis), time.Time{}}},
		{"just beyond 2^62 ms is clamped", Waiting{0, 2, time.UnixMilli(maxMetaMillis).Add(1), time.Time{}}, Waiting{0, 2, time.UnixMilli(maxMetaMillis), time.Time{}}},
		{"just before -2^62 ms is clamped", Waiting{0, 2, time.UnixMilli(-maxMetaMillis).Add(-1), time.Time{}}, Waiting{0, 2, time.UnixMilli(-maxMetaMillis), time.Time{}}},
		{"before -2^62 ms is clamped", Waiting{0, 2, time.Unix(-1<<60, 0), time.Time{}}, Waiting{0, 2, time.UnixMilli(-maxMetaMillis), time.Time{}}},
		{"attempt 0 is written as 1", Waiting{0, 0, now, time.Time{}}, Waiting{0, 1, now, time.Time{}}},
		{"negative attempt is written as 1", Waiting{0, -3, now, time.Time{}}, Waiting{0, 1, now, time.Time{}}},
		{"attempt beyond 2^31-1 is clamped", Waiting{0, int(min(int64(maxMetaAttempt)+5, int64(^uint(0)>>1))), now, time.Time{}}, Waiting{0, maxMetaAttempt, now, time.Time{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, leftW, _ := EncodeWaitingMeta(0, []Waiting{tt.in}, nil, 4000)
			d, err := DecodeMeta(meta)
			if err != nil || leftW != 0 || !sameWaiting(d.Waiting, []Waiting{tt.want}) {
				t.Fatalf("got %v (left %d, %v), want %v", d.Waiting, leftW, err, []Waiting{tt.want})
			}
		})
	}
}

// waitingAndFragments is n waiting entries from base, each followed by a
// finished offset and a gap, with not-before times a second apart.
func waitingAndFragments(base int64, n int) ([]Waiting, []Range) {
	var ws []Waiting
	var rs []Range
	for i := range int64(n) {
		off := base + 3*i
		ws = append(ws, Waiting{off, 2 + int(i%7), now.Add(time.Duration(i) * time.Second), time.Time{}})
		rs = append(rs, Range{off + 1, off + 2})
	}
	return ws, rs
}

// TestMeta2SizeLimit: within maxLen, waiting entries are kept before
// finished offsets, lowest offsets first, and what is left out is counted.
func TestMeta2SizeLimit(t *testing.T) {
	ws, rs := waitingAndFragments(500, 2000)
	many := slices.Clone(rs[:300]) // then more fragments than 4000 bytes hold, above all of ws
	for i := range int64(20000) {
		many = append(many, Range{10000 + 5*i, 10001 + 5*i + i%2})
	}
	tests := []struct {
		name            string
		waiting         []Waiting
		ranges          []Range
		maxLen          int
		wantAllWaiting  bool // every waiting entry kept
		wantAllFinished bool
	}{
		{"waiting entries fill it; no finished offsets", ws, rs, 4000, false, false},
		{"waiting entries fit, finished in part", ws[:300], many, 4000, true, false},
		{"everything fits", ws[:100], rs[:100], 4000, true, true},
		{"too small for the header", ws, rs, len(MetaPrefix2) + 2, false, false},
		{"room for a few", ws, rs, 40, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, leftW, leftF := EncodeWaitingMeta(500, tt.waiting, tt.ranges, tt.maxLen)
			if len(meta) > tt.maxLen {
				t.Fatalf("metadata length: got %d, want at most %d", len(meta), tt.maxLen)
			}
			var d Done
			if meta != "" {
				var err error
				if d, err = DecodeMeta(meta); err != nil {
					t.Fatal(err)
				}
			}
			kept := len(tt.waiting) - leftW
			if !sameWaiting(d.Waiting, tt.waiting[:kept]) {
				t.Fatalf("decoded %d waiting entries, want the first %d of those encoded", len(d.Waiting), kept)
			}
			if got := d.Count() + leftF; got != countRanges(tt.ranges) {
				t.Fatalf("finished kept %d + left %d = %d, want the total %d", d.Count(), leftF, got, countRanges(tt.ranges))
			}
			for _, kr := range d.Ranges {
				if !coveredBy(kr, tt.ranges) {
					t.Fatalf("decoded range %v is not within the encoded ranges", kr)
				}
			}
			if (leftW == 0) != tt.wantAllWaiting || (leftF == 0) != tt.wantAllFinished {
				t.Fatalf("left %d waiting, %d finished, want all waiting kept %v, all finished kept %v",
					leftW, leftF, tt.wantAllWaiting, tt.wantAllFinished)
			}
			// The finished offsets never cost a waiting entry its place.
			_, aloneW, _ := EncodeWaitingMeta(500, tt.waiting, nil, tt.maxLen)
			if leftW != aloneW {
				t.Fatalf("waiting entries left out: got %d with the finished ranges, want %d as without them", leftW, aloneW)
			}
		})
	}
	// Filled to the limit, not far short of it (an entry here takes at
	// most 6 bytes of payload, 8 characters).
	if meta, _, _ := EncodeWaitingMeta(500, ws, rs, 4000); len(meta) < 4000-8-3 {
		t.Fatalf("full metadata: got %d bytes, want at least %d", len(meta), 4000-11)
	}
}

// TestMeta2EveryLimit: for every limit up to a few hundred bytes, the
// metadata fits it, the counts add up, and more room never keeps less.
func TestMeta2EveryLimit(t *testing.T) {
	ws, rs := waitingAndFragments(1<<40, 40)
	rs = append(rs, Range{1<<40 + 1000, 1<<40 + 5000})
	prevW, prevF := len(ws)+1, countRanges(rs)+1
	for maxLen := 0; maxLen <= 600; maxLen++ {
		meta, leftW, leftF := EncodeWaitingMeta(1<<40, ws, rs, maxLen)
		if len(meta) > maxLen {
			t.Fatalf("maxLen %d: got %d bytes", maxLen, len(meta))
		}
		var d Done
		if meta != "" {
			var err error
			if d, err = DecodeMeta(meta); err != nil {
				t.Fatalf("maxLen %d: %v", maxLen, err)
			}
		}
		if len(d.Waiting) != len(ws)-leftW || d.Count() != countRanges(rs)-leftF {
			t.Fatalf("maxLen %d: decoded %d waiting, %d finished, want %d, %d", maxLen, len(d.Waiting), d.Count(), len(ws)-leftW, countRanges(rs)-leftF)
		}
		if leftW > prevW || (leftW == prevW && leftF > prevF) {
			t.Fatalf("maxLen %d: left %d waiting, %d finished, want no more than at maxLen %d (%d, %d)", maxLen, leftW, leftF, maxLen-1, prevW, prevF)
		}
		prevW, prevF = leftW, leftF
	}
	if prevW != 0 || prevF != 0 {
		t.Fatalf("at 600 bytes: left %d waiting, %d finished, want 0, 0", prevW, prevF)
	}
}

// TestLandedDecoderIgnoresV2: a member still running the landed decoder
// takes version 2 metadata for someone else's (ErrNotOrderlyMetadata,
// which group ignores silently), not for corrupt orderly metadata
// (ErrBadMetadata, which it logs and counts).
func TestLandedDecoderIgnoresV2(t *testing.T) {
	ws, rs := waitingAndFragments(0, 1000)
	full, _, _ := EncodeWaitingMeta(0, ws, rs, 4000)
	tests := []struct {
		name string
		meta string
	}{
		{"only waiting", must2(EncodeWaitingMeta(5, []Waiting{{5, 2, now, time.Time{}}}, nil, 4000))},
		{"only finished", must2(EncodeWaitingMeta(5, nil, []Range{{6, 9}}, 4000))},
		{"both, bitset", must2(EncodeWaitingMeta(1000, ws[:50], rs[:50], 4000))},
		{"filled to the limit", full},
		{"corrupt version 2", MetaPrefix2 + "!!!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeMetaV1Landed(tt.meta); !errors.Is(err, ErrNotOrderlyMetadata) || errors.Is(err, ErrBadMetadata) {
				t.Fatalf("landed decoder on %.40q...: got %v, want ErrNotOrderlyMetadata", tt.meta, err)
			}
		})
	}
	// Why version 2 has a prefix of its own: a version byte of 2 after the
	// old prefix would be corrupt to the landed decoder.
	if _, err := decodeMetaV1Landed(MetaPrefix + enc([]byte{2, 1, 0, 0})); !errors.Is(err, ErrBadMetadata) {
		t.Fatalf("landed decoder on version byte 2: got %v, want ErrBadMetadata", err)
	}
}

// must2 is the metadata EncodeWaitingMeta returns, for tables.
func must2(meta string, _ int, _ int64) string { return meta }

// TestMeta2ReadsV1: metadata of either version decodes; version 1 has no
// waiting entries.
func TestMeta2ReadsV1(t *testing.T) {
	rs := []Range{{12, 14}, {20, 21}}
	m1, _ := EncodeMeta(10, rs, 4000)
	m2, _, _ := EncodeWaitingMeta(10, []Waiting{{10, 3, now, time.Time{}}}, rs, 4000)
	for _, meta := range []string{m1, m2} {
		d, err := DecodeMeta(meta)
		if err != nil || d.Base != 10 || !slices.Equal(d.Ranges, rs) {
			t.Fatalf("DecodeMeta(%q): got %+v, %v, want base 10 ranges %v", meta, d, err, rs)
		}
		if wantW := strings.HasPrefix(meta, MetaPrefix2); (len(d.Waiting) == 1) != wantW {
			t.Fatalf("DecodeMeta(%q): got waiting %v, want one entry: %v", meta, d.Waiting, wantW)
		}
	}
}

func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }
func sv(v int64) []byte  { return binary.AppendVarint(nil, v) }
func cat(parts ...[]byte) []byte {
	return slices.Concat(parts...)
}
func enc2(parts ...[]byte) string { return MetaPrefix2 + enc(cat(parts...)) }

func TestDecodeMeta2Errors(t *testing.T) {
	const top = uint64(1) << 62
	z := uv(0)
	entry := cat(uv(0), uv(2), uv(1)) // at base, attempt 2, not-before timeBase
	many := make([][]byte, 0, maxMetaWaiting+1)
	for range maxMetaWaiting + 1 {
		many = append(many, cat(z, uv(2), z))
	}
	tests := []struct {
		name string
		meta string
	}{
		{"bad base64", MetaPrefix2 + "!!!"},
		{"empty", MetaPrefix2},
		{"base beyond 2^62", enc2(uv(top+1), z, z, z)},
		{"time base beyond 2^62 ms", enc2(z, sv(1<<62+1), z, z)},
		{"time base before -2^62 ms", enc2(z, sv(-1<<62-1), z, z)},
		{"truncated varint", MetaPrefix2 + enc([]byte{0x80})},
		{"count beyond data", enc2(z, z, uv(5), entry, z)},
		{"count beyond the bound", enc2(z, z, uv(maxMetaWaiting+1), cat(many...), z)},
		{"truncated entry", enc2(z, z, uv(1), uv(0), uv(2))},
		{"attempt 0", enc2(z, z, uv(1), cat(z, z, z), z)},
		{"attempt beyond 2^31-1", enc2(z, z, uv(1), cat(z, uv(1<<31), z), z)},
		{"offset reaching 2^62", enc2(uv(top-1), z, uv(1), cat(uv(1), uv(2), z), z)},
		{"gap that would wrap (unsorted)", enc2(uv(100), z, uv(2), entry, cat(uv(1<<64-2), uv(2), z), z)},
		{"not-before beyond 2^62 ms", enc2(z, sv(1<<62), uv(1), cat(z, uv(2), uv(2)), z)},
		{"not-before beyond 2^62 ms from a negative base", enc2(z, sv(-1<<62), uv(1), cat(z, uv(2), uv(1<<63+2)), z)},
		{"no finished encoding", enc2(z, z, uv(1), entry)},
		{"unknown finished encoding", enc2(z, z, uv(1), entry, uv(7))},
		{"trailing bytes after none", enc2(z, z, uv(1), entry, z, z)},
		{"trailing bytes after runs", enc2(z, z, uv(1), entry, uv(encodingRuns), uv(1), uv(1), uv(1), z)},
		{"zero-length range", enc2(z, z, z, uv(encodingRuns), uv(1), uv(1), z)},
		{"range count beyond data", enc2(z, z, z, uv(encodingRuns), uv(9), uv(1), uv(1))},
		{"bitset length mismatch", enc2(z, z, z, uv(encodingBitset), uv(16), []byte{0xff})},
		{"waiting offset finished (runs)", enc2(uv(10), z, uv(1), cat(uv(2), uv(2), z), uv(encodingRuns), uv(1), uv(1), uv(3))},
		{"waiting offset finished (bitset)", enc2(uv(10), z, uv(1), cat(uv(3), uv(2), z), uv(encodingBitset), uv(8), []byte{0x08})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeMeta(tt.meta); !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("DecodeMeta(%.60q): got %v, want ErrBadMetadata", tt.meta, err)
			}
		})
	}
	// The edges of those bounds are fine.
	for _, meta := range []string{
		enc2(uv(top-1), z, uv(1), cat(z, uv(maxMetaAttempt), z), z),
		enc2(z, sv(-1<<62), uv(1), cat(z, uv(2), uv(1<<63+1)), z),
		enc2(uv(10), z, uv(1), cat(uv(2), uv(2), z), uv(encodingRuns), uv(2), uv(1), uv(1), uv(1), uv(3)), // finished 11 and 13-15 around 12
	} {
		if _, err := DecodeMeta(meta); err != nil {
			t.Fatalf("DecodeMeta(%q): got %v, want nil", meta, err)
		}
	}
}

// TestEncodeWaitingMetaBadInputs: inputs that break EncodeWaitingMeta's assumptions
// never make it panic, and what it writes is either rejected as corrupt
// or lists only what it was given.
func TestEncodeWaitingMetaBadInputs(t *testing.T) {
	tests := []struct {
		name    string
		base    int64
		waiting []Waiting
		ranges  []Range
	}{
		{"waiting unsorted", 10, []Waiting{{12, 2, now, time.Time{}}, {11, 2, now, time.Time{}}}, nil},
		{"waiting repeated", 10, []Waiting{{12, 2, now, time.Time{}}, {12, 3, now, time.Time{}}}, nil},
		{"waiting below base", 10, []Waiting{{5, 2, now, time.Time{}}}, nil},
		{"waiting at 2^62", 10, []Waiting{{1 << 62, 2, now, time.Time{}}}, nil},
		{"waiting within a range", 10, []Waiting{{12, 2, now, time.Time{}}}, []Range{{11, 14}}},
		{"waiting within a bitset", 0, []Waiting{{4, 2, now, time.Time{}}}, []Range{{1, 2}, {3, 5}, {7, 8}, {9, 10}, {11, 12}}},
		{"ranges unsorted", 10, nil, []Range{{20, 21}, {12, 13}}},
		{"ranges below base", 10, nil, []Range{{2, 4}, {12, 13}}},
		{"range ending at its start", 10, nil, []Range{{12, 12}}},
		{"range reversed", 10, nil, []Range{{14, 12}}},
		{"range not above base", 10, nil, []Range{{2, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, _, _ := EncodeWaitingMeta(tt.base, tt.waiting, tt.ranges, 4000)
			d, err := DecodeMeta(meta)
			if err != nil {
				if meta != "" && !errors.Is(err, ErrBadMetadata) {
					t.Fatalf("DecodeMeta(%q): got %v, want nil or ErrBadMetadata", meta, err)
				}
				return
			}
			for _, w := range d.Waiting {
				if !slices.ContainsFunc(tt.waiting, func(x Waiting) bool { return x.Offset == w.Offset && x.Attempt == w.Attempt }) {
					t.Fatalf("decoded waiting entry %v, want one of %v", w, tt.waiting)
				}
			}
			for _, r := range d.Ranges {
				for off := r.Start; off < r.End; off++ {
					if !coveredBy(Range{off, off + 1}, tt.ranges) {
						t.Fatalf("decoded finished offset %d, want only offsets of %v", off, tt.ranges)
					}
				}
			}
		})
	}
}

func TestDoneWaitingAt(t *testing.T) {
	d := Done{Base: 10, Ranges: []Range{{11, 12}}, Waiting: []Waiting{{10, 2, now, time.Time{}}, {12, 3, time.Time{}, time.Time{}}, {20, 4, now, time.Time{}}}}
	want := map[int64]int{10: 2, 12: 3, 20: 4} // offset: attempt
	for off := int64(9); off < 30; off++ {
		w, ok := d.WaitingAt(off)
		if a, listed := want[off]; ok != listed || w.Attempt != a || (ok && w.Offset != off) {
			t.Fatalf("WaitingAt(%d): got %v %v, want attempt %d %v", off, w, ok, a, listed)
		}
		// Contains keeps its own place in the same pass.
		if got := d.Contains(off); got != (off == 11) {
			t.Fatalf("Contains(%d): got %v, want %v", off, got, off == 11)
		}
	}
}

func TestDoneWaitingAfter(t *testing.T) {
	d := Done{Base: 0, Waiting: []Waiting{{2, 2, now, time.Time{}}, {6, 3, now, time.Time{}}, {12, 4, now, time.Time{}}}}
	tests := []struct {
		name  string
		dst   []Waiting
		after int64
		want  []Waiting
	}{
		{"before all", nil, 0, d.Waiting},
		{"at an entry", nil, 6, []Waiting{{12, 4, now, time.Time{}}}},
		{"between entries", []Waiting{{1, 5, now, time.Time{}}}, 3, []Waiting{{1, 5, now, time.Time{}}, {6, 3, now, time.Time{}}, {12, 4, now, time.Time{}}}},
		{"dst's own entry wins", []Waiting{{6, 9, now, time.Time{}}}, 4, []Waiting{{6, 9, now, time.Time{}}, {12, 4, now, time.Time{}}}},
		{"after all", []Waiting{{1, 2, now, time.Time{}}}, 20, []Waiting{{1, 2, now, time.Time{}}}},
		{"after the largest offset", nil, 1<<63 - 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := d.WaitingAfter(slices.Clone(tt.dst), tt.after); !sameWaiting(got, tt.want) {
				t.Fatalf("WaitingAfter(%v, %d): got %v, want %v", tt.dst, tt.after, got, tt.want)
			}
		})
	}
}

// benchMeta2 is 1000 waiting entries and 1000 finished ranges between them.
func benchMeta2() (int64, []Waiting, []Range) {
	ws, rs := waitingAndFragments(1<<40, 1000)
	return 1 << 40, ws, rs
}

func BenchmarkEncodeWaitingMeta(b *testing.B) {
	base, ws, rs := benchMeta2()
	for _, maxLen := range []int{4000, 1 << 20} {
		b.Run(fmt.Sprintf("maxLen=%d", maxLen), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				EncodeWaitingMeta(base, ws, rs, maxLen)
			}
		})
	}
}

func BenchmarkDecodeMeta2(b *testing.B) {
	base, ws, rs := benchMeta2()
	meta, leftW, leftF := EncodeWaitingMeta(base, ws, rs, 1<<20)
	if leftW != 0 || leftF != 0 {
		b.Fatalf("left %d waiting, %d finished, want 0, 0", leftW, leftF)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(meta)))
	for b.Loop() {
		if _, err := DecodeMeta(meta); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDropFrom: what lies at or above the end is dropped, a range across
// it is cut, and what lies below stays.
func TestDropFrom(t *testing.T) {
	tests := []struct {
		name         string
		end          int64
		ranges       []Range
		waiting      []int64
		wantRanges   []Range
		wantWaiting  []int64
		wantFinished int64
		wantDropped  int
	}{
		{"all below", 100, []Range{{10, 20}, {30, 40}}, []int64{25}, []Range{{10, 20}, {30, 40}}, []int64{25}, 0, 0},
		{"one across", 35, []Range{{10, 20}, {30, 40}}, []int64{25, 50}, []Range{{10, 20}, {30, 35}}, []int64{25}, 5, 1},
		{"past the end", 11, []Range{{11, 1 << 40}}, []int64{11}, []Range{}, []int64{}, 1<<40 - 11, 1},
		{"ends at the end", 20, []Range{{10, 20}}, nil, []Range{{10, 20}}, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Done{Ranges: tt.ranges}
			for _, o := range tt.waiting {
				d.Waiting = append(d.Waiting, Waiting{Offset: o, Attempt: 2})
			}
			finished, dropped := d.DropFrom(tt.end)
			var got []int64
			for _, w := range d.Waiting {
				got = append(got, w.Offset)
			}
			if finished != tt.wantFinished || dropped != tt.wantDropped || len(d.Ranges) != len(tt.wantRanges) || len(got) != len(tt.wantWaiting) {
				t.Fatalf("DropFrom(%d): got ranges %v waiting %v (dropped %d finished, %d waiting), want %v %v (%d, %d)",
					tt.end, d.Ranges, got, finished, dropped, tt.wantRanges, tt.wantWaiting, tt.wantFinished, tt.wantDropped)
			}
			for i := range d.Ranges {
				if d.Ranges[i] != tt.wantRanges[i] {
					t.Fatalf("DropFrom(%d): got ranges %v, want %v", tt.end, d.Ranges, tt.wantRanges)
				}
			}
		})
	}
}

// roundTripWaiting encodes waiting and ranges within 4000 bytes, wants
// all of them kept under prefix, and decodes the same back.
func roundTripWaiting(t *testing.T, prefix string, base int64, waiting []Waiting, ranges []Range) {
	t.Helper()
	meta, leftW, leftF := EncodeWaitingMeta(base, waiting, ranges, 4000)
	if leftW != 0 || leftF != 0 {
		t.Fatalf("left out %d waiting, %d finished, want 0, 0", leftW, leftF)
	}
	if len(meta) > 4000 || !strings.HasPrefix(meta, prefix) {
		t.Fatalf("metadata: got %d bytes %q..., want at most 4000 with the prefix %q", len(meta), meta[:min(20, len(meta))], prefix)
	}
	d, err := DecodeMeta(meta)
	if err != nil {
		t.Fatalf("DecodeMeta: %v", err)
	}
	if d.Base != base || !slices.Equal(d.Ranges, ranges) || !sameWaiting(d.Waiting, waiting) {
		t.Fatalf("decoded base %d ranges %v waiting %v, want %d %v %v", d.Base, d.Ranges, d.Waiting, base, ranges, waiting)
	}
}
