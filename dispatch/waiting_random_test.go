package dispatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestWaitingItemsAgainstModel: random feeds, batches
// (filled, run, released, settled with Done/Return/Hold, split with
// Finish), Unhold, Uncharge, AddHeld and Orphan against a model of which
// offsets must be listed (held once or arrived past attempt 1, not finished)
// and at which attempt.
func TestWaitingItemsAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		waitingModelRun(t, seed)
		if t.Failed() {
			return
		}
	}
}

type waitingOff struct {
	noted, done bool
	attempt     int
}

func waitingModelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	var held []*Item[msg, int]
	size := 1 + rng.IntN(4)
	s := New[msg, int](Options[msg, int]{Size: size, MaxInFlight: 1 << 20, Window: 1 + rng.IntN(4),
		Hold: func(it *Item[msg, int], o Outcome) { held = append(held, it) }})
	p := s.NewPartition(64)
	model := map[int]*waitingOff{}
	var off int64
	type wk struct {
		w       *Worker[msg, int]
		b       *Batch[msg, int]
		running bool
	}
	wks := make([]*wk, 3)
	for i := range wks {
		w := s.NewWorker()
		wks[i] = &wk{w: w, b: s.NewBatch(w)}
	}
	fail := func(step int, format string, a ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, a...))
	}
	for step := 0; step < 400; step++ {
		switch op := rng.IntN(10); {
		case op <= 1: // feed
			for range 1 + rng.IntN(4) {
				it := p.Alloc()
				lane := rng.IntN(5)
				it.Msg, it.Lane = msg{lane, int(off)}, uint64(lane)
				m := &waitingOff{}
				if rng.IntN(6) == 0 {
					if err := p.AddHeld(it, off, 1, Outcome{}); err != nil {
						t.Fatal(err)
					}
					it.Attempt = 1 + rng.IntN(4)
					m.noted, m.attempt = true, it.Attempt
				} else if err := p.Add(it, off, 1); err != nil {
					t.Fatal(err)
				}
				model[int(off)] = m
				off++
			}
			p.Flush()
		case op <= 3: // Next
			k := wks[rng.IntN(len(wks))]
			if k.running {
				continue
			}
			if st := s.Next(k.b, rng.IntN(2) == 0, nil); st == Run {
				k.running = true
			}
		case op <= 5: // end a running batch
			k := wks[rng.IntN(len(wks))]
			if !k.running {
				continue
			}
			b := k.b
			k.running = false
			switch rng.IntN(4) {
			case 0:
				for _, it := range b.Items {
					model[it.Msg.seq].done = true
				}
				if rng.IntN(2) == 0 {
					s.Release(b)
					break
				}
				nb := s.NewBatch(k.w) // carries on with b's lanes (continueLocked)
				k.b = nb
				k.running = s.Next(nb, rng.IntN(2) == 0, b) == Run
			case 1: // orphan (its items' copies run at attempt+1)
				call := s.BeginCall(k.w, b.Items)
				s.Orphan(k.w, call)
				s.EndCall(k.w)
				for _, it := range b.Items {
					m := model[it.Msg.seq]
					m.noted, m.attempt = true, it.Attempt+1
				}
				out := make([]Outcome, len(b.Items))
				s.Settle(b, out)
				p.Advance()
			default:
				s.SortByLane(b)
				out := make([]Outcome, len(b.Items))
				early := 0
				if len(b.Items) > 1 && rng.IntN(2) == 0 {
					early = 1 + rng.IntN(len(b.Items)-1)
					for i := range early {
						model[b.Items[i].Msg.seq].done = true
						out[i].Verdict = Finished
					}
					s.Finish(b, 0, early)
					if rng.IntN(2) == 0 {
						p.Advance() // recycled while b runs
					}
				}
				returning := map[uint64]bool{}
				for i := early; i < len(b.Items); i++ {
					it := b.Items[i]
					m := model[it.Msg.seq]
					if returning[it.Lane] {
						out[i].Verdict = Done // goes back anyway
						continue
					}
					switch rng.IntN(3) {
					case 0:
						out[i].Verdict = Done
						m.done = true
					case 1:
						out[i].Verdict = Return
						returning[it.Lane] = true
					default:
						if rng.IntN(2) == 0 {
							it.Attempt++
						}
						out[i].Verdict = Hold
						returning[it.Lane] = true
						m.noted, m.attempt = true, it.Attempt
					}
				}
				s.Settle(b, out)
			}
		case op == 6: // Unhold
			if len(held) == 0 {
				continue
			}
			i := rng.IntN(len(held))
			it := held[i]
			held = append(held[:i], held[i+1:]...)
			fin := rng.IntN(3) == 0
			seq := it.Msg.seq
			if s.Unhold(it, fin) && fin {
				model[seq].done = true
			}
		case op == 7: // Uncharge a held item
			if len(held) == 0 {
				continue
			}
			it := held[rng.IntN(len(held))]
			if it.Attempt > 1 {
				s.Uncharge(it)
				if m := model[it.Msg.seq]; m.noted {
					m.attempt = it.Attempt
				}
			}
		default:
			p.Advance()
		}
		// check
		got := map[int]WaitingItem[msg, int]{}
		for _, w := range s.WaitingItems(p, nil) {
			seq := int(w.Offset)
			if _, dup := got[seq]; dup {
				fail(step, "offset %d listed twice", seq)
			}
			got[seq] = w
			m := model[seq]
			if m == nil || m.done || !m.noted {
				fail(step, "offset %d listed (attempt %d) but model %+v", seq, w.Attempt, m)
			}
			if w.Attempt != m.attempt {
				fail(step, "offset %d listed at attempt %d, model %d", seq, w.Attempt, m.attempt)
			}
			if w.Item.Msg.seq != seq {
				fail(step, "offset %d's item holds message %d", seq, w.Item.Msg.seq)
			}
		}
		for seq, m := range model {
			if m.noted && !m.done {
				if _, ok := got[seq]; !ok {
					fail(step, "offset %d (attempt %d) unfinished, not listed", seq, m.attempt)
				}
			}
		}
		if n := p.waiting.Load(); n < int64(len(got)) {
			fail(step, "p.waiting %d below listed %d", n, len(got))
		}
		for _, w := range got {
			isHeld := false
			for _, h := range held {
				isHeld = isHeld || h == w.Item
			}
			if w.Held != isHeld {
				fail(step, "offset %d Held %v, held list says %v", w.Offset, w.Held, isHeld)
			}
		}
	}
	// Drain: everything finishes; nothing stays counted as waiting.
	for range 10000 {
		for _, k := range wks {
			if k.running {
				s.Release(k.b)
				k.running = false
			}
		}
		for _, it := range held {
			s.Unhold(it, true)
		}
		held = held[:0]
		p.Advance()
		if p.Unfinished() == 0 {
			break
		}
		if st := s.Next(wks[0].b, true, nil); st == Run {
			wks[0].running = true
		}
	}
	if p.Unfinished() != 0 {
		t.Fatalf("seed %d: %d unfinished after the drain", seed, p.Unfinished())
	}
	if n := p.waiting.Load(); n != 0 {
		t.Fatalf("seed %d: p.waiting %d after every item finished and was recycled", seed, n)
	}
}

