package dispatch

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// checkLanes checks the scheduler's counts against its lanes: readyItems
// is the sum of the queued items of the lanes on the ready queue, held is
// the number of blocked lanes, every lane's queue is in offset order, and
// no lane is left marked returning after a Settle.
func checkLanes(t *testing.T, s *sched, ps []*Partition[msg, int], seed uint64, step int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ready, held := 0, 0
	for _, p := range ps {
		if p.revoked {
			continue
		}
		p.lanes.each(func(l *lane[msg, int]) {
			if l.inReady {
				ready += l.n
			}
			if l.blocked {
				held++
			}
			if l.returning {
				t.Fatalf("seed %d step %d: lane %d left returning", seed, step, l.head.Msg.lane)
			}
			prev := -1
			for it := l.head; it != nil; it = it.next {
				if it.Msg.seq <= prev {
					t.Fatalf("seed %d step %d: lane %d queues offset %d after %d", seed, step, it.Msg.lane, it.Msg.seq, prev)
				}
				prev = it.Msg.seq
			}
		})
	}
	if s.readyItems != ready {
		t.Fatalf("seed %d step %d: readyItems got %d, want %d (the ready lanes' items)", seed, step, s.readyItems, ready)
	}
	if s.held != held {
		t.Fatalf("seed %d step %d: held got %d, want %d (the blocked lanes)", seed, step, s.held, held)
	}
}

// TestSettleRandomKeepsCounts drives batches of three workers over two
// partitions through random feeds, verdicts (Done, Return, Hold, and
// Finished through Finish), Unholds and revokes, and checks the
// scheduler's counts and lane order after every step (checkLanes).
func TestSettleRandomKeepsCounts(t *testing.T) {
	verdicts := []Verdict{Done, Done, Return, Hold, Finished}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 1))
		var holds []*Item[msg, int]
		s := New[msg, int](Options[msg, int]{Size: 1 + r.IntN(4), Window: 1 + r.IntN(3), MaxInFlight: 1000,
			Hold: func(it *Item[msg, int], _ Outcome) { holds = append(holds, it) }})
		ps := []*Partition[msg, int]{s.NewPartition(64), s.NewPartition(64)}
		offs := make([]int64, len(ps))
		ws := []*Worker[msg, int]{s.NewWorker(), s.NewWorker(), s.NewWorker()}
		running := make([]*Batch[msg, int], len(ws))
		for step := range 200 {
			switch k := r.IntN(10); {
			case k < 3:
				i := r.IntN(len(ps))
				if ps[i].gone.Load() {
					continue
				}
				lanes := make([]int, 1+r.IntN(4))
				for j := range lanes {
					lanes[j] = r.IntN(3)
				}
				feed(t, ps[i], &offs[i], lanes...)
			case k < 6:
				i := r.IntN(len(ws))
				if running[i] != nil {
					continue
				}
				if b := s.NewBatch(ws[i]); s.Next(b, true, nil) == Run {
					running[i] = b
				}
			case k < 9:
				i := r.IntN(len(ws))
				b := running[i]
				if b == nil {
					continue
				}
				out := make([]Outcome, len(b.Items))
				for j := range out {
					if out[j].Verdict = verdicts[r.IntN(len(verdicts))]; out[j].Verdict == Finished {
						s.Finish(b, j, j+1)
					}
				}
				s.Settle(b, out)
				running[i] = nil
			default:
				switch {
				case len(holds) > 0 && r.IntN(2) == 0:
					j := r.IntN(len(holds))
					s.Unhold(holds[j], r.IntN(2) == 0)
					holds = slices.Delete(holds, j, j+1)
				case r.IntN(8) == 0:
					ps[r.IntN(len(ps))].Revoke()
				}
			}
			for _, p := range ps {
				if !p.gone.Load() {
					p.Advance()
				}
			}
			checkLanes(t, s, ps, seed, step)
		}
	}
}
