package dispatch

import (
	"testing"

	"github.com/orderly-go/orderly/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

type msg struct{ lane, seq int } // seq: the offset

type sched = Scheduler[msg, int]

// feed adds one item per (lane, seq) in order and flushes them.
func feed(t *testing.T, p *Partition[msg, int], next *int64, lanes ...int) []*Item[msg, int] {
	t.Helper()
	var items []*Item[msg, int]
	for _, l := range lanes {
		it := p.Alloc()
		it.Msg, it.Lane = msg{l, int(*next)}, uint64(l)
		p.Acquire(0)
		if err := p.Add(it, *next); err != nil {
			t.Fatalf("Add offset %d: %v", *next, err)
		}
		*next++
		items = append(items, it)
	}
	p.Flush()
	return items
}

func lanesOf(b *Batch[msg, int]) []int {
	var out []int
	for _, it := range b.Items {
		out = append(out, it.Msg.lane)
	}
	return out
}

func TestLaneHeldByOneBatch(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 100, Window: 1})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 1, 2, 1)
	w1, w2 := s.NewWorker(), s.NewWorker()
	b1, b2 := s.NewBatch(w1), s.NewBatch(w2)
	if st := s.Next(b1, true, nil); st != Run {
		t.Fatalf("first Next: got %v, want Run", st)
	}
	// Size 4 takes all four, oldest first: arrival order, which keeps
	// each lane's own order.
	if got := lanesOf(b1); len(got) != 4 || got[0] != 1 || got[1] != 1 || got[2] != 2 || got[3] != 1 {
		t.Fatalf("first batch lanes: got %v, want [1 1 2 1]", got)
	}
	// While b1 runs, more items of lane 1 arrive: nobody else may take
	// them, since lane 1 is held.
	feed(t, p, &off, 1, 3)
	if st := s.Next(b2, true, nil); st != Run {
		t.Fatalf("second Next: got %v, want Run (lane 3)", st)
	}
	if got := lanesOf(b2); len(got) != 1 || got[0] != 3 {
		t.Fatalf("second batch: got lanes %v, want only lane 3 while lane 1 is held", got)
	}
	// Releasing b1 hands lane 1's next item out.
	b3 := s.NewBatch(w1)
	if st := s.Next(b3, true, b1); st != Run {
		t.Fatalf("third Next: got %v, want Run", st)
	}
	if got := lanesOf(b3); len(got) != 1 || got[0] != 1 || b3.Items[0].Msg.seq != 4 {
		t.Fatalf("third batch: got %v (offset %d), want lane 1 offset 4", got, b3.Items[0].Msg.seq)
	}
}

// TestNoHeadOfLineBlocking: a lane whose batch never finishes (a stalled Do)
// does not stop the dispatcher, nor keep other lanes from other workers.
// TestOldestFirst: a lane released with old items queued behind it goes
// ahead of lanes whose items are newer, so the commit frontier follows the
// work instead of lagging a whole round behind it.
func TestOldestFirst(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1)
	w := s.NewWorker()
	running := s.NewBatch(w)
	if st := s.Next(running, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	// While lane 1 runs its offset 0, lane 1 gets offset 1, then lanes 2..4
	// get newer offsets.
	feed(t, p, &off, 1, 2, 3, 4)
	var got []int64
	done := running
	for range 4 {
		b := s.NewBatch(w)
		if st := s.Next(b, true, done); st != Run {
			t.Fatalf("Next: got %v, want Run", st)
		}
		got = append(got, int64(b.Items[0].Msg.seq))
		done = b
	}
	want := []int64{1, 2, 3, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order taken: got offsets %v, want %v (lane 1's older item first)", got, want)
		}
	}
}

