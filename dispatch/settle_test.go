package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// behind it, the lane is held (Options.Hold is told) until Unhold, and
// everything else finishes.
func TestSettleHoldsOnlyTheFailedLane(t *testing.T) {
	var held []*Item[msg, int]
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, Hold: func(it *Item[msg, int], o Outcome) {
		if o.Kind != 7 {
			t.Errorf("Hold got kind %d, want the caller's 7", o.Kind)
		}
		held = append(held, it)
	}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 1, 3, 1, 2) // offsets 0..5
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 6 {
		t.Fatalf("Next: got %v with %d items, want Run with 6", st, len(b.Items))
	}
	feed(t, p, &off, 1, 3) // offsets 6 (lane 1) and 7 (lane 3) arrive while it runs
	out := make([]Outcome, len(b.Items))
	for i, it := range b.Items {
		if it.Msg.seq == 2 || it.Msg.seq == 5 { // lane 1's second item fails, and lane 2's second
			out[i] = Outcome{Verdict: Hold, Kind: 7}
		}
	}
	if n := s.Settle(b, out); n != 3 {
		t.Fatalf("Settle finished %d items, want 3 (offsets 0, 1, 3)", n)
	}
	p.Advance()
	if next, _ := p.Next(); next != 2 {
		t.Fatalf("frontier: got %d, want 2 (offset 2 failed)", next)
	}
	if got := s.Held(); got != 2 || len(held) != 2 {
		t.Fatalf("lanes held: got %d (Hold told of %d), want 2 (lanes 1 and 2)", got, len(held))
	}
	if got := s.WaitingItems(p, nil); len(got) != 2 {
		t.Fatalf("WaitingItems: got %d, want 2", len(got))
	}
	var heads []int64
	for _, h := range s.WaitingItems(p, nil) {
		if h.Offset != h.Item.Offset() || h.Attempt != h.Item.Attempt {
			t.Fatalf("WaitingItems: got offset %d attempt %d, want the item's %d and %d", h.Offset, h.Attempt, h.Item.Offset(), h.Item.Attempt)
		}
		heads = append(heads, h.Offset)
	}
	slices.Sort(heads)
	if want := []int64{2, 5}; !slices.Equal(heads, want) {
		t.Fatalf("WaitingItems offsets: got %v, want %v (the failed heads of lanes 1 and 2)", heads, want)
	}
	// Lane 3's new item runs at once; lanes 1 and 2 wait.
	if got := takeAll(t, s, w); !slices.Equal(got, []int{7}) {
		t.Fatalf("taken while held: got %v, want [7] (lane 3 only)", got)
	}
	for _, it := range held {
		if !s.Unhold(it, false) {
			t.Fatalf("Unhold(offset %d): got false, want true", it.Msg.seq)
		}
		if s.Unhold(it, false) {
			t.Fatalf("second Unhold(offset %d): got true, want false", it.Msg.seq)
		}
	}
	got := takeAll(t, s, w)
	slices.Sort(got) // lanes 1 and 2 are independent; within lane 1 order is checked below
	if !slices.Equal(got, []int{2, 4, 5, 6}) {
		t.Fatalf("taken after Unhold: got %v, want offsets 2, 4, 5 and 6", got)
	}
}

