package commit

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

type entry struct {
	off  int64
	done atomic.Bool
}

func (e *entry) Offset() int64  { return e.off }
func (e *entry) Finished() bool { return e.done.Load() }

func add(t *testing.T, tr *Tracker[*entry], offs ...int64) []*entry {
	t.Helper()
	var es []*entry
	for _, o := range offs {
		e := &entry{off: o}
		if err := tr.Add(e); err != nil {
			t.Fatalf("Add(%d): %v", o, err)
		}
		es = append(es, e)
	}
	return es
}

func TestFrontier(t *testing.T) {
	tests := []struct {
		name     string
		offsets  []int64
		finish   []int // indexes finished before Advance
		wantNext int64 // -1: nothing committable
		wantRel  int
	}{
		{"nothing finished", []int64{0, 1, 2}, nil, -1, 0},
		{"head finished", []int64{0, 1, 2}, []int{0}, 1, 1},
		{"out of order, gap at head", []int64{0, 1, 2}, []int{1, 2}, -1, 0},
		{"out of order, all", []int64{0, 1, 2}, []int{2, 1, 0}, 3, 3},
		{"gap in middle", []int64{10, 11, 12, 13}, []int{0, 1, 3}, 12, 2},
		{"sparse offsets (compaction)", []int64{5, 9, 40, 41, 100}, []int{0, 1, 2}, 41, 3},
		{"sparse, all done", []int64{5, 9, 40, 41, 100}, []int{4, 3, 2, 1, 0}, 101, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New[*entry](0)
			es := add(t, tr, tt.offsets...)
			for _, i := range tt.finish {
				es[i].done.Store(true)
			}
			var released []int64
			n := tr.Advance(func(e *entry) { released = append(released, e.off) })
			if n != tt.wantRel || len(released) != tt.wantRel {
				t.Fatalf("released: got %d (%v), want %d", n, released, tt.wantRel)
			}
			for i, off := range released {
				if off != tt.offsets[i] {
					t.Fatalf("release order: got %v, want prefix of %v", released, tt.offsets)
				}
			}
			next, ok := tr.Next()
			if tt.wantNext < 0 {
				if ok {
					t.Fatalf("Next: got %d, want nothing committable", next)
				}
				return
			}
			if !ok || next != tt.wantNext {
				t.Fatalf("Next: got %d (ok=%v), want %d", next, ok, tt.wantNext)
			}
			if got, want := tr.Pending(), len(tt.offsets)-tt.wantRel; got != want {
				t.Fatalf("Pending: got %d, want %d", got, want)
			}
		})
	}
}

func TestOffsetOrderRejected(t *testing.T) {
	tr := New[*entry](0)
	add(t, tr, 7)
	for _, off := range []int64{7, 3} {
		if err := tr.Add(&entry{off: off}); !errors.Is(err, ErrOffsetOrder) {
			t.Fatalf("Add(%d) after 7: got %v, want ErrOffsetOrder", off, err)
		}
	}
}

func TestFenceStopsCommits(t *testing.T) {
	tr := New[*entry](0)
	es := add(t, tr, 0, 1, 2, 3)
	es[0].done.Store(true)
	if n := tr.Advance(nil); n != 1 {
		t.Fatalf("Advance before fence: got %d, want 1", n)
	}
	if pending := tr.Fence(); pending != 3 {
		t.Fatalf("Fence pending: got %d, want 3", pending)
	}
	// Completions that arrive after the revoke must not move the frontier.
	for _, e := range es[1:] {
		e.done.Store(true)
	}
	if n := tr.Advance(nil); n != 0 {
		t.Fatalf("Advance after fence: got %d released, want 0", n)
	}
	if next, _ := tr.Next(); next != 1 {
		t.Fatalf("Next after fence: got %d, want 1 (the pre-fence frontier)", next)
	}
	if err := tr.Add(&entry{off: 9}); !errors.Is(err, ErrFenced) {
		t.Fatalf("Add after fence: got %v, want ErrFenced", err)
	}
}

// TestConcurrentFinish finishes entries from many goroutines in random order
// while the owner advances; the frontier must never pass an unfinished entry.
func TestConcurrentFinish(t *testing.T) {
	const n = 20000
	tr := New[*entry](4) // force growth
	es := add(t, tr, func() []int64 {
		o := make([]int64, n)
		for i := range o {
			o[i] = int64(i * 2) // sparse
		}
		return o
	}()...)
	perm := rand.New(rand.NewPCG(3, 4)).Perm(n)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				es[perm[i]].done.Store(true)
			}
		})
	}
	released := 0
	check := func(e *entry) {
		if !e.Finished() {
			t.Errorf("released unfinished offset %d", e.off)
		}
		if want := int64(released * 2); e.off != want {
			t.Errorf("release order: got offset %d, want %d", e.off, want)
		}
		released++
	}
	for released < n {
		tr.Advance(check)
		if t.Failed() {
			break
		}
	}
	wg.Wait()
	if next, _ := tr.Next(); next != int64(2*(n-1)+1) {
		t.Fatalf("final Next: got %d, want %d", next, 2*(n-1)+1)
	}
}

func BenchmarkAddFinishAdvance(b *testing.B) {
	tr := New[*entry](1024)
	es := make([]entry, 1024)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		e := &es[off&1023]
		e.off = off
		e.done.Store(false)
		_ = tr.Add(e)
		e.done.Store(true)
		if off&63 == 63 {
			tr.Advance(nil)
		}
		off++
	}
}
