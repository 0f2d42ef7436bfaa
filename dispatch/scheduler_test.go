package dispatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

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
		if err := p.Add(it, *next, 1); err != nil {
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
			t.Fatalf("Room: got false with %d unfinished, want true below 10", p.Unfinished())
		}
		feed(t, p, &off, 1)
	}
	if p.Room() {
		t.Fatalf("Room: got true with %d unfinished, want false at MaxInFlight", p.Unfinished())
	}
	if n, _ := p.Quota(); n != 0 {
		t.Fatalf("Quota with the share spent: got %d, want 0", n)
	}
	// Finishing messages gives the share back and wakes the partition.
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 8 {
		t.Fatalf("Next: got %v with %d items, want Run with 8", st, len(b.Items))
	}
	s.Release(b)
	select {
	case <-p.Wake():
	default:
		t.Fatal("partition not woken after its items finished")
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

// TestSharePerPartition (invariant 3): MaxInFlight is divided among the
// claimed partitions; one whose share is full of unfinished work cannot
// take what the others need, and a partition that goes away gives its
// share back.
func TestSharePerPartition(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 100, MaxInFlightBytes: 1000})
	parts := []*Partition[msg, int]{s.NewPartition(16), s.NewPartition(16), s.NewPartition(16), s.NewPartition(16)}
	if got := s.Share(); got != 25 {
		t.Fatalf("share of 100 over 4 partitions: got %d, want 25", got)
	}
	var off int64
	for range 25 { // partition 0 fills its share with one stuck lane
		if !parts[0].Room() {
			t.Fatalf("Room of partition 0 at %d unfinished: got false, want true", parts[0].Unfinished())
		}
		feed(t, parts[0], &off, 1)
	}
	if parts[0].Room() {
		t.Fatal("Room of partition 0 with its share spent: got true, want false")
	}
	for i, p := range parts[1:] {
		if !p.Room() {
			t.Fatalf("Room of partition %d: got false, want true (partition 0 holds only its own share)", i+1)
		}
		if n, _ := p.Quota(); n != 25 {
			t.Fatalf("Quota of partition %d: got %d, want 25", i+1, n)
		}
	}
	// Bytes: a share of 250 each; a partition with nothing in flight may
	// take one message whatever its size.
	big := parts[1].Alloc()
	if err := parts[1].Add(big, 0, 10_000); err != nil {
		t.Fatal(err)
	}
	if parts[1].Room() {
		t.Fatal("Room after a 10 kB message with a 250 B share: got true, want false")
	}
	if !parts[2].Room() {
		t.Fatal("Room of partition 2: got false, want true")
	}
	parts[3].Revoke()
	parts[3].Close()
	select {
	case <-parts[0].Wake():
	default:
		t.Fatal("partition 0 not woken when the shares grew")
	}
	if got := s.Share(); got != 33 || !parts[0].Room() {
		t.Fatalf("after one of 4 partitions left: share %d, Room of partition 0 %v; want 33 and true", got, parts[0].Room())
	}
}

// TestFinishedAboveStuckHeadCostsNothing: with the head stuck, finished
// messages above it are recycled at once: what stays is the stuck item,
// and the free list shrinks back after Trim.
func TestFinishedAboveStuckHeadCostsNothing(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 64, MaxInFlight: 1 << 20})
	p := s.NewPartition(64)
	w := s.NewWorker()
	var off int64
	feed(t, p, &off, 0) // lane 0: the stuck head
	stuck := s.NewBatch(w)
	if st := s.Next(stuck, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	const n = 50_000
	for done := 0; done < n; {
		lanes := make([]int, 1000)
		for i := range lanes {
			lanes[i] = 1 + i%50
		}
		feed(t, p, &off, lanes...)
		for {
			b := s.NewBatch(w)
			if st := s.Next(b, true, nil); st != Run {
				break
			}
			done += len(b.Items)
			s.Release(b)
		}
		p.Advance()
	}
	if got := p.Unfinished(); got != 1 {
		t.Fatalf("unfinished with the head stuck: got %d, want 1", got)
	}
	if next, _ := p.Next(); next != 0 {
		t.Fatalf("frontier: got %d, want 0 (the stuck head)", next)
	}
	if got := p.FinishedAbove(); got != n {
		t.Fatalf("FinishedAbove: got %d, want %d", got, n)
	}
	if _, ranges, _ := p.Finished(nil); len(ranges) != 1 || ranges[0].Start != 1 || ranges[0].End != n+1 {
		t.Fatalf("finished set: got %v, want one run [1, %d)", ranges, n+1)
	}
	p.Trim()
	p.Trim() // the peak since the first Trim is 1
	if len(p.free) > 2*64 || cap(p.free) > 2*64 {
		t.Fatalf("free items after Trim: got %d (room for %d), want at most %d", len(p.free), cap(p.free), 2*64)
	}
}

