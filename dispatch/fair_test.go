package dispatch

import (
	"fmt"
	"slices"
	"testing"
)

// TestPartitionsShareTheWorkers: items are served in arrival order within
// each partition, and each partition's items are stamped one past its own
// last or past the scheduler's virtual time (the newest head taken),
// whichever is later: start-time fair queuing. So one whose items arrive
// after another's backlog is served beside that backlog, not behind it;
// two backlogs pushed together interleave item by item, past their shares
// of the pacing backlog (Backlog 4 over 2 partitions: 2) too (before, past
// that share they went in arrival order: 0 1 0 1 0 0 1 1); a partition
// alone runs through its own in order.
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
			want: "0 1 0 1 0 1 0 1",
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

// TestLightItemNotBehindTheCurrentBucket: a light partition's item is
// stamped just past the virtual time, which may be older than the
// requeued lanes' current bucket; it goes before that bucket, not to its
// back behind a lane with a much newer head (and so behind every fresh
// lane older than that head: 40 of partition 0's items, before).
func TestLightItemNotBehindTheCurrentBucket(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 10, Backlog: 4})
	p0, p1 := s.NewPartition(64), s.NewPartition(64)
	var o0, o1 int64
	lanes := make([]int, 40)
	for i := range lanes {
		lanes[i] = i + 1
	}
	feed(t, p0, &o0, lanes...) // fresh, stamps 1-40
	feed(t, p0, &o0, 1)        // lane 1's second item, stamp 41
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	s.Release(b) // lane 1 requeued at stamp 41; the virtual time is 1
	feed(t, p1, &o1, 100)
	for n := 0; ; n++ {
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v before partition 1's item ran", st)
		}
		p := b.Items[0].part
		s.Release(b)
		if p == p1 {
			if n > 2 {
				t.Fatalf("partition 1's item ran after %d of partition 0's, want at most 2", n)
			}
			return
		}
	}
}

// TestCarryingOnStopsShortOfWaitingHeads: a worker that goes on with the
// lane it just finished (Next with done) takes that lane's newest item;
// the virtual time stops short of the heads still waiting in the ready
// queue, so another partition's items arriving then are not stamped
// behind them: with the virtual time at the carried item, they ran after
// all 7 of partition 0's waiting items.
func TestCarryingOnStopsShortOfWaitingHeads(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 10, Backlog: 4})
	p0, p1 := s.NewPartition(64), s.NewPartition(64)
	var o0, o1 int64
	feed(t, p0, &o0, 1, 2, 3, 4, 5, 6, 7, 8)
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	feed(t, p0, &o0, 1) // more of lane 1 while it runs
	next := s.NewBatch(w)
	if st := s.Next(next, true, b); st != Run || next.Items[0].Msg.lane != 1 {
		t.Fatalf("Next after lane 1 ran: got %v, lanes %v; want Run carrying on with lane 1", st, lanesOf(next))
	}
	feed(t, p1, &o1, 100, 101)
	var got []int
	for done := next; ; {
		b := s.NewBatch(w)
		if st := s.Next(b, true, done); st != Run {
			break
		}
		part := 0
		if b.Items[0].part == p1 {
			part = 1
		}
		got = append(got, part)
		done = b
	}
	if first := slices.Index(got, 1); first < 0 || first > 1 {
		t.Fatalf("partitions of the items taken after partition 1's arrived: got %v, want partition 1's first among the first two", got)
	}
}

