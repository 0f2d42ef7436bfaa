package dispatch

import (
	"fmt"
	"testing"
)

// TestPartitionsShareTheWorkers: items are served in arrival order within
// each partition, and a partition with less than its share of the backlog
// in flight (Backlog 4 over 2 partitions: 2) has its items stamped from the
// scheduler's virtual time (the newest head taken), beside the work ready
// now; past that share, after everything pushed so far. So one whose items
// arrive after another's backlog is served beside that backlog, not behind
// it; two backlogs pushed together interleave their shares, then go in
// arrival order; a partition alone runs through its own in order.
func TestPartitionsShareTheWorkers(t *testing.T) {
	tests := []struct {
		name string
		// pushes, in order: partition index and lanes
		pushes []struct {
			part  int
			lanes []int
		}
		takeFirst int    // takes before the second group of pushes
		later     []int  // the partition pushed after takeFirst takes (its lanes 100, 101)
		want      string // partitions of the items taken, in order
	}{
		{
			name: "a partition arriving after another's backlog",
			pushes: []struct {
				part  int
				lanes []int
			}{{0, []int{1, 2, 3, 4, 5, 6, 7, 8}}},
			takeFirst: 2, later: []int{1},
			want: "0 0 0 1 0 1 0 0 0 0",
		},
		{
			name: "two backlogs pushed together",
			pushes: []struct {
				part  int
				lanes []int
			}{{0, []int{1, 2, 3, 4}}, {1, []int{1, 2, 3, 4}}},
			want: "0 1 0 1 0 0 1 1",
		},
		{
			name: "one partition keeps its order",
			pushes: []struct {
				part  int
				lanes []int
			}{{0, []int{1, 2, 3}}, {0, []int{4, 5}}},
			want: "0 0 0 0 0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 10, Backlog: 4})
			parts := []*Partition[msg, int]{s.NewPartition(64), s.NewPartition(64)}
			offs := make([]int64, len(parts))
			for _, p := range tt.pushes {
				feed(t, parts[p.part], &offs[p.part], p.lanes...)
			}
			w := s.NewWorker()
			var got []string
			lastOff := map[int]int{0: -1, 1: -1}
			take := func() bool {
				b := s.NewBatch(w)
				if st := s.Next(b, true, nil); st != Run {
					return false
				}
				it := b.Items[0]
				part := 0
				if it.part == parts[1] {
					part = 1
				}
				if it.Msg.seq <= lastOff[part] {
					t.Fatalf("partition %d: offset %d taken after %d", part, it.Msg.seq, lastOff[part])
				}
				lastOff[part] = it.Msg.seq
				got = append(got, fmt.Sprint(part))
				s.Release(b)
				return true
			}
			for range tt.takeFirst {
				take()
			}
			for _, p := range tt.later {
				feed(t, parts[p], &offs[p], 100, 101)
			}
			for take() {
			}
			if g := fmt.Sprint(got); g != "["+tt.want+"]" {
				t.Fatalf("partitions of the items taken: got %s, want [%s]", g, tt.want)
			}
		})
	}
}