// TestWaitingItemsConcurrent (run with -race): workers
// run, split (Finish), fail and hold batches while the owner feeds,
// advances and lists WaitingItems; holds are let go from other goroutines.
func TestWaitingItemsConcurrent(t *testing.T) {
	var s *Scheduler[msg, int]
	s = New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 256, Window: 4,
		Hold: func(it *Item[msg, int], o Outcome) {
			if it.Attempt > 2 && it.Attempt%2 == 1 {
				s.Uncharge(it)
			}
			go s.Unhold(it, it.Attempt > 4)
		}})
	p := s.NewPartition(64)
	stop := make(chan struct{})
	done := make(chan struct{})
	for i := range 4 {
		w := s.NewWorker()
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			b := s.NewBatch(w)
			for {
				select {
				case <-stop:
					s.Discard(b)
					return
				default:
				}
				switch s.Next(b, true, nil) {
				case Run:
				default:
					select {
					case <-w.Wake():
					case <-stop:
					}
					continue
				}
				if rng.IntN(3) > 0 {
					s.Release(b)
					continue
				}
				s.SortByLane(b)
				out := make([]Outcome, len(b.Items))
				from := 0
				if len(b.Items) > 1 && rng.IntN(2) == 0 {
					from = 1
					s.Finish(b, 0, 1)
					out[0].Verdict = Finished
				}
				for i := from; i < len(b.Items); i++ {
					if rng.IntN(2) == 0 {
						b.Items[i].Attempt++
						out[i].Verdict = Hold
					}
				}
				s.Settle(b, out)
			}
		}()
	}
	var off int64
	for range 3000 {
		for range 4 {
			it := p.Alloc()
			it.Msg, it.Lane = msg{int(off % 7), int(off)}, uint64(off%7)
			if err := p.Add(it, off, 1); err != nil {
				t.Fatal(err)
			}
			off++
		}
		p.Flush()
		p.Advance()
		for _, w := range s.WaitingItems(p, nil) {
			_ = w.Offset
		}
		for p.Unfinished() > 128 {
			<-p.Wake()
			p.Advance()
		}
	}
	close(stop)
	s.Stop()
	for range 4 {
		<-done
	}
}
