package dispatch

import (
	"slices"
	"testing"
	"time"
)

// waitingOffsets is what WaitingItems lists for p, as "offset@attempt"
// (held ones marked "h"), sorted.
func waitingOffsets[M, T any](s *Scheduler[M, T], p *Partition[M, T]) []string {
	var out []string
	for _, w := range s.WaitingItems(p, nil) {
		h := ""
		if w.Held {
			h = "h"
		}
		out = append(out, string(rune('0'+w.Offset))+"@"+string(rune('0'+w.Attempt))+h)
	}
	slices.Sort(out)
	return out
}

// TestWaitingItemsUntilFinished: an item that failed is listed for the
// commit metadata from its hold until it finishes: held, then let go and
// queued behind busy workers, then running, then returned by a cancelled
// call; not once it finished and was recycled. A retry that came due but
// had not run yet was missing from the list, and a new owner started it
// at attempt 1 again.
func TestWaitingItemsUntilFinished(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) {}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2) // offset 0 on lane 1, offset 1 on lane 2
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || b.Items[0].Offset() != 0 {
		t.Fatalf("Next: got %v with %v, want Run with offset 0", st, seqsOf(b))
	}
	it := b.Items[0]
	var running *Batch[msg, int]
	it.Attempt++ // the worker charges the failed attempt
	s.Settle(b, []Outcome{{Verdict: Hold}})
	steps := []struct {
		name string
		act  func()
		want []string
	}{
		{"held", func() {}, []string{"0@2h"}},
		{"let go, queued", func() {
			if !s.Unhold(it, false) {
				t.Fatal("Unhold: got false, want the lane let go")
			}
		}, []string{"0@2"}},
		{"running", func() {
			// Offset 1 (lane 2) is older in the ready queue: it runs and
			// finishes first; then offset 0 runs.
			b := s.NewBatch(w)
			for st := s.Next(b, true, nil); b.Items[0] != it; st = s.Next(b, true, nil) {
				if st != Run {
					t.Fatalf("Next: got %v, want Run", st)
				}
				s.Release(b)
			}
			running = b
		}, []string{"0@2"}},
		{"returned by a cancelled call", func() {
			s.Settle(running, []Outcome{{Verdict: Return}})
		}, []string{"0@2"}},
		{"finished and recycled", func() {
			b := s.NewBatch(w)
			if st := s.Next(b, true, nil); st != Run || b.Items[0] != it {
				t.Fatalf("Next: got %v with %v, want Run with offset 0", st, seqsOf(b))
			}
			s.Release(b)
			p.Advance()
		}, nil},
	}
	for _, step := range steps {
		step.act()
		if got := waitingOffsets(s, p); !slices.Equal(got, step.want) {
			t.Fatalf("%s: WaitingItems got %v, want %v", step.name, got, step.want)
		}
	}
	if n := p.waiting.Load(); n != 0 {
		t.Fatalf("items counted as waiting after all finished: got %d, want 0", n)
	}
}

// arriveBehind adds offset 0 on lane 1, then offset 1 on lane 1 as a
// message a previous owner left waiting (AddHeld) at attempt, for delay,
// and pushes both.
func arriveBehind(t *testing.T, p *Partition[msg, int], attempt int, delay time.Duration) (first, behind *Item[msg, int]) {
	t.Helper()
	first = p.Alloc()
	first.Msg, first.Lane = msg{1, 0}, 1
	if err := p.Add(first, 0, 1); err != nil {
		t.Fatal(err)
	}
	behind = p.Alloc()
	behind.Msg, behind.Lane = msg{1, 1}, 1
	if err := p.AddHeld(behind, 1, 1, Outcome{Delay: delay}); err != nil {
		t.Fatal(err)
	}
	behind.Attempt = attempt
	p.Flush()
	return first, behind
}

// TestWaitingItemsArrivedBehind: a message a previous owner left waiting
// (AddHeld, at attempt 3) behind an unfinished earlier message of its lane
// is listed at its attempt while it waits its turn, not dropped from the
// next commit's metadata.
func TestWaitingItemsArrivedBehind(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) {}})
	p := s.NewPartition(16)
	arriveBehind(t, p, 3, 0)
	if got, want := waitingOffsets(s, p), []string{"1@3"}; !slices.Equal(got, want) {
		t.Fatalf("WaitingItems: got %v, want %v", got, want)
	}
}

