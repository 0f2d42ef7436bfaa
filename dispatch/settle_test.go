package dispatch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func seqsOf(b *Batch[msg, int]) []int {
	var out []int
	for _, it := range b.Items {
		out = append(out, it.Msg.seq)
	}
	return out
}

// takeAll takes everything ready, a batch at a time, finishing each, and
// returns the offsets in the order taken.
func takeAll(t *testing.T, s *sched, w *Worker[msg, int]) []int {
	t.Helper()
	var got []int
	for {
		b := s.NewBatch(w)
		st := s.Next(b, true, nil)
		if st == Empty {
			return got
		}
		if st != Run {
			t.Fatalf("Next: got %v, want Run or Empty", st)
		}
		got = append(got, seqsOf(b)...)
		s.Release(b)
	}
}

// TestSettleHoldsOnlyTheFailedLane (invariant 2): an item that fails goes
// back to the front of its lane with its later lane mates of the batch
// behind it, the lane waits for the retry, and everything else finishes.
func TestSettleHoldsOnlyTheFailedLane(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 1, 3, 1, 2) // offsets 0..5
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 6 {
		t.Fatalf("Next: got %v with %d items, want Run with 6", st, len(b.Items))
	}
	feed(t, p, &off, 1, 3) // offsets 6 (lane 1) and 7 (lane 3) arrive while it runs
	due := time.Now().Add(50 * time.Millisecond)
	out := make([]Outcome, len(b.Items))
	for i, it := range b.Items {
		if it.Msg.seq == 2 || it.Msg.seq == 5 { // lane 1's second item fails, and lane 2's second
			it.Attempt++
			out[i] = Outcome{Retry, due}
		}
	}
	if n := s.Settle(b, out); n != 3 {
		t.Fatalf("Settle finished %d items, want 3 (offsets 0, 1, 3)", n)
	}
	p.Advance()
	if next, _ := p.Next(); next != 2 {
		t.Fatalf("frontier: got %d, want 2 (offset 2 failed)", next)
	}
	if got := s.Retrying(); got != 2 {
		t.Fatalf("lanes waiting for a retry: got %d, want 2 (lanes 1 and 2)", got)
	}
	// Lane 3's new item runs at once; lanes 1 and 2 wait.
	if got := takeAll(t, s, w); !slices.Equal(got, []int{7}) {
		t.Fatalf("taken before the retry is due: got %v, want [7] (lane 3 only)", got)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); s.RunRetries(stop) }()
	defer func() { close(stop); <-done }()
	time.Sleep(time.Until(due) + 20*time.Millisecond)
	got := takeAll(t, s, w)
	slices.Sort(got) // lanes 1 and 2 are independent; within lane 1 order is checked below
	if !slices.Equal(got, []int{2, 4, 5, 6}) {
		t.Fatalf("taken after the retry: got %v, want offsets 2, 4, 5 and 6", got)
	}
}

// TestSettleKeepsLaneOrder: a later lane mate marked Done behind a failed
// item is not finished: it goes back behind the failure, in order.
func TestSettleKeepsLaneOrder(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 1, 1)
	w := s.NewWorker()
	b := s.NewBatch(w)
	s.Next(b, true, nil)
	s.Settle(b, []Outcome{{Done, time.Time{}}, {Return, time.Time{}}, {Done, time.Time{}}})
	p.Advance()
	if next, _ := p.Next(); next != 1 {
		t.Fatalf("frontier: got %d, want 1", next)
	}
	b = s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || !slices.Equal(seqsOf(b), []int{1, 2}) {
		t.Fatalf("next batch: got %v %v, want Run [1 2] (returned at once, in order)", st, seqsOf(b))
	}
	if b.Items[0].Attempt != 1 || b.Items[1].Attempt != 1 {
		t.Fatal("returned items were charged an attempt")
	}
}

// TestSettleAfterFinish: items handed back early (Finish) are skipped by
// Settle.
func TestSettleAfterFinish(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 3, 4)
	w := s.NewWorker()
	b := s.NewBatch(w)
	s.Next(b, true, nil)
	s.Finish(b.Items[:2])
	out := []Outcome{{Finished, time.Time{}}, {Finished, time.Time{}}, {Done, time.Time{}}, {Retry, time.Now().Add(time.Hour)}}
	if n := s.Settle(b, out); n != 1 {
		t.Fatalf("Settle finished %d, want 1", n)
	}
	p.Advance()
	if next, _ := p.Next(); next != 3 {
		t.Fatalf("frontier: got %d, want 3", next)
	}
	if got := p.FinishedAbove(); got != 0 {
		t.Fatalf("finished above: got %d, want 0", got)
	}
}

func TestSortByLane(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 16, MaxInFlight: 100, Window: 1})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 1, 3, 2, 1)
	b := s.NewBatch(s.NewWorker())
	s.Next(b, true, nil)
	b.SortByLane()
	if got := lanesOf(b); !slices.Equal(got, []int{1, 1, 1, 2, 2, 3}) {
		t.Fatalf("lanes after sort: got %v, want [1 1 1 2 2 3]", got)
	}
	if got := seqsOf(b); !slices.Equal(got, []int{0, 2, 5, 1, 4, 3}) {
		t.Fatalf("offsets after sort: got %v, want each lane in order [0 2 5 1 4 3]", got)
	}
	if !b.SameLane(0, 2) || b.SameLane(2, 3) {
		t.Fatal("SameLane disagrees with the sort")
	}
}

// TestCancelRunning: the worker whose running batch holds items of a
// revoked partition has its context cancelled with the cause; a worker
// running only other partitions' items is not.
func TestCancelRunning(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100})
	p, other := s.NewPartition(16), s.NewPartition(16)
	var off, otherOff int64
	feed(t, p, &off, 1)
	feed(t, other, &otherOff, 2)
	w1, w2 := s.NewWorker(), s.NewWorker()
	ctx1, ctx2 := s.WithCancel(context.Background(), w1), s.WithCancel(context.Background(), w2)
	b1, b2 := s.NewBatch(w1), s.NewBatch(w2)
	s.Next(b1, true, nil)
	s.Next(b2, true, nil)
	if b1.Items[0].part != p {
		b1, b2, ctx1, ctx2 = b2, b1, ctx2, ctx1
	}
	cause := errors.New("revoked")
	if n := s.CancelRunning(p, cause); n != 1 {
		t.Fatalf("CancelRunning: got %d, want 1", n)
	}
	if !errors.Is(context.Cause(ctx1), cause) {
		t.Fatalf("cause of the revoked partition's batch: got %v, want %v", context.Cause(ctx1), cause)
	}
	if ctx2.Err() != nil {
		t.Fatal("the other partition's batch was cancelled")
	}
	s.Release(b1)
	s.Release(b2)
	if n := s.CancelRunning(p, cause); n != 0 {
		t.Fatalf("CancelRunning with nothing running: got %d, want 0", n)
	}
}