// TestRevokeCountsRetryInPartialBatch: a retry waiting in the partial
// batch (its lane let go after its backoff, taken by the filler) is
// counted abandoned at the revoke, as a retry still queued on its lane
// is; a never-failed item beside it, dropped.
func TestRevokeCountsRetryInPartialBatch(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 100, Hold: func(*Item[msg, int], Outcome) {}})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1)
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 1 {
		t.Fatalf("Next: got %v with %v, want Run with offset 0", st, seqsOf(b))
	}
	it := b.Items[0]
	it.Attempt++
	s.Settle(b, []Outcome{{Verdict: Hold}})
	s.Unhold(it, false) // its backoff ran out
	feed(t, p, &off, 2)
	filling := s.NewBatch(s.NewWorker())
	if st := s.Next(filling, false, nil); st != Partial || len(filling.Items) != 2 {
		t.Fatalf("Next: got %v with %v, want Partial with offsets 0 and 1", st, seqsOf(filling))
	}
	if dropped, abandoned := p.Revoke(); dropped != 1 || abandoned != 1 {
		t.Fatalf("Revoke: got dropped %d, abandoned %d; want 1 and 1 (offset 0 waited in the batch for its retry)", dropped, abandoned)
	}
	if len(filling.Items) != 0 {
		t.Fatalf("partial batch after the revoke: got %v, want empty", seqsOf(filling))
	}
	if got := s.DrainedWaiting(p, nil); len(got) != 1 || got[0].Item != it || got[0].Attempt != 2 {
		t.Fatalf("DrainedWaiting: got %d items, want offset 0 at attempt 2 (the final commit lists the retry dropped from the batch)", len(got))
	}
}

func TestRevoke(t *testing.T) {
	var s *sched
	s = New[msg, int](Options[msg, int]{Size: 2, MaxInFlight: 100, Hold: func(it *Item[msg, int], _ Outcome) { s.Waits(it) }})
	p, other := s.NewPartition(16), s.NewPartition(16)
	var off, otherOff int64
	feed(t, p, &off, 1, 2, 3, 4, 5)
	running := s.NewBatch(s.NewWorker())
	failed := s.NewBatch(s.NewWorker())
	filling := s.NewBatch(s.NewWorker())
	if st := s.Next(running, false, nil); st != Run {
		t.Fatalf("running: got %v, want Run", st)
	}
	if st := s.Next(failed, false, nil); st != Run {
		t.Fatalf("failed: got %v, want Run", st)
	}
	for _, it := range failed.Items {
		it.Attempt++
	}
	s.Settle(failed, []Outcome{{Verdict: Hold}, {Verdict: Hold}})
	if st := s.Next(filling, false, nil); st != Partial {
		t.Fatalf("filling: got %v, want Partial", st)
	}
	feed(t, other, &otherOff, 9)
	dropped, abandoned := p.Revoke()
	// 5 items: 2 running, 2 waiting for a retry, 1 waiting in the partial batch.
	if dropped != 1 || abandoned != 2 {
		t.Fatalf("Revoke: got dropped %d abandoned %d, want 1 and 2", dropped, abandoned)
	}
	if got := p.Outstanding(); got != 2 {
		t.Fatalf("Outstanding after revoke: got %d, want 2 (the running batch)", got)
	}
	if got := s.Held(); got != 0 {
		t.Fatalf("lanes held after revoke: got %d, want 0", got)
	}
	for _, it := range filling.Items {
		if it.part == p {
			t.Fatalf("partial batch still holds an item of the revoked partition")
		}
	}
	s.Release(running)
	if got := p.Outstanding(); got != 2 {
		t.Fatalf("Outstanding after the running batch finished: got %d, want 2 (finished, not yet taken back)", got)
	}
	p.Advance()
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("Outstanding after Advance: got %d, want 0", got)
	}
	if next, _ := p.Next(); next != 2 {
		t.Fatalf("final frontier: got %d, want 2", next)
	}
	if left := p.Close(); left != 3 {
		t.Fatalf("Close: got %d left unfinished, want 3", left)
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
// stream of ever-new keys does not grow the lane table without bound.
func TestIdleLanesSwept(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 64, MaxInFlight: 1 << 20})
	p := s.NewPartition(64)
	w := s.NewWorker()
	var off int64
	key := 0
	for range 30 {
		lanes := make([]int, 1000)
		for i := range lanes {
			lanes[i] = key
			key++
		}
		feed(t, p, &off, lanes...)
		runReady(t, s, w)
		p.Advance()
	}
	if next, _ := p.Next(); next != off {
		t.Fatalf("frontier: got %d, want %d (everything finished)", next, off)
	}
	s.mu.Lock()
	n := p.lanes.len()
	s.mu.Unlock()
	if n > 4*minLaneSweep {
		t.Fatalf("lane table: got %d lanes after 30000 distinct keys, want at most %d (idle lanes swept)", n, 4*minLaneSweep)
	}
}

