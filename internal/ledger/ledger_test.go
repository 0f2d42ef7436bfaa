package ledger

import (
	"errors"
	"testing"
	"time"
)

func TestEncodeDecode(t *testing.T) {
	at := time.Unix(1700000000, 123)
	v := Encode(nil, 7, 42, at, []byte("payload"))
	key, seq, got, payload, err := Decode(v)
	if err != nil || key != 7 || seq != 42 || !got.Equal(at) || string(payload) != "payload" {
		t.Fatalf("Decode: got %d %d %v %q %v, want 7 42 %v payload nil", key, seq, got, payload, err, at)
	}
	for _, bad := range [][]byte{nil, []byte("short"), make([]byte, HeaderSize)} {
		if _, _, _, _, err := Decode(bad); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("Decode(%q): got %v, want ErrBadRecord", bad, err)
		}
	}
}

func TestVerdicts(t *testing.T) {
	type rec struct{ key, seq uint32 }
	tests := []struct {
		name                    string
		records                 []rec
		lost, dups, order, unkn int
	}{
		{"all in order", []rec{{0, 0}, {1, 0}, {0, 1}, {0, 2}, {1, 1}}, 0, 0, 0, 0},
		{"one lost", []rec{{0, 0}, {1, 0}, {0, 1}, {0, 2}}, 1, 0, 0, 0},
		{"redelivered", []rec{{0, 0}, {0, 1}, {0, 1}, {0, 2}, {1, 0}, {1, 1}}, 0, 1, 0, 0},
		{"swapped within key", []rec{{0, 1}, {0, 0}, {0, 2}, {1, 0}, {1, 1}}, 0, 0, 1, 0},
		{"one skipped (dead-lettered), the rest in order", []rec{{0, 0}, {0, 2}, {1, 0}, {1, 1}}, 1, 0, 0, 0},
		{"skipped, then late", []rec{{0, 0}, {0, 2}, {0, 1}, {1, 0}, {1, 1}}, 0, 0, 1, 0},
		{"unknown key", []rec{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {9, 0}}, 0, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New([]uint32{3, 2})
			for _, r := range tt.records {
				l.Record(r.key, r.seq, time.Time{})
			}
			r := l.Report()
			if r.Lost != tt.lost || r.Duplicates != tt.dups || r.OrderViolations != tt.order || r.Unknown != tt.unkn {
				t.Fatalf("got lost=%d dups=%d order=%d unknown=%d, want %d %d %d %d",
					r.Lost, r.Duplicates, r.OrderViolations, r.Unknown, tt.lost, tt.dups, tt.order, tt.unkn)
			}
		})
	}
}
