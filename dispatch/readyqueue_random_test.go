package dispatch

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// refQ is a model of bucketQueue: a FIFO of late lanes (pushed older than
// the current bucket and out of the ring's reach of the newest bucket
// pushed to) first, then the others ordered by (bucket, clamped to the
// ring's reach; push order), with cur set when the buckets are empty,
// moved back by a lane older than it, and moved by front to the oldest.
type refEnt struct {
	l     *lane[msg, int]
	b     uint64 // effective bucket
	seq   int
	stamp uint64
}
type refQ struct {
	late []refEnt
	bs   []refEnt
	cur  uint64
	top  uint64
	seq  int
}

func (r *refQ) push(l *lane[msg, int], stamp uint64) {
	b := stamp >> bucketShift
	r.seq++
	switch {
	case len(r.bs) == 0:
		r.cur, r.top = b, b
	case b < r.cur && r.top-b >= bucketRing:
		r.late = append(r.late, refEnt{l, b, r.seq, stamp})
		return
	case b < r.cur:
		r.cur = b
	case b >= r.cur+bucketRing:
		b = r.cur + bucketRing - 1
	}
	r.top = max(r.top, b)
	r.bs = append(r.bs, refEnt{l, b, r.seq, stamp})
	slices.SortStableFunc(r.bs, func(x, y refEnt) int {
		if x.b != y.b {
			if x.b < y.b {
				return -1
			}
			return 1
		}
		return x.seq - y.seq
	})
}
func (r *refQ) front() *lane[msg, int] {
	if len(r.late) > 0 {
		return r.late[0].l
	}
	if len(r.bs) == 0 {
		return nil
	}
	r.cur = r.bs[0].b
	return r.bs[0].l
}
func (r *refQ) pop() refEnt {
	if len(r.late) > 0 {
		e := r.late[0]
		r.late = r.late[1:]
		return e
	}
	e := r.bs[0]
	r.bs = r.bs[1:]
	return e
}

// TestBucketQueueAgainstModel pushes lanes with random stamps (near the
// front, older than the current bucket, past the ring's reach, near 0) and
// pops them at random: front, the counts and the pop order match refQ, and
// a late lane never waits while the buckets are empty. Both ways of taking
// a lane older than the current bucket (late, and moving the current
// bucket back) come up.
func TestBucketQueueAgainstModel(t *testing.T) {
	var lateSeen, backSeen int // steps with a late lane queued; pushes that moved cur back
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var q bucketQueue[msg, int]
		var ref refQ
		lanes := make([]*lane[msg, int], 1+rng.IntN(40))
		queued := map[*lane[msg, int]]bool{}
		for i := range lanes {
			lanes[i] = &lane[msg, int]{}
		}
		base := uint64(rng.IntN(1 << 20))
		for step := range 2000 {
			if rng.IntN(3) != 0 {
				l := lanes[rng.IntN(len(lanes))]
				if queued[l] {
					continue
				}
				var st uint64
				switch k := rng.IntN(10); {
				case k < 5:
					st = base + uint64(rng.IntN(200))
				case k < 8: // older than the current bucket, within the ring's reach
					st = base - min(base, uint64(rng.IntN(500)))
				case k < 9: // past the ring's reach
					st = base + uint64(rng.IntN(4*bucketRing<<bucketShift))
				default: // out of the ring's reach: late
					st = uint64(rng.IntN(100))
				}
				base += uint64(rng.IntN(20))
				cur := q.cur
				q.push(l, st)
				ref.push(l, st)
				if q.cur < cur && len(ref.bs) > 1 {
					backSeen++
				}
				queued[l] = true
			} else {
				f, rf := q.front(), ref.front()
				if f != rf {
					t.Fatalf("seed %d step %d: front differs", seed, step)
				}
				if f == nil {
					continue
				}
				// oldest-first property: a late lane is older (by bucket)
				// than every bucket lane; a bucket lane is the oldest bucket.
				e := ref.pop()
				q.pop()
				for _, o := range ref.bs {
					if o.b < e.b {
						t.Fatalf("seed %d step %d: popped bucket %d before %d", seed, step, e.b, o.b)
					}
				}
				queued[f] = false
			}
			if q.n != len(ref.late)+len(ref.bs) || q.nLate != len(ref.late) {
				t.Fatalf("seed %d step %d: n %d nLate %d, want %d %d", seed, step, q.n, q.nLate, len(ref.late)+len(ref.bs), len(ref.late))
			}
			if len(ref.late) > 0 {
				lateSeen++
			}
			if len(ref.bs) == 0 && len(ref.late) > 0 {
				t.Fatalf("seed %d step %d: late lanes with empty buckets", seed, step)
			}
			if len(ref.bs) > 0 && q.cur > ref.bs[0].b {
				t.Fatalf("seed %d step %d: cur %d past oldest bucket %d", seed, step, q.cur, ref.bs[0].b)
			}
		}
		for q.front() != nil {
			if q.front() != ref.front() {
				t.Fatalf("seed %d drain: front differs", seed)
			}
			q.pop()
			ref.pop()
		}
		if ref.front() != nil || q.n != 0 || q.nLate != 0 {
			t.Fatalf("seed %d: left over", seed)
		}
	}
	if lateSeen == 0 || backSeen == 0 {
		t.Fatalf("steps with a late lane: got %d; pushes that moved the current bucket back: got %d; want some of both", lateSeen, backSeen)
	}
}

