package main

import (
	"strings"
	"testing"
	"time"

	"github.com/orderly-go/orderly/group"
)

func TestWorstPartition(t *testing.T) {
	ps := func(p int32, c group.Status) group.PartitionStats {
		return group.PartitionStats{Topic: "orders", Partition: p, Status: group.PartitionStatus{Code: c}}
	}
	tests := []struct {
		name  string
		stats group.Stats
		want  string
	}{
		{"no partition", group.Stats{}, ""},
		{"all OK", group.Stats{Status: group.PartitionStatus{Code: group.StatusOK},
			PartitionStats: []group.PartitionStats{ps(0, group.StatusOK), ps(1, group.StatusOK)}}, ""},
		{"one STALL", group.Stats{Status: group.PartitionStatus{Code: group.StatusStall, Reason: "orders/3: ..."},
			PartitionStats: []group.PartitionStats{ps(0, group.StatusOK), ps(3, group.StatusStall)}}, "STALL orders/3"},
		{"STOP over WARN, not evaluated counts as OK", group.Stats{Status: group.PartitionStatus{Code: group.StatusStop},
			PartitionStats: []group.PartitionStats{ps(0, group.StatusWarn), ps(1, 0), ps(2, group.StatusStop), ps(5, group.StatusStop)}}, "STOP orders/2 +2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := worstPartition(tt.stats); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestConsumeProgressLine: the progress line says how many records wait
// for a retry or a deferral, and how many calls timed out: with only
// hangs, or a pause a restart found in the commit metadata, the line read
// "failed calls 0" and nothing explained an idle consumer.
func TestConsumeProgressLine(t *testing.T) {
	c := &consumeProgress{start: time.Unix(0, 0), ctr: &sinkCounters{}, gate: &gate{}}
	line := c.line(time.Unix(5, 0), group.Stats{Partitions: 2, Lag: 7, InFlight: 15, Retrying: 3, Deferred: 12, Parked: 4, TimedOut: 2}, 0)
	for _, want := range []string{"lag 7  in flight 15  waiting 15  retries 0", "  parked 4", "failed calls 0  timed out 2  endpoint errors 0"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line %q: want %q in it", line, want)
		}
	}
	// No partition claimed: lag and in flight would read 0 whatever the
	// topics hold (a line drawn after Run returned, a standby member).
	line = c.line(time.Unix(5, 0), group.Stats{Handled: 3, Committed: 3}, 0)
	if !strings.Contains(line, "committed 3  no partition claimed  waiting 0") || strings.Contains(line, "lag") || strings.Contains(line, "in flight") {
		t.Errorf("progress line with no partition claimed %q: want \"no partition claimed\" in place of lag and in flight", line)
	}
}