// TestUnholdFinished: a held item let go as finished (its dead letter was
// written) leaves its lane and passes the frontier; the lane's next item
// runs.
func TestUnholdFinished(t *testing.T) {
	var held *Item[msg, int]
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, Hold: func(it *Item[msg, int], _ Outcome) { held = it }})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 1)
	w := s.NewWorker()
	b := s.NewBatch(w)
	s.Next(b, true, nil)
	s.Settle(b, []Outcome{{Verdict: Hold}, {Verdict: Done}})
	if held == nil || held.Msg.seq != 0 {
		t.Fatalf("held: got %v, want offset 0", held)
	}
	s.Unhold(held, true)
	p.Advance()
	if next, _ := p.Next(); next != 1 {
		t.Fatalf("frontier after the held item finished: got %d, want 1", next)
	}
	if got := takeAll(t, s, w); !slices.Equal(got, []int{1}) {
		t.Fatalf("taken: got %v, want [1] (its lane mate, uncharged)", got)
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
	s.Settle(b, []Outcome{{Verdict: Done}, {Verdict: Return}, {Verdict: Done}})
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
	// The lane's next settle starts afresh: its items are done this time.
	s.Settle(b, []Outcome{{Verdict: Done}, {Verdict: Done}})
	p.Advance()
	if next, _ := p.Next(); next != 3 {
		t.Fatalf("frontier after the rerun: got %d, want 3", next)
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
	s.Finish(b, 0, 2)
	out := []Outcome{{Verdict: Finished}, {Verdict: Finished}, {Verdict: Done}, {Verdict: Hold}}
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
	s.SortByLane(b)
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

// TestOrphan: a running batch given up on (its call hangs) lets its lanes
// go at once; its items' owners put copies, one attempt on, in their
// places; what the hung call reports when it returns never counts: the
// frontier moves only when the copies finish.
func TestOrphan(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 100})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 3)
	hung, other := s.NewWorker(), s.NewWorker()
	b := s.NewBatch(hung)
	s.Next(b, true, nil)
	recycled := map[*Item[msg, int]]bool{}
	for _, it := range b.Items {
		recycled[it] = true
	}
	call := s.BeginCall(hung, nil)
	if n := s.Orphan(hung, call); n != 3 {
		t.Fatalf("Orphan: got %d, want 3", n)
	}
	if n := s.Orphan(hung, call); n != 0 {
		t.Fatalf("second Orphan: got %d, want 0", n)
	}
	p.Advance() // the owner makes the copies
	if got := p.Orphaned(); got != 3 {
		t.Fatalf("Orphaned: got %d, want 3", got)
	}
	c := s.NewBatch(other)
	if st := s.Next(c, true, nil); st != Run || len(c.Items) != 3 {
		t.Fatalf("copies: got %v with %d items, want Run with 3", st, len(c.Items))
	}
	for _, it := range c.Items {
		recycled[it] = true
		if it.Attempt != 2 {
			t.Fatalf("copy of offset %d: attempt %d, want 2", it.Offset(), it.Attempt)
		}
	}
	s.EndCall(hung)
	s.Release(b) // the hung call returns "done": ignored
	p.Advance()
	if next, _ := p.Next(); next != 0 || p.Unfinished() != 3 {
		t.Fatalf("after the hung call returned: frontier %d, unfinished %d; want 0 and 3 (its report ignored)", next, p.Unfinished())
	}
	s.Release(c)
	p.Advance()
	if next, _ := p.Next(); next != 3 || p.Unfinished() != 0 {
		t.Fatalf("after the copies finished: frontier %d, unfinished %d; want 3 and 0", next, p.Unfinished())
	}
	// All six items (the hung call's and the copies) are back on the free
	// list. Taken again, they are ordinary items: their completions count.
	for _, it := range feed(t, p, &off, 1, 2, 3, 4, 5, 6) {
		if !recycled[it] {
			t.Fatalf("offset %d got a new item, want one of the six recycled", it.Offset())
		}
	}
	for p.Unfinished() > 0 {
		d := s.NewBatch(other)
		if st := s.Next(d, true, nil); st != Run {
			t.Fatalf("reused items: Next got %v, want Run (unfinished %d)", st, p.Unfinished())
		}
		n := len(d.Items)
		s.Release(d)
		if p.Advance() == 0 {
			next, _ := p.Next()
			t.Fatalf("reused items: %d finished, the frontier did not move (still %d, %d unfinished)", n, next, p.Unfinished())
		}
	}
	if next, _ := p.Next(); next != 9 {
		t.Fatalf("after the reused items finished: frontier %d, want 9", next)
	}
}