// runReady takes batches and finishes them until none is ready.
func runReady(t *testing.T, s *Scheduler[msg, int], w *Worker[msg, int]) {
	t.Helper()
	var done *Batch[msg, int]
	for {
		b := s.NewBatch(w)
		st := s.Next(b, true, done)
		done = nil
		switch st {
		case Empty:
			return
		case Run:
			done = b
		default:
			t.Fatalf("next batch: got %v, want Run or Empty", st)
		}
	}
}

// feedFinished feeds a partition keyOf(i) for i in [0, n), chunk
// messages at a time, each chunk finished before the next is fed (so
// that at a sweep nearly every lane is idle), and calls after(i) after
// each chunk.
func feedFinished(t *testing.T, n, chunk int, keyOf func(int) int, after func(p *Partition[msg, int], i int)) *Partition[msg, int] {
	t.Helper()
	return feedFinishedShare(t, 1<<20, n, chunk, keyOf, after)
}

// feedFinishedShare is feedFinished on a scheduler with MaxInFlight
// maxInFlight (the partition's share: it is the only one).
func feedFinishedShare(t *testing.T, maxInFlight, n, chunk int, keyOf func(int) int, after func(p *Partition[msg, int], i int)) *Partition[msg, int] {
	t.Helper()
	s := New[msg, int](Options[msg, int]{Size: chunk, MaxInFlight: maxInFlight})
	p := s.NewPartition(chunk)
	w := s.NewWorker()
	var off int64
	lanes := make([]int, chunk)
	for i := 0; i < n; i += chunk {
		for j := range lanes {
			lanes[j] = keyOf(i + j)
		}
		feed(t, p, &off, lanes...)
		runReady(t, s, w)
		p.Advance()
		after(p, i+chunk)
	}
	if next, _ := p.Next(); next != off {
		t.Fatalf("frontier: got %d, want %d (everything finished)", next, off)
	}
	return p
}

// TestLaneSweepKeepsReturningKeys: a partition whose keys come back, each
// message finished soon (so that nearly every lane is idle at a sweep),
// grows its lane table until its working set fits, in rotation or at
// random: in the second half of the run (the first lets the sweeps see
// the keys return) at most 1% of messages make a lane. A sweep that drops
// every idle lane makes a lane for nearly every message of a working set
// over the sweep threshold.
func TestLaneSweepKeepsReturningKeys(t *testing.T) {
	tests := []struct {
		name  string
		keys  int
		order string // "rotation" or "random"
	}{
		{"a little over the threshold, in rotation", minLaneSweep + minLaneSweep/4, "rotation"},
		{"5k in rotation", 5000, "rotation"},
		{"3k at random", 3000, "random"},
		{"5k at random", 5000, "random"},
		{"20k at random", 20000, "random"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const chunk = 64
			n := 40 * tt.keys
			keyOf := func(i int) int { return i % tt.keys }
			if tt.order == "random" {
				rng := rand.New(rand.NewPCG(1, uint64(tt.keys)))
				keyOf = func(int) int { return rng.IntN(tt.keys) }
			}
			var firstHalf int64
			p := feedFinished(t, n, chunk, keyOf, func(p *Partition[msg, int], i int) {
				if i <= n/2 {
					firstHalf = p.sweep.lanesMade
				}
			})
			if got, limit := p.sweep.lanesMade-firstHalf, int64(n/2/100); got > limit {
				t.Fatalf("lanes made for the second %d messages over %d keys: got %d, want at most %d (%d in the first half; %d lanes in the table)",
					n/2, tt.keys, got, limit, firstHalf, p.lanes.len())
			}
		})
	}
}

