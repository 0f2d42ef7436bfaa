package main

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTxOrder: records pass in offset order as a read-committed consumer
// sees them. Each step, at the next offset, is a record ("plain", or "tx"
// of a producer's transaction) or a producer's marker ("commit", "abort").
func TestTxOrder(t *testing.T) {
	type step struct {
		kind     string // "plain", "tx", "commit", "abort"
		producer int64
	}
	for _, tt := range []struct {
		name      string
		steps     []step
		want      []int64 // offsets passed on
		heldFirst int64   // -1: nothing held back
		heldCount int     // committed records held back
	}{
		{"plain only", []step{{"plain", -1}, {"plain", -1}}, []int64{0, 1}, -1, 0},
		{"committed", []step{{"tx", 1}, {"tx", 1}, {"commit", 1}, {"plain", -1}}, []int64{0, 1, 3}, -1, 0},
		{"aborted", []step{{"tx", 1}, {"abort", 1}, {"plain", -1}}, []int64{2}, -1, 0},
		{"open holds back what follows", []step{{"plain", -1}, {"tx", 1}, {"plain", -1}}, []int64{0}, 1, 1},
		{"interleaved, first aborts, second open", []step{{"tx", 1}, {"tx", 2}, {"abort", 1}}, nil, 1, 0},
		{"interleaved, second commits first", []step{{"tx", 1}, {"tx", 2}, {"commit", 2}, {"plain", -1}, {"commit", 1}}, []int64{0, 1, 3}, -1, 0},
		{"interleaved, second aborts, first commits", []step{{"tx", 1}, {"tx", 2}, {"plain", -1}, {"abort", 2}, {"commit", 1}}, []int64{0, 2}, -1, 0},
		{"marker of a transaction begun before the read", []step{{"commit", 7}, {"plain", -1}}, []int64{1}, -1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			tx := &txOrder{pass: func(e *entry) error { got = append(got, e.offset); return nil }}
			for off, s := range tt.steps {
				var err error
				switch s.kind {
				case "plain", "tx":
					e := entry{offset: int64(off)}
					err = tx.record(e, s.kind == "tx", s.producer)
				case "commit", "abort":
					typ := map[string]kmsg.ControlRecordKeyType{"abort": kmsg.ControlRecordKeyTypeAbort, "commit": kmsg.ControlRecordKeyTypeCommit}[s.kind]
					key := (&kmsg.ControlRecordKey{Type: typ}).AppendTo(nil)
					err = tx.marker(key, s.producer)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("passed offsets %v, want %v", got, tt.want)
			}
			first, committed, ok := tx.heldBack()
			if !ok {
				first = -1
			}
			if first != tt.heldFirst || committed != tt.heldCount {
				t.Errorf("held back from %d with %d committed, want from %d with %d", first, committed, tt.heldFirst, tt.heldCount)
			}
		})
	}
}