// TestOrphanAroundRevoke: a hung call judged after its partition was
// revoked gives up on none of its items, and when it then fails they are
// not finished (the frontier stays: invariant 1); a hung call given up on
// before the revoke has its copies made in the drain, which are dropped
// with the partition, abandoned in the drain (each once: the originals
// left Outstanding when Orphan gave up on them), so the drain waits for
// neither, and listed for the final commit one attempt past the hung one.
func TestOrphanAroundRevoke(t *testing.T) {
	oneItemInCall := func(t *testing.T) (*sched, *Partition[msg, int], *Worker[msg, int], *Batch[msg, int], uint64) {
		t.Helper()
		s, p, b, _ := oneItemRunning(t)
		return s, p, b.w, b, s.BeginCall(b.w, nil)
	}
	t.Run("orphaned after the revoke", func(t *testing.T) {
		s, p, b, held := oneItemRunning(t)
		w := b.w
		call := s.BeginCall(w, nil)
		p.Revoke()
		p.Drain()
		if n := s.Orphan(w, call); n != 0 {
			t.Fatalf("Orphan after the revoke: got %d, want 0", n)
		}
		s.EndCall(w)
		s.Settle(b, []Outcome{{Verdict: Hold}}) // it failed: settled as in a drain
		if *held == nil || s.Waits(*held) {
			t.Fatal("Hold not told of the failed item, or Waits got true; want it told, and false (the partition is gone)")
		}
		p.Advance()
		if next, _ := p.Next(); next != 0 {
			t.Fatalf("frontier: got %d, want 0 (the failed item did not finish)", next)
		}
		if got := p.Outstanding(); got != 0 {
			t.Fatalf("Outstanding: got %d, want 0", got)
		}
	})
	t.Run("orphaned before the revoke", func(t *testing.T) {
		s, p, w, b, call := oneItemInCall(t)
		if n := s.Orphan(w, call); n != 1 {
			t.Fatalf("Orphan: got %d, want 1", n)
		}
		p.Revoke()
		p.Drain()
		p.Advance() // the copy, made now, is dropped with the partition
		if late, inDrain := p.Unsettled(); late != 0 || inDrain != 1 {
			t.Fatalf("while the hung call runs: got Outstanding %d, AbandonedInDrain %d; want 0 and 1 (the dropped copy)", late, inDrain)
		}
		// The final commit lists the dropped copy at its attempt: the
		// hung attempt stays charged.
		var listed []string
		for _, w := range s.DrainedWaiting(p, nil) {
			listed = append(listed, fmt.Sprintf("%d@%d", w.Offset, w.Attempt))
		}
		if !slices.Equal(listed, []string{"0@2"}) {
			t.Fatalf("DrainedWaiting: got %v, want [0@2] (the copy, one attempt past the hung one)", listed)
		}
		s.EndCall(w)
		s.Settle(b, []Outcome{{Verdict: Return}})
		p.Advance()
		if late, inDrain := p.Unsettled(); late != 0 || inDrain != 1 {
			t.Fatalf("once the hung call returned: got Outstanding %d, AbandonedInDrain %d; want 0 and 1 (nothing more)", late, inDrain)
		}
		if next, _ := p.Next(); next != 0 {
			t.Fatalf("frontier: got %d, want 0", next)
		}
	})
}

// TestOrphanLeavesOutstanding: an item Orphan gave up on leaves
// Outstanding at once, and its copy counts in its place: once the copy
// has finished and been taken back nothing is outstanding, while the hung
// call still runs (a drain would wait for it for nothing), and its return
// changes nothing.
func TestOrphanLeavesOutstanding(t *testing.T) {
	s, p, b, _ := oneItemRunning(t)
	w := b.w
	call := s.BeginCall(w, nil)
	if n := s.Orphan(w, call); n != 1 {
		t.Fatalf("Orphan: got %d, want 1", n)
	}
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding after Orphan: got %d, want 0", got)
	}
	p.Advance() // makes the copy
	if got := p.Outstanding(); got != 1 {
		t.Fatalf("Outstanding with the copy queued: got %d, want 1", got)
	}
	copied := s.NewBatch(s.NewWorker())
	if st := s.Next(copied, true, nil); st != Run || len(copied.Items) != 1 || copied.Items[0].Attempt != 2 {
		t.Fatalf("Next: got %v with %d items, want Run with the copy at attempt 2", st, len(copied.Items))
	}
	s.Release(copied)
	p.Advance()
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding once the copy finished, the hung call still running: got %d, want 0", got)
	}
	if next, _ := p.Next(); next != 1 {
		t.Fatalf("frontier: got %d, want 1 (the copy finished)", next)
	}
	s.EndCall(w)
	if got := s.Settle(b, []Outcome{{Verdict: Return}}); got != 0 { // the hung call returns, failed (past its timeout)
		t.Fatalf("Settle of the hung call's batch: got %d finished, want 0 (its copy finished)", got)
	}
	p.Advance()
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding once the hung call returned: got %d, want 0", got)
	}
}

