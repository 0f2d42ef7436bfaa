package dispatch

import "testing"

// woken reports whether p's wake channel was signalled, and clears it.
func woken(p *Partition[msg, int]) bool {
	select {
	case <-p.Wake():
		return true
	default:
		return false
	}
}

// busy gives each partition as many items in flight as if it had a
// backlog of its own in the scheduler (at least its share of Backlog), so
// that a test of the wakes can have it paced while the ready items are
// another partition's.
func busy(ps ...*Partition[msg, int]) {
	for _, p := range ps {
		p.inflight = 1 << 20
	}
}

func TestPacedByReadyBacklog(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 2, Backlog: 4, Window: 1})
	p, q := s.NewPartition(16), s.NewPartition(16)
	var off, qoff int64
	feed(t, p, &off, 1, 2, 3)
	if p.ListIfPaced() {
		t.Fatalf("3 ready, Backlog 4: got paced, want not")
	}
	feed(t, q, &qoff, 7)
	// The backlog is every partition's: 4 ready now, q's one included.
	// p, with 3 in flight, is past its share of the backlog (4 over 2
	// partitions) and paced; q, with 1, is under it and not.
	if !p.ListIfPaced() || q.ListIfPaced() {
		t.Fatalf("4 ready, Backlog 4: got paced %v and %v, want p paced (3 in flight), q not (1, under its share of 2)", p.ListIfPaced(), q.ListIfPaced())
	}
	woken(p)
	woken(q)
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 2 {
		t.Fatalf("Next: got %v with %d items, want Run with 2", st, len(b.Items))
	}
	// 2 left ready: below the mark, the listed partition hears of it.
	if !woken(p) || woken(q) {
		t.Fatalf("backlog drained to 2 of Backlog 4: want p woken, not q (never listed)")
	}
	if p.ListIfPaced() {
		t.Fatalf("2 ready, Backlog 4: got paced, want not")
	}
}

// Items queued behind a lane's running head are not ready: a stuck lane's
// backlog never paces anyone.
func TestPacedIgnoresItemsBehindRunningLane(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, Backlog: 4, Window: 1})
	p := s.NewPartition(64)
	var off int64
	feed(t, p, &off, 1)
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	feed(t, p, &off, 1, 1, 1, 1, 1, 1, 1, 1) // behind lane 1's running head
	if p.ListIfPaced() {
		t.Fatalf("8 items queued behind a running lane, none ready: got paced, want not")
	}
	feed(t, p, &off, 2, 3, 4, 5)
	if !p.ListIfPaced() {
		t.Fatalf("4 ready items of other lanes, Backlog 4: got not paced, want paced")
	}
}

func TestPacedNeverWithoutBacklogOrAfterStop(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, Window: 1})
	p := s.NewPartition(64)
	var off int64
	feed(t, p, &off, 1, 2, 3, 4, 5, 6, 7, 8)
	if p.ListIfPaced() {
		t.Fatalf("Backlog 0: got paced, want never")
	}

	s = New[msg, int](Options[msg, int]{Size: 1, Backlog: 2, Window: 1})
	p = s.NewPartition(64)
	off = 0
	feed(t, p, &off, 1, 2, 3)
	if !p.ListIfPaced() {
		t.Fatalf("3 ready, Backlog 2: got not paced, want paced")
	}
	woken(p)
	s.Stop()
	if !woken(p) {
		t.Fatalf("Stop: want the paced partition woken")
	}
	if p.ListIfPaced() {
		t.Fatalf("after Stop: got paced, want not")
	}
}

func TestPacedWokenByRevoke(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, Backlog: 3, Window: 1})
	p, q := s.NewPartition(64), s.NewPartition(64)
	var off, qoff int64
	feed(t, p, &off, 1, 2)
	feed(t, q, &qoff, 3, 4)
	if !q.ListIfPaced() {
		t.Fatalf("4 ready, Backlog 3: got not paced, want paced")
	}
	woken(q)
	if !p.ListIfPaced() {
		t.Fatalf("4 ready, Backlog 3: got p not paced, want paced")
	}
	p.Revoke() // its 2 ready items are dropped: 2 left
	if !woken(q) {
		t.Fatalf("revoke dropped the backlog below the mark: want q woken")
	}
	if q.ListIfPaced() {
		t.Fatalf("2 ready, Backlog 3: got paced, want not")
	}
	if len(s.paced) != 0 || p.inPaced.Load() {
		t.Fatalf("after the revoke: got %d partitions paced (p listed: %v), want none", len(s.paced), p.inPaced.Load())
	}
}