// readyLanes walks fresh, late and the buckets: each lane appears once,
// and only if inReady, and the counts match.
func readyLanes(t *testing.T, s *sched, seed uint64, step int) {
	t.Helper()
	seen := map[*lane[msg, int]]int{}
	for l := s.fresh.head; l != nil; l = l.nextReady {
		seen[l]++
	}
	nl := 0
	for l := s.requeued.late.head; l != nil; l = l.nextReady {
		seen[l]++
		nl++
	}
	nb := 0
	for i := range s.requeued.buckets {
		for l := s.requeued.buckets[i].head; l != nil; l = l.nextReady {
			seen[l]++
			nb++
		}
	}
	if nl != s.requeued.nLate || nl+nb != s.requeued.n {
		t.Fatalf("seed %d step %d: late %d buckets %d; nLate %d n %d", seed, step, nl, nb, s.requeued.nLate, s.requeued.n)
	}
	for l, c := range seen {
		if c != 1 || !l.inReady {
			t.Fatalf("seed %d step %d: lane listed %d times, inReady %v", seed, step, c, l.inReady)
		}
	}
}

// TestSchedulerRandomPartitions drives three partitions, three workers and
// small backlogs with random feeds, takes, releases and carry-ons (every
// item is stamped from its partition's tag or the virtual time, whichever
// is later): every lane is
// listed once while ready, runs in offset order and in one batch at a
// time, and every item fed runs exactly once.
func TestSchedulerRandomPartitions(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 3))
		s := New[msg, int](Options[msg, int]{Size: 1 + r.IntN(4), Window: 1 + r.IntN(3), MaxInFlight: 4000, Backlog: 1 + r.IntN(8)})
		ps := []*Partition[msg, int]{s.NewPartition(64), s.NewPartition(64), s.NewPartition(64)}
		offs := make([]int64, len(ps))
		ws := []*Worker[msg, int]{s.NewWorker(), s.NewWorker(), s.NewWorker()}
		running := make([]*Batch[msg, int], len(ws))
		type key struct{ p, l int }
		last := map[key]int{}
		fed, ran := 0, 0
		inRun := map[*lane[msg, int]]int{}
		pidx := map[*Partition[msg, int]]int{ps[0]: 0, ps[1]: 1, ps[2]: 2}
		accept := func(b *Batch[msg, int], wi int, step int) {
			for _, it := range b.Items {
				k := key{pidx[it.part], it.Msg.lane}
				if prev, ok := last[k]; ok && it.Msg.seq <= prev {
					t.Fatalf("seed %d step %d: lane %v ran offset %d after %d", seed, step, k, it.Msg.seq, prev)
				}
				last[k] = it.Msg.seq
				if o, ok := inRun[it.lane]; ok && o != wi {
					t.Fatalf("seed %d step %d: lane in two batches", seed, step)
				}
				inRun[it.lane] = wi
				ran++
			}
		}
		drop := func(b *Batch[msg, int], wi int) {
			for _, it := range b.Items {
				if inRun[it.lane] == wi {
					delete(inRun, it.lane)
				}
			}
		}
		for step := range 400 {
			switch k := r.IntN(10); {
			case k < 4:
				i := r.IntN(len(ps))
				lanes := make([]int, 1+r.IntN(6))
				for j := range lanes {
					lanes[j] = r.IntN(3 + 5*i)
				}
				feed(t, ps[i], &offs[i], lanes...)
				fed += len(lanes)
			case k < 7:
				i := r.IntN(len(ws))
				if running[i] != nil {
					continue
				}
				b := s.NewBatch(ws[i])
				if s.Next(b, true, nil) == Run {
					accept(b, i, step)
					running[i] = b
				}
			default:
				i := r.IntN(len(ws))
				b := running[i]
				if b == nil {
					continue
				}
				drop(b, i)
				if r.IntN(2) == 0 {
					s.Release(b)
					running[i] = nil
				} else { // carry on
					nb := s.NewBatch(ws[i])
					running[i] = nil
					if s.Next(nb, true, b) == Run {
						accept(nb, i, step)
						running[i] = nb
					}
				}
			}
			for _, p := range ps {
				p.Advance()
			}
			readyLanes(t, s, seed, step)
			checkLanes(t, s, ps, seed, step)
		}
		for i, b := range running {
			if b != nil {
				drop(b, i)
				s.Release(b)
				running[i] = nil
			}
		}
		for {
			b := s.NewBatch(ws[0])
			if s.Next(b, true, nil) != Run {
				break
			}
			accept(b, 0, -1)
			drop(b, 0)
			s.Release(b)
		}
		if ran != fed {
			t.Fatalf("seed %d: ran %d of %d fed", seed, ran, fed)
		}
		readyLanes(t, s, seed, -1)
	}
}
