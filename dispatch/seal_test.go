package dispatch

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestSealTakesNothingBack: once a revoked partition is sealed (its drain
// gave up on a call), the items that call finishes are not taken back:
// whoever ends the batch is told how many were (the other partition's
// only), and the final Advance moves the frontier over what finished
// before the seal only. The same whichever way the batch ends: Release
// (the call succeeded), Settle (it named no item: all done), Finish (a
// split half that succeeded).
func TestSealTakesNothingBack(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(s *sched, b *Batch[msg, int]) int // ends b, all its items done; returns how many were taken back
	}{
		{"Release", func(s *sched, b *Batch[msg, int]) int { s.Release(b); return b.Taken() }},
		{"Settle", func(s *sched, b *Batch[msg, int]) int { return s.Settle(b, make([]Outcome, len(b.Items))) }},
		{"Finish", func(s *sched, b *Batch[msg, int]) int {
			n, ok := s.Finish(b, 0, len(b.Items))
			if !ok {
				t.Fatal("Finish: got not ok, want ok (nothing orphaned)")
			}
			out := make([]Outcome, len(b.Items))
			for i := range out {
				out[i].Verdict = Finished
			}
			s.Settle(b, out)
			return n
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := New[msg, int](Options[msg, int]{Size: 2, MaxInFlight: 100})
			p, other := s.NewPartition(16), s.NewPartition(16)
			var off, otherOff int64
			early, late := s.NewBatch(s.NewWorker()), s.NewBatch(s.NewWorker())
			feed(t, p, &off, 1, 2) // offsets 0 and 1: finished before the seal
			if st := s.Next(early, true, nil); st != Run || len(early.Items) != 2 {
				t.Fatalf("Next: got %v with %d items, want Run with 2", st, len(early.Items))
			}
			feed(t, p, &off, 3) // offset 2: still in its call at the seal
			feed(t, other, &otherOff, 5)
			if st := s.Next(late, true, nil); st != Run || len(late.Items) != 2 {
				t.Fatalf("Next: got %v with %d items, want Run with 2", st, len(late.Items))
			}
			p.Revoke()
			p.Drain()
			if got := tt.end(s, early); got != 2 {
				t.Fatalf("the batch ended before the seal: got %d taken back, want 2", got)
			}
			p.Seal()
			if got := tt.end(s, late); got != 1 {
				t.Fatalf("the batch ended after the seal: got %d taken back, want 1 (the other partition's)", got)
			}
			if got := p.Advance(); got != 2 {
				t.Fatalf("the final Advance: got %d passed, want 2 (offsets 0 and 1)", got)
			}
			if next, _ := p.Next(); next != 2 {
				t.Fatalf("final frontier: got %d, want 2 (below the late item)", next)
			}
			if got := other.Advance(); got != 1 {
				t.Fatalf("the other partition's Advance: got %d passed, want 1", got)
			}
		})
	}
}

// TestWriteFinishedAfterSealNotTaken: an item whose write finishes it
// (FinishHeld for a held one on its way to a dead letter or a park,
// Complete for one taken with Track) is reported taken back while its
// revoked partition drains, and not once its owner sealed it: the caller
// then knows its owner did not count it.
func TestWriteFinishedAfterSealNotTaken(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		var held []*Item[msg, int]
		s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100, Hold: func(it *Item[msg, int], _ Outcome) { held = append(held, it) }})
		p := s.NewPartition(16)
		var off int64
		feed(t, p, &off, 1)
		b := s.NewBatch(s.NewWorker())
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v, want Run", st)
		}
		s.Settle(b, []Outcome{{Verdict: Hold}})
		if len(held) != 1 || !s.Finishing(held[0]) {
			t.Fatalf("held %d items, Finishing: want 1, true", len(held))
		}
		tracked := p.Alloc()
		if err := p.Track(tracked, off, 1); err != nil {
			t.Fatal(err)
		}
		p.Revoke()
		p.Drain()
		if sealed {
			p.Seal()
		}
		if got := s.FinishHeld(held[0]); got != !sealed {
			t.Errorf("sealed %v: FinishHeld got %v, want %v", sealed, got, !sealed)
		}
		if got := p.Complete(tracked); got != !sealed {
			t.Errorf("sealed %v: Complete got %v, want %v", sealed, got, !sealed)
		}
	}
}

// TestSealCountsEachItemOnce: calls end (succeed, or fail and are
// abandoned) while the owner of their revoked partition seals it: each
// item is then either taken back by the final Advance, and reported taken
// to the call that finished it, or counted by Unsettled, outstanding (given
// up on) or abandoned in the drain; never two of these, never none.
func TestSealCountsEachItemOnce(t *testing.T) {
	const n, rounds = 8, 20000
	for round := range rounds {
		s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100})
		p := s.NewPartition(16)
		var off int64
		lanes := make([]int, n)
		for i := range lanes {
			lanes[i] = i
		}
		feed(t, p, &off, lanes...)
		batches := make([]*Batch[msg, int], n)
		for i := range batches {
			batches[i] = s.NewBatch(s.NewWorker())
			if st := s.Next(batches[i], true, nil); st != Run || len(batches[i].Items) != 1 {
				t.Fatalf("Next: got %v with %d items, want Run with 1", st, len(batches[i].Items))
			}
		}
		p.Revoke()
		p.Drain()
		var reported atomic.Int64 // taken back, as the calls' ends were told
		var wg sync.WaitGroup
		for i, b := range batches {
			wg.Go(func() {
				if i%2 == 0 {
					s.Release(b)
					reported.Add(int64(b.Taken()))
				} else { // fails: abandoned, its partition being revoked
					reported.Add(int64(s.Settle(b, []Outcome{{Verdict: Return}})))
				}
			})
		}
		taken := 0
		count := func(*Item[msg, int]) { taken++ }
		for range round % 4 { // some rounds take some back before the seal
			p.AdvanceFunc(count)
		}
		p.Seal()
		p.AdvanceFunc(count)
		late, inDrain := p.Unsettled()
		wg.Wait()
		if got := int64(taken); got != reported.Load() {
			t.Fatalf("round %d: taken back %d, but the calls were told %d", round, got, reported.Load())
		}
		if sum := int64(taken) + late + inDrain; sum != n {
			t.Fatalf("round %d: taken back %d + outstanding %d + abandoned in the drain %d = %d, want %d", round, taken, late, inDrain, sum, n)
		}
	}
}

// TestUnsettledSigned: the two counts in one word read back as added,
// the outstanding one signed, so that a count taken below zero reads as
// negative (a drain ends) and does not borrow from the abandoned one.
func TestUnsettledSigned(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		outstanding, abandons int64
	}{
		{"none", 0, 0},
		{"both", 5, 3},
		{"outstanding below zero", -1, 0},
		{"below zero beside abandoned", -2, 7},
		{"many", 1<<31 - 1, 1 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100})
			p := s.NewPartition(1)
			p.unsettled.Add(tt.outstanding)
			p.unsettled.Add(tt.abandons * abandonedUnit)
			if out, ab := p.Unsettled(); out != tt.outstanding || ab != tt.abandons {
				t.Fatalf("Unsettled: got %d outstanding, %d abandoned; want %d and %d", out, ab, tt.outstanding, tt.abandons)
			}
		})
	}
}