// TestLightPartitionsDoNotStarveABusyOne: light partitions' items are
// stamped from the virtual time, ahead of most of a busy partition's
// backlog, but taking one moves the virtual time on, so a busy partition's
// items still come up in turn (invariant 3 in the other direction). Two partitions
// push a fresh item whenever theirs has finished, before every take; the
// busy one's 10 items all run within 40 takes.
func TestLightPartitionsDoNotStarveABusyOne(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 10, Backlog: 4})
	busy, light := s.NewPartition(64), []*Partition[msg, int]{s.NewPartition(64), s.NewPartition(64)}
	var off int64
	feed(t, busy, &off, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	lightOffs := make([]int64, len(light))
	w := s.NewWorker()
	ran := 0
	for take := 1; ran < 10; take++ {
		if take > 40 {
			t.Fatalf("busy partition: %d of 10 items ran in 40 takes while the light ones kept arriving, want all", ran)
		}
		for i, p := range light {
			if p.inflight == 0 {
				feed(t, p, &lightOffs[i], 100)
			}
		}
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("take %d: Next got %v, want Run", take, st)
		}
		if b.Items[0].part == busy {
			ran++
		}
		s.Release(b)
		for _, p := range append([]*Partition[msg, int]{busy}, light...) {
			p.Advance()
		}
	}
}

// TestPushesBehindTheCurrentBucketInterleave: two partitions push 150
// lanes each, stamped from a virtual time (1) behind the requeued lanes'
// current bucket (a lane of partition 0 requeued at stamp 201). Their lanes
// go to their own buckets, so the second partition's first item runs after
// at most a bucket's worth (16 stamps) of the first's; in a FIFO of late
// lanes it ran after all 150.
func TestPushesBehindTheCurrentBucketInterleave(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 12, Backlog: 1 << 12})
	p0, p1, p2 := s.NewPartition(256), s.NewPartition(256), s.NewPartition(256)
	var o0, o1, o2 int64
	lanes := make([]int, 200)
	for i := range lanes {
		lanes[i] = i + 1
	}
	feed(t, p0, &o0, lanes...) // fresh, stamps 1-200
	feed(t, p0, &o0, 1)        // lane 1's second item, stamp 201
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	s.Release(b) // lane 1 requeued at stamp 201; the virtual time is 1
	feed(t, p1, &o1, lanes[:150]...)
	feed(t, p2, &o2, lanes[:150]...)
	ran1 := 0
	for {
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v before partition 2's first item ran", st)
		}
		p := b.Items[0].part
		s.Release(b)
		switch p {
		case p1:
			ran1++
		case p2:
			if ran1 > 16 {
				t.Fatalf("partition 2's first item ran after %d of partition 1's, want at most 16", ran1)
			}
			return
		}
	}
}

// TestCarryOnChainDoesNotRunAhead: partition A's one lane runs as an
// unbroken chain of 1,000 carry-ons (an item arriving during each call);
// then partition C pushes a backlog of 500 and A one more item. A's item
// runs among C's first few. While carrying on left the virtual time where
// it was, A's tag ran 1,000 stamps ahead of it, and A's item ran after
// all 500 of C's.
func TestCarryOnChainDoesNotRunAhead(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 16, Backlog: 4})
	pA, pC := s.NewPartition(4096), s.NewPartition(4096)
	var oA, oC int64
	w := s.NewWorker()
	feed(t, pA, &oA, 1)
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	for i := range 1000 {
		feed(t, pA, &oA, 1) // arrives while lane 1 runs
		nb := s.NewBatch(w)
		if st := s.Next(nb, true, b); st != Run || nb.Items[0].part != pA {
			t.Fatalf("chain step %d: got %v, want Run carrying on with partition A's lane", i, st)
		}
		b = nb
		if i%256 == 0 {
			pA.Advance()
		}
	}
	s.Release(b) // the call ends before the next item arrives: the chain breaks
	pA.Advance()
	lanes := make([]int, 500)
	for i := range lanes {
		lanes[i] = 1000 + i%50
	}
	feed(t, pC, &oC, lanes...)
	feed(t, pA, &oA, 1)
	ranC := 0
	for {
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v before partition A's item ran", st)
		}
		p := b.Items[0].part
		s.Release(b)
		if p == pA {
			break
		}
		ranC++
	}
	if ranC > 8 {
		t.Fatalf("partition A's item ran after %d of partition C's %d, want at most 8", ranC, len(lanes))
	}
}