// TestLaneSweepDropsNewKeys: keys that do not come back after a sweep,
// each finished soon, keep no idle lane past a sweep: the table never
// holds more than the sweep threshold and the chunk being fed (a sweep
// that kept the lanes used since the last one would let it grow to twice
// that, one that grew with them without bound). That holds for keys seen
// once, for keys seen a few times in a row, and for keys drawn at random
// from far more than the filter remembers.
func TestLaneSweepDropsNewKeys(t *testing.T) {
	const n, chunk = 40 * minLaneSweep, 64
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name  string
		keyOf func(int) int
	}{
		{"each once", func(i int) int { return i }},
		{"each 3 times in a row", func(i int) int { return i / 3 }},
		{"at random from 10M", func(int) int { return rng.IntN(10_000_000) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peak := 0
			feedFinished(t, n, chunk, tt.keyOf, func(p *Partition[msg, int], _ int) {
				peak = max(peak, p.lanes.len())
			})
			if peak > minLaneSweep+chunk {
				t.Fatalf("lanes in the table over %d messages: got a peak of %d, want at most %d", n, peak, minLaneSweep+chunk)
			}
		})
	}
}

// TestLaneSweepKeepsOnlyRecentLanes: a growth sweep that sees keys come
// back keeps the idle lanes used since the last sweep and drops the other
// idle ones; one that does not see them come back drops every idle lane.
func TestLaneSweepKeepsOnlyRecentLanes(t *testing.T) {
	for _, returning := range []bool{true, false} {
		t.Run(fmt.Sprintf("keys return %v", returning), func(t *testing.T) {
			s := New[msg, int](Options[msg, int]{Size: 64, MaxInFlight: 1 << 20})
			p := s.NewPartition(64)
			w := s.NewWorker()
			var off int64
			use := func(from, to int) { // one message for each key in [from, to), run to the end
				for k := from; k < to; k += 64 {
					lanes := make([]int, 0, 64)
					for j := k; j < min(k+64, to); j++ {
						lanes = append(lanes, j)
					}
					feed(t, p, &off, lanes...)
					runReady(t, s, w)
				}
				p.Advance()
			}
			sweep := func() {
				if returning {
					p.sweep.made, p.sweep.hits = 0, 1 // every lookup a return
				} else {
					p.sweep.made, p.sweep.hits, p.sweep.ghosts = 1, 0, 0
				}
				p.sweepLanes(true)
			}
			use(0, 100)
			sweep() // keeps all 100 if keys return: all used since the start
			use(0, 40)
			sweep()
			want := 0
			if returning {
				want = 40
			}
			if got := p.lanes.len(); got != want {
				t.Fatalf("lanes after the second sweep: got %d, want %d (the keys used since the first)", got, want)
			}
			for k := range want {
				if p.lanes.get(uint64(k)) == nil {
					t.Fatalf("lane of key %d, used since the first sweep: got none, want it kept", k)
				}
			}
		})
	}
}

// TestLaneSweepTableBounded: keys that come back once, just after a
// sweep dropped or kept them, and then never again look like a working
// set to every sweep, and would double the table at each one; growth
// sweeps stop keeping lanes at the growth limit (twice the partition's
// share of MaxInFlight, at most maxLaneSweep), so the table never holds
// more than that and a chunk.
func TestLaneSweepTableBounded(t *testing.T) {
	tests := []struct {
		name        string
		maxInFlight int
		limit       int
	}{
		{"large share", 1 << 20, maxLaneSweep},
		{"share of 4096", 4096, 8192},
		{"share under the threshold", 100, minLaneSweep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const chunk, n = 64, 1 << 19 // 16 x maxLaneSweep
			var (
				part        *Partition[msg, int]
				sweeps      uint32
				once, again []int // keys seen once since the last sweep, and before it
				next        int
			)
			keyOf := func(i int) int {
				if part != nil && part.sweep.n != sweeps {
					sweeps, again, once = part.sweep.n, append(again, once...), nil
				}
				if i%2 == 0 && len(again) > 0 { // every other message: a key back after a sweep
					k := again[0]
					again = again[1:]
					return k
				}
				next++
				once = append(once, next)
				return next
			}
			peak := 0
			feedFinishedShare(t, tt.maxInFlight, n, chunk, keyOf, func(p *Partition[msg, int], _ int) {
				part = p
				peak = max(peak, p.lanes.len())
			})
			if peak > tt.limit+chunk {
				t.Fatalf("lanes in the table over %d messages, each key back once after a sweep: got a peak of %d, want at most %d", n, peak, tt.limit+chunk)
			}
			if peak < tt.limit/2 {
				t.Fatalf("lanes in the table over %d messages, each key back once after a sweep: got a peak of %d, want near %d (the sweeps saw the keys come back)", n, peak, tt.limit)
			}
		})
	}
}