// A take that leaves the backlog at or above the mark wakes no one; one
// that drains it wakes the paced partitions oldest first, one per Window of
// shortfall, so that they do not all push a burst at once.
func TestPacedWakesByShortfall(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, Backlog: 4, Window: 2})
	src := s.NewPartition(64)
	var off int64
	feed(t, src, &off, 1, 2, 3, 4, 5, 6, 7)
	paced := []*Partition[msg, int]{s.NewPartition(64), s.NewPartition(64), s.NewPartition(64)}
	busy(paced...)
	for i, p := range paced {
		if !p.ListIfPaced() {
			t.Fatalf("partition %d: 7 ready, Backlog 4: got not paced, want paced", i)
		}
		woken(p)
	}
	w := s.NewWorker()
	next := func(want int) {
		t.Helper()
		b := s.NewBatch(w)
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v, want Run", st)
		}
		if s.readyItems != want {
			t.Fatalf("ready after the take: got %d, want %d", s.readyItems, want)
		}
	}
	wake := func() []bool {
		var got []bool
		for _, p := range paced {
			got = append(got, woken(p))
		}
		return got
	}
	for ready := 6; ready >= 4; ready-- {
		next(ready)
		if got := wake(); got[0] || got[1] || got[2] {
			t.Fatalf("%d ready, Backlog 4: got woken %v, want none", ready, got)
		}
	}
	next(3) // 1 short: one Window's worth, the oldest paced
	if got := wake(); !got[0] || got[1] || got[2] {
		t.Fatalf("1 short of Backlog 4, Window 2: got woken %v, want [true false false]", got)
	}
	next(2) // 2 short: one Window, the next oldest
	if got := wake(); got[0] || !got[1] || got[2] {
		t.Fatalf("2 short of Backlog 4, Window 2: got woken %v, want [false true false]", got)
	}
	next(1) // 3 short: two Windows' worth; one left to wake
	if got := wake(); got[0] || got[1] || !got[2] {
		t.Fatalf("3 short of Backlog 4, Window 2: got woken %v, want [false false true]", got)
	}
}

// Paced only reports: a partition that asked it is not listed, and a drain
// wakes only those that asked ListIfPaced.
func TestPacedListsNoOne(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, Backlog: 2, Window: 1})
	src, p, q := s.NewPartition(64), s.NewPartition(64), s.NewPartition(64)
	busy(p, q)
	var off int64
	feed(t, src, &off, 1, 2)
	if !p.Paced() {
		t.Fatalf("2 ready, Backlog 2: got not paced, want paced")
	}
	if !q.ListIfPaced() {
		t.Fatalf("2 ready, Backlog 2: got q not paced, want paced")
	}
	woken(p)
	woken(q)
	if got := len(s.paced); got != 1 {
		t.Fatalf("Paced asked by p, ListIfPaced by q: got %d listed, want 1 (q)", got)
	}
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	if woken(p) || !woken(q) {
		t.Fatalf("backlog drained below the mark: want q woken, not p")
	}
}

// A listed partition that asks again and finds the backlog below the mark
// before its wake comes is taken off the list (it goes on to dispatch
// without a wake), so that no later wake is spent on it while others
// wait; so is one that unlists itself (it cannot dispatch for now).
func TestListIfPacedUnlistsWhenNotPaced(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1, Backlog: 4, Window: 8})
	src, p, q := s.NewPartition(64), s.NewPartition(64), s.NewPartition(64)
	busy(p, q)
	var off int64
	feed(t, src, &off, 1, 2, 3, 4, 5)
	if !p.ListIfPaced() || !q.ListIfPaced() {
		t.Fatalf("5 ready, Backlog 4: want p and q paced")
	}
	woken(p)
	woken(q)
	b := s.NewBatch(s.NewWorker())
	for range 2 { // 3 ready: one short, one Window: p (the oldest) woken
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v, want Run", st)
		}
		s.Release(b)
	}
	if !woken(p) || woken(q) {
		t.Fatalf("1 short of Backlog 4, Window 8: want p woken, q not")
	}
	if q.ListIfPaced() {
		t.Fatalf("3 ready, Backlog 4: got q paced, want not")
	}
	if len(s.paced) != 0 || q.inPaced.Load() {
		t.Fatalf("q asked again below the mark: got %d listed (q: %v), want none", len(s.paced), q.inPaced.Load())
	}

	feed(t, src, &off, 6, 7) // 5 ready
	if !q.ListIfPaced() || !p.ListIfPaced() {
		t.Fatalf("5 ready, Backlog 4: want q and p paced")
	}
	woken(q)
	woken(p)
	q.UnlistPaced()
	for range 2 { // 3 ready: one wake, and q, the oldest, is off the list
		if st := s.Next(b, true, nil); st != Run {
			t.Fatalf("Next: got %v, want Run", st)
		}
		s.Release(b)
	}
	if woken(q) || !woken(p) {
		t.Fatalf("1 short of Backlog 4 after q unlisted itself: want p woken, q not")
	}
}

// A take that empties the backlog wakes every listed partition, however
// small the shortfall is in Windows: with nothing ready no later take
// would wake the rest, and a woken partition may push nothing.
func TestPacedWakesAllWhenBacklogEmpties(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 4, Backlog: 4, Window: 4})
	src := s.NewPartition(64)
	var off int64
	feed(t, src, &off, 1, 2, 3, 4)
	paced := []*Partition[msg, int]{s.NewPartition(64), s.NewPartition(64), s.NewPartition(64)}
	busy(paced...)
	for i, p := range paced {
		if !p.ListIfPaced() {
			t.Fatalf("partition %d: 4 ready, Backlog 4: got not paced, want paced", i)
		}
		woken(p)
	}
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 4 {
		t.Fatalf("Next: got %v with %d items, want Run with 4", st, len(b.Items))
	}
	for i, p := range paced {
		if !woken(p) {
			t.Fatalf("partition %d: backlog emptied (one Window short): got not woken, want every listed partition woken", i)
		}
	}
}