// TestWaitingItemsSnapshot: WaitingItems copies a held head's offset and attempt
// under the scheduler's lock. Once Unhold lets the lane go, a worker may
// take the item and charge it another attempt while the owner is still
// writing the snapshot into its commit metadata (run with -race: reading
// the item itself there was a data race).
func TestWaitingItemsSnapshot(t *testing.T) {
	s, p, b, _ := oneItemRunning(t)
	w := b.w
	it := b.Items[0]
	it.Attempt++ // a worker charging the failed attempt, then holding the lane
	s.Settle(b, []Outcome{{Verdict: Hold}})
	held := s.WaitingItems(p, nil)
	if len(held) != 1 || held[0].Item != it || held[0].Offset != 0 || held[0].Attempt != 2 {
		t.Fatalf("WaitingItems: got %+v, want one entry for offset 0 at attempt 2", held)
	}
	if !s.Unhold(it, false) {
		t.Fatal("Unhold: got false, want the lane let go")
	}
	done := make(chan struct{})
	go func() { // the retry runs and fails again
		defer close(done)
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st == Run {
			b.Items[0].Attempt++
			s.Settle(b, []Outcome{{Verdict: Hold}})
		}
	}()
	if got := held[0].Attempt; got != 2 { // the owner writing its metadata meanwhile
		t.Errorf("snapshot attempt: got %d, want 2", got)
	}
	<-done
}

// TestActsApplyToOneCall: CancelCall, Orphan and Running act on the call
// they are given only while the worker is still in it. A watchdog that
// judged a call late and acts after it returned must not cancel, give up
// on or report the worker's next call, even one on the same batch (a
// split retry's next half).
func TestActsApplyToOneCall(t *testing.T) {
	tests := []struct {
		name  string
		calls int  // calls begun on the running batch; the act names the first
		ended bool // the last call ended
		want  bool // the act applies
	}{
		{"in the call", 1, false, true},
		{"call ended", 1, true, false},
		{"next call begun", 2, false, false},
		{"next call ended", 2, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 100})
			p := s.NewPartition(16)
			var off int64
			feed(t, p, &off, 1, 2)
			w := s.NewWorker()
			ctx := s.WithCancel(context.Background(), w)
			b := s.NewBatch(w)
			if st := s.Next(b, true, nil); st != Run {
				t.Fatalf("Next: got %v, want Run", st)
			}
			var judged uint64
			for i := range tt.calls {
				call := s.BeginCall(w, nil)
				if i == 0 {
					judged = call
				}
				if i < tt.calls-1 || tt.ended {
					s.EndCall(w)
				}
			}
			if _, _, n := s.Running(w, judged); (n > 0) != tt.want {
				t.Errorf("Running: got %d items, want any: %v", n, tt.want)
			}
			cause := errors.New("late")
			if got := s.CancelCall(w, judged, cause); got != tt.want {
				t.Errorf("CancelCall: got %v, want %v", got, tt.want)
			}
			if got := ctx.Err() != nil; got != tt.want {
				t.Errorf("context cancelled: got %v, want %v", got, tt.want)
			}
			n := s.Orphan(w, judged)
			if (n > 0) != tt.want || b.Orphaned() != tt.want {
				t.Errorf("Orphan: got %d items, orphaned %v; want any and orphaned: %v", n, b.Orphaned(), tt.want)
			}
		})
	}
}

// TestEndCallWaitsForAct: a worker ending a call while an act on it is
// under way waits until the act is over, so that it sees what the act did
// (whether its batch was orphaned); with no act under way it does not
// wait for the scheduler's lock.
func TestEndCallWaitsForAct(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100})
	w := s.NewWorker()
	call := s.BeginCall(w, nil)
	if !s.lockCall(w, call) { // an act, between its look at the call and its end
		t.Fatal("lockCall: got false, want the worker in the call")
	}
	ended := make(chan struct{})
	go func() {
		s.EndCall(w)
		close(ended)
	}()
	select {
	case <-ended:
		t.Fatal("EndCall returned while an act on the call was under way")
	case <-time.After(50 * time.Millisecond):
	}
	s.unlockCall(w)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("EndCall did not return after the act ended")
	}

	s.BeginCall(w, nil)
	s.mu.Lock() // held by something other than an act on w's call
	defer s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.EndCall(w)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("EndCall waited for the lock with no act under way")
	}
}