// TestLaneSweepForgetsOldWorkingSet: when the keys move to a new, larger
// working set, the lanes of the old one are dropped by the growth sweeps
// that follow (they are no longer used since the last sweep): the table
// ends up holding about the new set, not both. (Until the table reaches
// its next sweep, or Trim runs at a commit interval, idle lanes of the old
// set stay.)
func TestLaneSweepForgetsOldWorkingSet(t *testing.T) {
	const before, after, chunk = 3000, 6000, 64
	n := 80 * after
	rng := rand.New(rand.NewPCG(3, 4))
	keyOf := func(i int) int {
		if i < n/2 {
			return rng.IntN(before)
		}
		return before + rng.IntN(after) // keys of another set
	}
	p := feedFinished(t, n, chunk, keyOf, func(*Partition[msg, int], int) {})
	if got, limit := p.lanes.len(), after+after/3; got > limit {
		t.Fatalf("lanes after moving from %d keys to %d others: got %d, want at most %d", before, after, got, limit)
	}
}

// TestTrimRestartsLaneSweep: after a working set grew the table, Trim
// drops its idle lanes and brings the sweep threshold back, so ever-new
// keys that follow keep no more than the threshold and a chunk.
func TestTrimRestartsLaneSweep(t *testing.T) {
	const keys, chunk = 20000, 64
	n := 80 * keys
	rng := rand.New(rand.NewPCG(5, 6))
	keyOf := func(i int) int {
		if i < n/2 {
			return rng.IntN(keys)
		}
		return keys + i // new keys, each once
	}
	peak, trimmed := 0, false
	feedFinished(t, n, chunk, keyOf, func(p *Partition[msg, int], i int) {
		switch {
		case i == n/2:
			if p.lanes.len() < keys/2 {
				t.Fatalf("lanes before Trim: got %d, want the working set's %d or so", p.lanes.len(), keys)
			}
			p.Trim()
			trimmed = true
		case trimmed:
			peak = max(peak, p.lanes.len())
		}
	})
	if peak > minLaneSweep+chunk {
		t.Fatalf("lanes in the table for new keys after Trim: got a peak of %d, want at most %d", peak, minLaneSweep+chunk)
	}
}

// TestTrimNotesDroppedKeys: the lanes Trim drops go into the sweep's
// filter of dropped keys, as a growth sweep's do, so that a working set
// that comes back after a Trim (every commit interval) is recognised as
// returning at the first growth sweep after it. 3,000 keys in rotation,
// trimmed every four rotations, make at most 1.5 lanes per key per Trim
// interval: here 4,024, the working set and the 1,024 lanes of the first
// sweep's window, which the second drops as not used since. Without the
// note they make 7,084 in the intervals after the filter was cleared.
func TestTrimNotesDroppedKeys(t *testing.T) {
	const keys, chunk, every = 3000, 60, 4 * 3000
	const n = 12 * every
	var made []int64 // lanes made in each Trim interval
	var last int64
	feedFinished(t, n, chunk, func(i int) int { return i % keys }, func(p *Partition[msg, int], i int) {
		if i%every == 0 {
			made = append(made, p.sweep.lanesMade-last)
			last = p.sweep.lanesMade
			p.Trim()
		}
	})
	for i, m := range made[1:] { // the first interval makes the working set
		if 2*m > 3*keys {
			t.Fatalf("lanes made after Trim %d: got %d, want at most %d (1.5 per key of the working set); all intervals: %v", i+1, m, 3*keys/2, made)
		}
	}
}

