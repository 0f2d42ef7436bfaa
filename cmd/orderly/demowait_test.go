package main

import (
	"testing"

	"github.com/orderly-go/orderly/group"
)

func TestAllCommitted(t *testing.T) {
	start := map[int32]int64{0: 100, 1: 0}
	parts := func(c0, c1 int64) []group.PartitionStats {
		return []group.PartitionStats{{Partition: 0, Committed: c0}, {Partition: 1, Committed: c1}}
	}
	tests := []struct {
		name  string
		stats group.Stats
		want  bool
	}{
		{"Stats.Committed reached", group.Stats{Committed: 50}, true},
		{"offsets not read back yet", group.Stats{Committed: 49, PartitionStats: parts(-1, 20)}, false},
		{"offsets short", group.Stats{Committed: 49, PartitionStats: parts(129, 20)}, false},
		{"offsets there, Stats.Committed one short", group.Stats{Committed: 49, PartitionStats: parts(130, 20)}, true},
		{"a partition not claimed", group.Stats{Committed: 49, PartitionStats: parts(150, 20)[:1]}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := allCommitted(tt.stats, 50, start); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