// TestSettleRevokedFinishesDone (invariant 5: a graceful handoff repeats
// nothing): a batch that failed in part while its partition was revoked
// finishes the items Do handled, so that the final commit passes them; a
// failed item is handed to Options.Hold (which lets it go: it would wait
// for a timer) and its later lane mates are abandoned, never requeued, and
// the failed one is noted at its attempt for the final commit.
func TestSettleRevokedFinishesDone(t *testing.T) {
	held := 0
	var s *sched
	s = New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, Hold: func(it *Item[msg, int], _ Outcome) {
		held++
		if s.Waits(it) {
			t.Errorf("Waits(offset %d): got true, want false (its partition is revoked)", it.Offset())
		}
	}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 2, 3) // offsets 0..3
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 4 {
		t.Fatalf("Next: got %v with %d items, want Run with 4", st, len(b.Items))
	}
	if dropped, abandoned := p.Revoke(); dropped+abandoned != 0 {
		t.Fatalf("Revoke: got %d dropped, %d abandoned, want none (all running)", dropped, abandoned)
	}
	p.Drain()
	out := make([]Outcome, len(b.Items))
	for i, it := range b.Items {
		if it.Msg.seq == 1 { // lane 2's first item fails; offset 2, behind it, came back done
			out[i] = Outcome{Verdict: Hold}
		}
	}
	if n := s.Settle(b, out); n != 2 {
		t.Fatalf("Settle finished %d items, want 2 (offsets 0 and 3)", n)
	}
	p.Advance()
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding after Settle and Advance: got %d, want 0", got)
	}
	next, ranges, _ := p.Finished(nil)
	if next != 1 || len(ranges) != 1 || ranges[0].Start != 3 || ranges[0].End != 4 {
		t.Fatalf("frontier and finished ranges: got %d %v, want 1 [{3 4}] (offset 0 and 3 done, 1 failed, 2 behind it)", next, ranges)
	}
	if held != 1 {
		t.Fatalf("Hold told of %d items, want 1 (offset 1)", held)
	}
	drained := s.DrainedWaiting(p, nil)
	if len(drained) != 1 || drained[0].Offset != 1 {
		t.Fatalf("DrainedWaiting: got %v, want offset 1 only", drained)
	}
	if _, got := p.Unsettled(); got != 2 {
		t.Fatalf("AbandonedInDrain: got %d, want 2 (offsets 1 and 2)", got)
	}
}

// TestFinishingOutlivesRevoke: a held item marked Finishing (its dead
// letter is being written) stays outstanding through a revoke; Unhold then
// finishes it (finished) or abandons it, so that the drain waits for it and
// its final frontier passes it once finished. The lanes' other items are
// dropped as before.
func TestFinishingOutlivesRevoke(t *testing.T) {
	var held []*Item[msg, int]
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, Hold: func(it *Item[msg, int], _ Outcome) { held = append(held, it) }})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 1) // offsets 0 and 2 in lane 1, 1 in lane 2
	w := s.NewWorker()
	b := s.NewBatch(w)
	s.Next(b, true, nil)
	out := make([]Outcome, len(b.Items))
	for i, it := range b.Items {
		if it.Msg.seq != 2 {
			out[i].Verdict = Hold
		}
	}
	s.Settle(b, out)
	if len(held) != 2 {
		t.Fatalf("held: got %d items, want 2 (offsets 0 and 1)", len(held))
	}
	for _, it := range held {
		if !s.Finishing(it) {
			t.Fatalf("Finishing(offset %d): got false, want true", it.Offset())
		}
	}
	dropped, abandoned := p.Revoke()
	if dropped != 1 || abandoned != 0 {
		t.Fatalf("Revoke: got %d dropped, %d abandoned, want 1 and 0 (offset 2; 0 and 1 are finishing)", dropped, abandoned)
	}
	p.Drain()
	if got := p.Outstanding(); got != 2 {
		t.Fatalf("Outstanding after Revoke: got %d, want 2 (offsets 0 and 1)", got)
	}
	if !s.Finishing(held[0]) {
		t.Fatal("Finishing after the revoke: got false, want true (still kept)")
	}
	if !s.Unhold(held[0], true) || !s.Unhold(held[1], false) {
		t.Fatal("Unhold after the revoke: got false, want true (offset 0 finished, 1 abandoned)")
	}
	if s.Unhold(held[0], true) || s.Unhold(held[1], false) {
		t.Fatal("second Unhold: got true, want false")
	}
	p.Advance()
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding after Unhold and Advance: got %d, want 0", got)
	}
	next, ranges, _ := p.Finished(nil)
	if next != 1 || len(ranges) != 0 {
		t.Fatalf("frontier and finished ranges: got %d %v, want 1 [] (offset 0 finished, 1 abandoned, 2 dropped)", next, ranges)
	}
}