// TestTrimSweepsIdleLanes: once the keys stop coming, Trim gives their
// idle lanes back (laneFor's own sweep needs new keys to run), keeps the
// lanes that still have work, and keeps at most minLaneSweep for reuse.
func TestTrimSweepsIdleLanes(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 1 << 12, MaxInFlight: 1 << 20})
	p := s.NewPartition(64)
	w := s.NewWorker()
	var off int64
	const keys = 3000
	lanes := make([]int, keys)
	for i := range lanes {
		lanes[i] = i
	}
	feed(t, p, &off, lanes...)
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != keys {
		t.Fatalf("first batch: got %v with %d items, want Run with %d", st, len(b.Items), keys)
	}
	s.Release(b)
	p.Advance()
	feed(t, p, &off, 7) // a second item for lane 7, left queued
	if got := p.lanes.len(); got != keys {
		t.Fatalf("lanes before Trim: got %d, want %d", got, keys)
	}
	p.Trim()
	if got := p.lanes.len(); got != 1 {
		t.Fatalf("lanes after Trim: got %d, want 1 (lane 7, with an item queued)", got)
	}
	if got := len(p.freeLanes); got != minLaneSweep {
		t.Fatalf("lanes kept for reuse: got %d, want %d", got, minLaneSweep)
	}
	if len(p.lanes.slots) != minLaneSlots {
		t.Fatalf("lane table after Trim: got %d slots, want %d (given back)", len(p.lanes.slots), minLaneSlots)
	}
	b = s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 1 || b.Items[0].Msg.lane != 7 {
		t.Fatalf("after Trim: got %v with %d items, want lane 7's second item", st, len(b.Items))
	}
}

// TestOutOfShareCountedOnce: a partition out of its share checks Room
// again and again (a claim loop holding messages does, per burst); it is
// counted once as paused, which makes partial batches run at once, and
// uncounted when it has room again or closes.
func TestOutOfShareCountedOnce(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 8, MaxInFlight: 4})
	p := s.NewPartition(16)
	var off int64
	feed(t, p, &off, 1, 2, 3, 4)
	for range 1000 {
		if p.Room() {
			t.Fatal("Room: got true with the share spent, want false")
		}
	}
	if got := s.shares.paused.Load(); got != 1 {
		t.Fatalf("paused partitions: got %d, want 1", got)
	}
	b := s.NewBatch(s.NewWorker())
	if st := s.Next(b, true, nil); st != Run {
		t.Fatalf("Next: got %v, want Run", st)
	}
	s.Release(b)
	p.Advance()
	if !p.Room() {
		t.Fatal("Room after its items finished: got false, want true")
	}
	if got := s.shares.paused.Load(); got != 0 {
		t.Fatalf("paused partitions after room came back: got %d, want 0", got)
	}
}

// TestFailureAfterRevokeIsAbandoned: a batch that was inside Do when its
// partition was revoked, and then failed, is not kept for a retry (that
// would start a revoked partition's messages again, and keep its drain
// waiting): its items are abandoned at once, and the other partition's
// item goes back to its lane.
func TestFailureAfterRevokeIsAbandoned(t *testing.T) {
	s := New[msg, int](Options[msg, int]{Size: 4, MaxInFlight: 100})
	p, other := s.NewPartition(16), s.NewPartition(16)
	var off, otherOff int64
	feed(t, p, &off, 1, 2)
	feed(t, other, &otherOff, 3)
	w := s.NewWorker()
	b := s.NewBatch(w)
	if st := s.Next(b, true, nil); st != Run || len(b.Items) != 3 {
		t.Fatalf("Next: got %v with %d items, want Run with 3", st, len(b.Items))
	}
	p.Revoke() // while the batch runs
	p.Drain()
	s.Settle(b, []Outcome{{Verdict: Hold}, {Verdict: Hold}, {Verdict: Return}}) // and then fails
	if got := p.Outstanding(); got != 0 {
		t.Fatalf("revoked partition's outstanding after the failure: got %d, want 0", got)
	}
	select {
	case <-p.Wake():
	default:
		t.Fatal("draining partition not woken when its items were abandoned")
	}
	if got := s.Held(); got != 0 {
		t.Fatalf("lanes held: got %d, want 0", got)
	}
	next := s.NewBatch(w)
	if st := s.Next(next, true, nil); st != Run || len(next.Items) != 1 || next.Items[0].part != other {
		t.Fatalf("after the failure: got %v with %d items, want the other partition's one item at once", st, len(next.Items))
	}
}

// TestItemHotFields: the fields workers and the tracker touch fit the
// item's first 64 bytes.
func TestItemHotFields(t *testing.T) {
	var it Item[msg, int]
	if end := unsafe.Offsetof(it.link) + unsafe.Sizeof(it.link); end > 64 {
		t.Fatalf("hot fields end at byte %d, want at most 64", end)
	}
}
