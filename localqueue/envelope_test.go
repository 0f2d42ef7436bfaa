package localqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func sampleMessage(body string, attempts int) *Message {
	return &Message{
		ID:        ID{0: 1, 8: 2, 15: 3},
		Body:      []byte(body),
		Timestamp: time.Unix(1_700_000_000, 123),
		Attempts:  attempts,
		Due:       time.Unix(1_700_000_060, 456),
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    *Message
	}{
		{"empty body", sampleMessage("", 0)},
		{"small", sampleMessage("hello", 1)},
		{"large", sampleMessage(strings.Repeat("x", 1<<16), 7)},
		{"max attempts", sampleMessage("a", math.MaxUint32)},
		{"pre-1970 due", &Message{ID: ID{9}, Body: []byte("b"), Timestamp: time.Unix(-5, 0), Due: time.Unix(-1, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := appendEnvelope([]byte("prefix"), tt.m)[len("prefix"):]
			if len(b) != envelopeSize(len(tt.m.Body)) {
				t.Fatalf("size: got %d, want %d", len(b), envelopeSize(len(tt.m.Body)))
			}
			var got Message
			if err := decodeEnvelope(b, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.ID != tt.m.ID || !bytes.Equal(got.Body, tt.m.Body) || got.Attempts != tt.m.Attempts ||
				!got.Timestamp.Equal(tt.m.Timestamp) || !got.Due.Equal(tt.m.Due) {
				t.Fatalf("round trip: got %+v, want %+v", got, *tt.m)
			}
		})
	}
}

func TestEnvelopeAttemptsSaturate(t *testing.T) {
	var got Message
	if err := decodeEnvelope(appendEnvelope(nil, sampleMessage("a", math.MaxUint32+5)), &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got.Attempts != math.MaxUint32 {
		t.Fatalf("Attempts above uint32: got %d, want %d", got.Attempts, uint32(math.MaxUint32))
	}
}

func TestDecodeEnvelopeErrors(t *testing.T) {
	good := appendEnvelope(nil, sampleMessage("payload", 2))
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"nil", nil, "shorter"},
		{"header only", good[:envelopeHeader], "shorter"},
		{"version", mutate(func(b []byte) []byte { b[0] = 2; return b }), "version"},
		{"body length too long", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[37:], 8); return b }), "body length"},
		{"body length too short", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[37:], 6); return b }), "body length"},
		{"huge body length", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[37:], math.MaxUint32); return b }), "body length"},
		{"truncated", good[:len(good)-1], "body length"},
		{"trailing byte", append(bytes.Clone(good), 0), "body length"},
		{"flipped body bit", mutate(func(b []byte) []byte { b[envelopeHeader] ^= 1; return b }), "checksum"},
		{"flipped attempts bit", mutate(func(b []byte) []byte { b[28] ^= 1; return b }), "checksum"},
		{"flipped checksum bit", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Message
			err := decodeEnvelope(tt.b, &m)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want ErrCorrupt mentioning %q", err, tt.msg)
			}
		})
	}
}

// FuzzDecodeEnvelope: the decoder never panics, and whatever it accepts
// re-encodes to exactly the same bytes (so a corrupt record is never
// mistaken for a different valid one).
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(appendEnvelope(nil, sampleMessage("", 0)))
	f.Add(appendEnvelope(nil, sampleMessage("hello, world", 3)))
	f.Add(appendEnvelope(nil, sampleMessage(strings.Repeat("z", 300), math.MaxUint32)))
	f.Add([]byte{})
	f.Add([]byte{envelopeVersion})
	f.Add(bytes.Repeat([]byte{0xff}, envelopeOverhead))
	f.Add(make([]byte, envelopeOverhead))
	trunc := appendEnvelope(nil, sampleMessage("truncated", 1))
	f.Add(trunc[:len(trunc)-3])
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := decodeEnvelope(b, &m); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if again := appendEnvelope(nil, &m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding a decoded envelope: got %x, want %x", again, b)
		}
	})
}

// TestFiller: a filler is told from the record it copies, from a marker
// and from a record damaged some other way, and is still told when torn
// the way go-diskqueue tears it (a head of the failed write, up to the
// checksum, in place of its own).
func TestFiller(t *testing.T) {
	env := appendEnvelope(nil, sampleMessage("a failed write", 2))
	marker := appendMarker(nil, 42)
	for _, tt := range []struct {
		name string
		rec  []byte
	}{{"envelope", env}, {"marker", marker}} {
		f := appendFiller(nil, tt.rec)
		if len(f) != len(tt.rec) {
			t.Fatalf("%s: filler of %d bytes, want %d", tt.name, len(f), len(tt.rec))
		}
		if !isFiller(f) || isFiller(tt.rec) {
			t.Fatalf("%s: isFiller(filler) %v, isFiller(record) %v; want true, false", tt.name, isFiller(f), isFiller(tt.rec))
		}
		var m Message
		if err := decodeEnvelope(f, &m); err == nil {
			t.Fatalf("%s: a filler decodes as an envelope", tt.name)
		}
		if _, ok := decodeMarker(f); ok {
			t.Fatalf("%s: a filler decodes as a marker", tt.name)
		}
		// Torn: the failed write's head (the record's own bytes) then the
		// filler's rest, wherever the head stops.
		for k := 1; k < len(f); k++ {
			torn := append(append([]byte(nil), tt.rec[:k]...), f[k:]...)
			if !isFiller(torn) {
				t.Fatalf("%s torn after %d of %d bytes: not a filler", tt.name, k, len(f))
			}
		}
		damaged := append([]byte(nil), f...)
		damaged[len(damaged)/2] ^= 1
		if isFiller(damaged) {
			t.Fatalf("%s: a filler with a flipped bit is still a filler", tt.name)
		}
	}
	if isFiller(nil) || isFiller([]byte{1, 2, 3}) {
		t.Fatal("records shorter than a checksum are fillers")
	}
}
