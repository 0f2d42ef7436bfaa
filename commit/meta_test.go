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

func FuzzDecodeMeta(f *testing.F) {
	m1, _ := EncodeMeta(3, []Range{{4, 9}, {12, 13}}, 4000)
	var frag []Range
	for i := int64(0); i < 40; i++ {
		frag = append(frag, Range{2 * i, 2*i + 1})
	}
	m2, _ := EncodeMeta(0, frag, 4000)
	for _, seed := range []string{"", "x", MetaPrefix, m1, m2, MetaPrefix + enc([]byte{1, 1, 0, 1, 1, 1})} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, meta string) {
		d, err := DecodeMeta(meta)
		if strings.HasPrefix(meta, MetaPrefix) {
			// Version 1 decodes exactly as the landed decoder decodes it.
			landed, lerr := decodeMetaV1Landed(meta)
			if errKind(err) != errKind(lerr) || landed.Base != d.Base || !slices.Equal(landed.Ranges, d.Ranges) {
				t.Fatalf("DecodeMeta(%q): got %+v, %v, want the landed decoder's %+v, %v", meta, d, err, landed, lerr)
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
			if r.Start < prev || r.End <= r.Start {
				t.Fatalf("decoded ranges not sorted and disjoint above base %d: %v", d.Base, d.Ranges)
			}
			prev = r.End
		}
		if len(d.Ranges) == 0 {
			return // nothing to say re-encodes to ""
		}
		// What decodes must re-encode to the same set.
		again, left := EncodeMeta(d.Base, d.Ranges, 1<<22)
		if left != 0 {
			return // too large to re-encode in full; fine
		}
		d2, err := DecodeMeta(again)
		if err != nil || d2.Base != d.Base || !slices.Equal(d2.Ranges, d.Ranges) {
			t.Fatalf("re-encode: got %v %v %v, want %v %v", d2.Base, d2.Ranges, err, d.Base, d.Ranges)
		}
	})
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
			if err != nil || got.Base != tt.want.Base || !slices.Equal(got.Ranges, tt.want.Ranges) {
				t.Fatalf("DecodeMeta(%q): got %+v, %v, want %+v, nil", tt.meta, got, err, tt.want)
			}
			landed, err := decodeMetaV1Landed(tt.meta)
			if err != nil || landed.Base != got.Base || !slices.Equal(landed.Ranges, got.Ranges) {
				t.Fatalf("landed decoder on %q: got %+v, %v, want %+v, nil", tt.meta, landed, err, got)
			}
		})
	}
}
