package group

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func sameParked(a, b *Message) bool {
	return a.Topic == b.Topic && a.Partition == b.Partition && a.Offset == b.Offset &&
		a.Timestamp.Equal(b.Timestamp) && a.Attempt == b.Attempt &&
		bytes.Equal(a.Key, b.Key) && (a.Key == nil) == (b.Key == nil) &&
		bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil) &&
		slices.EqualFunc(a.Headers, b.Headers, func(x, y Header) bool {
			return bytes.Equal(x.Key, y.Key) && bytes.Equal(x.Value, y.Value)
		})
}

// parkedSeeds are messages as parking writes them: the attempt in the
// message is the one encodeParked is given.
var parkedSeeds = []struct {
	m     Message
	first time.Time
}{
	{Message{Topic: "t", Partition: 0, Offset: 0, Attempt: 1}, time.Time{}},
	{Message{Topic: "orders", Partition: 3, Offset: 1 << 40, Key: []byte("k"), Value: []byte("v"),
		Timestamp: time.Unix(1700000000, 5), Attempt: 7}, time.Unix(1700000001, 0)},
	{Message{Topic: "h", Partition: 1, Offset: 9, Key: []byte{}, Value: nil, Attempt: 2,
		Headers: []Header{{Key: []byte("a"), Value: nil}, {Key: []byte("b"), Value: []byte("c")}}}, time.Unix(0, 1)},
}

// TestParkedCodecRoundTrip: what decodeParked gives back is the message
// encodeParked wrote, with its Attempt set to the attempt it carried.
func TestParkedCodecRoundTrip(t *testing.T) {
	for i, s := range parkedSeeds {
		body := encodeParked(nil, &s.m, s.m.Attempt, s.first)
		got := Message{Attempt: 99} // what a recycled item's message might hold
		attempt, first, err := decodeParked(body, &got)
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		if attempt != s.m.Attempt || !first.Equal(s.first) {
			t.Errorf("seed %d: got attempt %d first %v, want %d %v", i, attempt, first, s.m.Attempt, s.first)
		}
		if !sameParked(&got, &s.m) {
			t.Errorf("seed %d: got %+v, want %+v", i, got, s.m)
		}
	}
}

// FuzzDecodeParked: any body decodes to an error or to a message that
// encodes and decodes to itself; never a panic.
func FuzzDecodeParked(f *testing.F) {
	for _, s := range parkedSeeds {
		body := encodeParked(nil, &s.m, s.m.Attempt, s.first)
		f.Add(body)
		f.Add(body[:len(body)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{parkedVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, body []byte) {
		var m Message
		attempt, first, err := decodeParked(body, &m)
		if err != nil {
			return
		}
		if attempt < 1 || m.Attempt != attempt {
			t.Fatalf("decoded attempt %d, message's %d: want equal and at least 1", attempt, m.Attempt)
		}
		var again Message
		attempt2, first2, err := decodeParked(encodeParked(nil, &m, attempt, first), &again)
		if err != nil {
			t.Fatalf("re-encoded body does not decode: %v", err)
		}
		if attempt2 != attempt || !first2.Equal(first) || !sameParked(&again, &m) {
			t.Fatalf("round trip: got %+v (attempt %d, first %v), want %+v (attempt %d, first %v)", again, attempt2, first2, m, attempt, first)
		}
	})
}