// TestArrivedBehindRunsAfterItsLane: a message a previous owner left
// waiting (AddHeld) that arrives behind an unfinished earlier message of
// its lane is not held when it reaches the front: it runs straight after
// that message (README, "When messages fail", the one exception to the
// backoff a new owner keeps).
func TestArrivedBehindRunsAfterItsLane(t *testing.T) {
	holds := 0
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) { holds++ }})
	p := s.NewPartition(16)
	first, behind := arriveBehind(t, p, 2, time.Hour)
	w := s.NewWorker()
	for _, want := range []*Item[msg, int]{first, behind} {
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st != Run || b.Items[0] != want {
			t.Fatalf("Next: got %v with %v, want Run with offset %d", st, seqsOf(b), want.Offset())
		}
		s.Release(b)
	}
	if holds != 0 {
		t.Fatalf("holds: got %d, want 0 (it waited its turn instead)", holds)
	}
}

// TestWaitingCountAfterOrphan: an item with a waitAttempt whose call hangs
// for good (Orphan) stops counting as waiting: its copy counts instead,
// and once the copy finished nothing does, although the hung call never
// returns. WaitingItems walks the partition's lanes while the count is
// above zero.
func TestWaitingCountAfterOrphan(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) {}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1)
	hung, other := s.NewWorker(), s.NewWorker()
	b := s.NewBatch(hung)
	s.Next(b, true, nil)
	it := b.Items[0]
	it.Attempt++
	s.Settle(b, []Outcome{{Verdict: Hold}})
	s.Unhold(it, false)
	b = s.NewBatch(hung)
	if st := s.Next(b, true, nil); st != Run || b.Items[0] != it {
		t.Fatalf("Next: got %v with %v, want Run with the retried item", st, seqsOf(b))
	}
	call := s.BeginCall(hung, b.Items)
	if n := s.Orphan(hung, call); n != 1 {
		t.Fatalf("Orphan: got %d, want 1", n)
	}
	p.Advance() // the owner makes the copy, at attempt 3
	if got := waitingOffsets(s, p); !slices.Equal(got, []string{"0@3"}) {
		t.Fatalf("WaitingItems after the copy was made: got %v, want [0@3]", got)
	}
	c := s.NewBatch(other)
	if st := s.Next(c, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run with the copy", st)
	}
	s.Release(c)
	p.Advance()
	if n := p.waiting.Load(); n != 0 {
		t.Fatalf("items counted as waiting once the copy finished (the hung call still out): got %d, want 0", n)
	}
}

// TestWaitingItemsFirstFailure: WaitingItems, and DrainedWaiting after a
// revoke, list a failed item with its first failure, for the commit
// metadata, and a deferral that never failed with none; an item recycled
// and used again starts with none.
func TestWaitingItemsFirstFailure(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 2, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) {}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2) // offset 0 on lane 1, offset 1 on lane 2
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 2 {
		t.Fatalf("Next: got %v with %v, want Run with offsets 0 and 1", st, seqsOf(b))
	}
	first := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	for _, it := range b.Items {
		if it.Offset() == 0 { // fails; offset 1 is deferred
			it.Attempt++
			it.NoteFailure(first)
			it.NoteFailure(first.Add(time.Hour)) // a later failure does not move it
		}
	}
	s.Settle(b, []Outcome{{Verdict: Hold}, {Verdict: Hold}})
	firstOf := func(ws []WaitingItem[msg, int]) map[int64]time.Time {
		m := map[int64]time.Time{}
		for _, w := range ws {
			m[w.Offset] = w.FirstFailure
		}
		return m
	}
	if got := firstOf(s.WaitingItems(p, nil)); len(got) != 2 || !got[0].Equal(first) || !got[1].IsZero() {
		t.Fatalf("WaitingItems first failures: got %v, want offset 0 at %v, offset 1 none", got, first)
	}
	p.Revoke()
	if got := firstOf(s.DrainedWaiting(p, nil)); len(got) != 2 || !got[0].Equal(first) || !got[1].IsZero() {
		t.Fatalf("DrainedWaiting first failures: got %v, want offset 0 at %v, offset 1 none", got, first)
	}

	// Recycled with its first failure, then used again.
	q := s.NewPartition(16)
	off = 0
	it := feed(t, q, &off, 1)[0]
	it.NoteFailure(first)
	b = s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || b.Items[0] != it {
		t.Fatalf("Next: got %v with %v, want Run with offset 0", st, seqsOf(b))
	}
	s.Release(b)
	q.Advance()
	if again := feed(t, q, &off, 1)[0]; again != it || !again.FirstFailure().IsZero() {
		t.Fatalf("item added after the first finished: got %p first failure %v, want the recycled %p with none", again, again.FirstFailure(), it)
	}
}