// TestSettleListsChargedLaneMates: an item charged an attempt that goes
// back behind an earlier failed item of its lane (Do named both) is listed
// by WaitingItems at its attempt, like the held head, so that a new owner
// goes on at that attempt rather than at 1.
func TestSettleListsChargedLaneMates(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) {}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 1, 1) // offsets 0..2, one lane
	w := s.NewWorker()
	b := s.NewBatch(w)
	s.Next(b, true, nil)
	out := make([]Outcome, len(b.Items))
	for i, it := range b.Items {
		if it.Msg.seq != 2 { // offsets 0 and 1 fail, charged as merge charges them
			it.Attempt++
			out[i].Verdict = Hold
		}
	}
	s.Settle(b, out)
	got := map[int64]int{}
	for _, wi := range s.WaitingItems(p, nil) {
		got[wi.Offset] = wi.Attempt
	}
	if want := map[int64]int{0: 2, 1: 2}; !maps.Equal(got, want) {
		t.Fatalf("WaitingItems: got %v, want %v (offset 2, never charged, is not listed)", got, want)
	}
}

// TestHeldKeptUntilSettled: an item Settle holds stays outstanding through
// a revoke that comes before Options.Hold has settled it, so that a hook
// on its way to a write (Finishing) still finishes it in the drain, and
// one that would wait for a timer (Waits) lets it go then.
func TestHeldKeptUntilSettled(t *testing.T) {
	for _, finishing := range []bool{true, false} {
		s, p, b, held := oneItemRunning(t)
		s.Settle(b, []Outcome{{Verdict: Hold}})
		p.Revoke() // before the hook acted on it
		p.Drain()
		if got := p.Outstanding(); got != 1 {
			t.Fatalf("finishing %v: Outstanding after the revoke: got %d, want 1 (its hold is not settled)", finishing, got)
		}
		want := int64(0) // frontier
		if finishing {
			if !s.Finishing(*held) || !s.Unhold(*held, true) {
				t.Fatal("Finishing and Unhold after the revoke: got false, want true")
			}
			want = 1
		} else if s.Waits(*held) {
			t.Fatal("Waits after the revoke: got true, want false")
		}
		p.Advance()
		if got := p.Outstanding(); got != 0 {
			t.Fatalf("finishing %v: Outstanding after Advance: got %d, want 0", finishing, got)
		}
		if _, got := p.Unsettled(); got != 1-want {
			t.Fatalf("finishing %v: AbandonedInDrain: got %d, want %d", finishing, got, 1-want)
		}
		if next, _ := p.Next(); next != want {
			t.Fatalf("finishing %v: frontier: got %d, want %d", finishing, next, want)
		}
	}
}

// TestUnchargeAfterRevoke: an item that failed in its partition's drain
// and is then uncharged (the failure came during an outage) is listed for
// the final commit at its attempt before the failure.
func TestUnchargeAfterRevoke(t *testing.T) {
	s, p, b, held := oneItemRunning(t)
	p.Revoke()
	b.Items[0].Attempt++ // charged, as merge charges a failure
	s.Settle(b, []Outcome{{Verdict: Hold}})
	s.Uncharge(*held)
	s.Waits(*held)
	drained := s.DrainedWaiting(p, nil)
	if len(drained) != 1 || drained[0].Attempt != 1 {
		t.Fatalf("DrainedWaiting: got %+v, want offset 0 at attempt 1", drained)
	}
}

// oneItemRunning is a scheduler with one partition whose one item runs in
// a batch; *held is the item once Options.Hold has been told of it.
func oneItemRunning(t *testing.T) (*sched, *Partition[msg, int], *Batch[msg, int], **Item[msg, int]) {
	t.Helper()
	held := new(*Item[msg, int])
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, Hold: func(it *Item[msg, int], _ Outcome) { *held = it }})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1)
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 1 {
		t.Fatalf("Next: got %v with %d items, want Run with 1", st, len(b.Items))
	}
	return s, p, b, held
}