func TestNoHeadOfLineBlocking(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 1 << 20})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 7)
	stalled := s.NewBatch(s.NewWorker())
	if st := s.Next(stalled, true, nil); st != Run {
		t.Fatalf("stalled batch: got %v, want Run", st)
	}
	// Thousands more for the stalled lane and others: pushing never blocks.
	lanes := make([]int, 0, 20000)
	for i := range 10000 {
		lanes = append(lanes, 7, i%100+100)
	}
	feed(t, p, &off, lanes...)
	w := s.NewWorker()
	b := s.NewBatch(w)
	var done *Batch[msg, int]
	for i := range 10000 {
		st := s.Next(b, true, done)
		if st != Run {
			t.Fatalf("Next %d: got %v, want Run", i, st)
		}
		if l := b.Items[0].Msg.lane; l == 7 {
			t.Fatalf("Next %d: got an item of the stalled lane", i)
		}
		done, b = b, s.NewBatch(w)
	}
	if st := s.Next(b, true, done); st != Empty {
		t.Fatalf("after other lanes drained: got %v, want Empty (only the stalled lane is left)", st)
	}
}

func TestMaxInFlightPausesIntake(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 10})
	p := s.NewPartition(16)
	var off int64
	for range 10 {
		if !p.Room() {
			t.Fatalf("Room: got false with %d in flight, want true below 10", s.InFlight())
		}
		feed(t, p, &off, 1)
	}
	if p.Room() {
		t.Fatalf("Room: got true with %d in flight, want false at MaxInFlight", s.InFlight())
	}
	if more := p.Acquire(5); more != 0 {
		t.Fatalf("Acquire beyond the budget: got %d more, want 0", more)
	}
	p.Unused()
	// Finishing messages moves the frontier, frees budget and wakes the
	// paused partition.
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 8 {
		t.Fatalf("Next: got %v with %d items, want Run with 8", st, len(b.Items))
	}
	s.Release(b)
	select {
	case <-p.Wake():
	default:
		t.Fatal("partition not woken after budget was released")
	}
	if n := p.Advance(); n != 8 {
		t.Fatalf("Advance: got %d, want 8", n)
	}
	if !p.Room() || s.InFlight() != 2 {
		t.Fatalf("after release: Room %v in flight %d, want true and 2", p.Room(), s.InFlight())
	}
	if next, _ := p.Next(); next != 8 {
		t.Fatalf("frontier: got %d, want 8", next)
	}
}

func TestRevoke(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 2, MaxInFlight: 100})
	p, other := s.NewPartition(16), s.NewPartition(16)
	var off, otherOff int64
	feed(t, p, &off, 1, 2, 3, 4, 5)
	running := s.NewBatch(s.NewWorker())
	parked := s.NewBatch(s.NewWorker())
	filling := s.NewBatch(s.NewWorker())
	if st := s.Next(running, false, nil); st != Run {
		t.Fatalf("running: got %v, want Run", st)
	}
	if st := s.Next(parked, false, nil); st != Run {
		t.Fatalf("parked: got %v, want Run", st)
	}
	s.Park(parked)
	if st := s.Next(filling, false, nil); st != Partial {
		t.Fatalf("filling: got %v, want Partial", st)
	}
	feed(t, other, &otherOff, 9)
	dropped, abandoned := p.Revoke()
	// 5 items: 2 running, 2 parked, 1 waiting in the partial batch.
	if dropped != 1 || abandoned != 2 {
		t.Fatalf("Revoke: got dropped %d abandoned %d, want 1 and 2", dropped, abandoned)
	}
	if got := p.Outstanding(); got != 2 {
		t.Fatalf("Outstanding after revoke: got %d, want 2 (the running batch)", got)
	}
	if s.Restart(parked) {
		t.Fatalf("Restart of a batch whose partition was revoked: got true, want false")
	}
	for _, it := range filling.Items {
		if it.part == p {
			t.Fatalf("partial batch still holds an item of the revoked partition")
		}
	}
	s.Release(running)
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding after the running batch finished: got %d, want 0", got)
	}
	p.Advance()
	if left := p.Close(); left != 3 {
		t.Fatalf("Close: got %d left behind the frontier, want 3", left)
	}
	if next, _ := p.Next(); next != 2 {
		t.Fatalf("final frontier: got %d, want 2", next)
	}
	if s.InFlight() != 1 {
		t.Fatalf("in flight after Close: got %d, want 1 (the other partition's)", s.InFlight())
	}
	// The other partition is untouched.
	if st := s.Next(filling, true, nil); st != Run || len(filling.Items) != 1 || filling.Items[0].part != other {
		t.Fatalf("other partition: got %v with %d items, want its one item", st, len(filling.Items))
	}
}

// TestIdleLanesSwept: lanes of keys that come and go are recycled, so a
// stream of ever-new keys does not grow the lane map without bound.
func TestIdleLanesSwept(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 64, MaxInFlight: 1 << 20})
	p := s.NewPartition(64)
	w := s.NewWorker()
	var off int64
	key := 0
	var done *Batch[msg, int]
	for round := range 30 {
		lanes := make([]int, 1000)
		for i := range lanes {
			lanes[i] = key
			key++
		}
		feed(t, p, &off, lanes...)
		for {
			b := s.NewBatch(w)
			st := s.Next(b, true, done)
			done = nil
			if st == Empty {
				break
			}
			if st != Run {
				t.Fatalf("round %d: got %v, want Run or Empty", round, st)
			}
			done = b
		}
		p.Advance()
	}
	if next, _ := p.Next(); next != off {
		t.Fatalf("frontier: got %d, want %d (everything finished)", next, off)
	}
	s.mu.Lock()
	n := len(p.lanes)
	s.mu.Unlock()
	if n > 4*minLaneSweep {
		t.Fatalf("lane map: got %d lanes after 30000 distinct keys, want at most %d (idle lanes swept)", n, 4*minLaneSweep)
	}
}

// TestPausedPartitionRegistersOnce: a partition paused on the budget and
// woken for other reasons (its head finishing) checks Room again and again;
// it must stay registered once, not pile up in the waiter list.
func TestPausedPartitionRegistersOnce(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 4})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 3, 4)
	for range 1000 {
		if p.Room() {
			t.Fatal("Room: got true with the budget spent, want false")
		}
	}
	s.budget.mu.Lock()
	n := len(s.budget.waiters)
	s.budget.mu.Unlock()
	if n != 1 {
		t.Fatalf("waiters: got %d registrations, want 1", n)
	}
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	s.Release(b)
	p.Advance() // frees all 4: the waiter is woken and unregistered
	if !p.Room() {
		t.Fatal("Room after the budget was released: got false, want true")
	}
	s.budget.mu.Lock()
	n = len(s.budget.waiters)
	s.budget.mu.Unlock()
	if n != 0 {
		t.Fatalf("waiters after release: got %d, want 0", n)
	}
}

// TestFailureAfterRevokeIsAbandoned: a batch that was inside Do when its
// partition was revoked, and then failed, is not kept for a retry (that
// would start a revoked partition's messages again, and keep its drain
// waiting): its items are abandoned at once.
func TestFailureAfterRevokeIsAbandoned(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 100})
	p, other := s.NewPartition(16), s.NewPartition(16)
	var off, otherOff int64
	feed(t, p, &off, 1, 2)
	feed(t, other, &otherOff, 3)
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 3 {
		t.Fatalf("Next: got %v with %d items, want Run with 3", st, len(b.Items))
	}
	p.Revoke() // while the batch runs
	p.Drain()
	s.Park(b) // and then fails
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("revoked partition's outstanding after the failure: got %d, want 0", got)
	}
	select {
	case <-p.Wake():
	default:
		t.Fatal("draining partition not woken when its items were abandoned")
	}
	if len(b.Items) != 1 || b.Items[0].part != other {
		t.Fatalf("parked batch: got %d items, want only the other partition's one", len(b.Items))
	}
	if !s.Restart(b) {
		t.Fatal("Restart: got false, want true (the other partition's item is retried)")
	}
}
