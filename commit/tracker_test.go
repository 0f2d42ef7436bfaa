package commit

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

type entry struct {
	off  int64
	link Link[*entry]
}

func (e *entry) Offset() int64            { return e.off }
func (e *entry) TrackLink() *Link[*entry] { return &e.link }

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
		name       string
		offsets    []int64
		finish     []int // indexes finished
		wantNext   int64
		wantRel    uint64
		wantRanges []Range
	}{
		{"nothing finished", []int64{0, 1, 2}, nil, 0, 0, nil},
		{"head finished", []int64{0, 1, 2}, []int{0}, 1, 1, nil},
		{"out of order, gap at head", []int64{0, 1, 2}, []int{1, 2}, 0, 0, []Range{{1, 3}}},
		{"out of order, all", []int64{0, 1, 2}, []int{2, 1, 0}, 3, 3, nil},
		{"gap in middle", []int64{10, 11, 12, 13}, []int{0, 1, 3}, 12, 2, []Range{{13, 14}}},
		{"sparse offsets (compaction)", []int64{5, 9, 40, 41, 100}, []int{0, 1, 2}, 41, 3, []Range{{42, 100}}},
		{"sparse, all done", []int64{5, 9, 40, 41, 100}, []int{4, 3, 2, 1, 0}, 101, 5, nil},
		{"stuck head, rest done", []int64{0, 1, 2, 3, 4}, []int{1, 2, 3, 4}, 0, 0, []Range{{1, 5}}},
		{"fragmented", []int64{0, 1, 2, 3, 4, 5}, []int{1, 3, 5}, 0, 0, []Range{{1, 2}, {3, 4}, {5, 6}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New[*entry]()
			es := add(t, tr, tt.offsets...)
			for _, i := range tt.finish {
				tr.Finish(es[i])
			}
			next, ok := tr.Next()
			if !ok || next != tt.wantNext {
				t.Fatalf("Next: got %d (ok=%v), want %d", next, ok, tt.wantNext)
			}
			if got := tr.Released(); got != tt.wantRel {
				t.Fatalf("Released: got %d, want %d", got, tt.wantRel)
			}
			if got, want := tr.Pending(), len(tt.offsets)-len(tt.finish); got != want {
				t.Fatalf("Pending: got %d, want %d", got, want)
			}
			if got, want := tr.FinishedAbove(), uint64(len(tt.finish))-tt.wantRel; got != want {
				t.Fatalf("FinishedAbove: got %d, want %d", got, want)
			}
			base, ranges, _ := tr.Finished(nil)
			if base != tt.wantNext || !slices.Equal(ranges, tt.wantRanges) {
				t.Fatalf("Finished: got %d %v, want %d %v", base, ranges, tt.wantNext, tt.wantRanges)
			}
		})
	}
}

func TestSkip(t *testing.T) {
	tr := New[*entry]()
	if _, ok := tr.Next(); ok {
		t.Fatal("Next before anything received: got ok, want nothing to commit")
	}
	if err := tr.Skip(4); err != nil {
		t.Fatal(err)
	}
	if next, ok := tr.Next(); !ok || next != 5 {
		t.Fatalf("Next after skipping 4: got %d (%v), want 5", next, ok)
	}
	es := add(t, tr, 5)
	if err := tr.Skip(6); err != nil {
		t.Fatal(err)
	}
	if next, _ := tr.Next(); next != 5 {
		t.Fatalf("Next with 5 unfinished: got %d, want 5", next)
	}
	if _, ranges, _ := tr.Finished(nil); !slices.Equal(ranges, []Range{{6, 7}}) {
		t.Fatalf("Finished: got %v, want [6, 7) (the skipped message)", ranges)
	}
	tr.Finish(es[0])
	if next, _ := tr.Next(); next != 7 {
		t.Fatalf("Next after finishing 5: got %d, want 7", next)
	}
	if got := tr.Released(); got != 3 {
		t.Fatalf("Released: got %d, want 3", got)
	}
}

func TestOffsetOrderRejected(t *testing.T) {
	tr := New[*entry]()
	add(t, tr, 7)
	for _, off := range []int64{7, 3} {
		if err := tr.Add(&entry{off: off}); !errors.Is(err, ErrOffsetOrder) {
			t.Fatalf("Add(%d) after 7: got %v, want ErrOffsetOrder", off, err)
		}
		if err := tr.Skip(off); !errors.Is(err, ErrOffsetOrder) {
			t.Fatalf("Skip(%d) after 7: got %v, want ErrOffsetOrder", off, err)
		}
	}
}

func TestFenceStopsCommits(t *testing.T) {
	tr := New[*entry]()
	es := add(t, tr, 0, 1, 2, 3)
	tr.Finish(es[0])
	if pending := tr.Fence(); pending != 3 {
		t.Fatalf("Fence pending: got %d, want 3", pending)
	}
	// Completions that arrive after the revoke must not move the frontier.
	for _, e := range es[1:] {
		if tr.Finish(e) {
			t.Fatalf("Finish(%d) after fence: got tracked, want nothing done", e.off)
		}
	}
	if err := tr.Add(&entry{off: 9}); !errors.Is(err, ErrFenced) {
		t.Fatalf("Add after fence: got %v, want ErrFenced", err)
	}
	if err := tr.Skip(9); !errors.Is(err, ErrFenced) {
		t.Fatalf("Skip after fence: got %v, want ErrFenced", err)
	}
	for _, e := range es {
		if e.link != (Link[*entry]{}) {
			t.Fatalf("offset %d still linked after Fence", e.off)
		}
	}
}

// TestAgainstModel adds, skips and finishes at random and compares the
// frontier, the counts and the finished ranges with a plain set of
// offsets.
func TestAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tr := New[*entry]()
	var live []*entry
	state := map[int64]bool{} // received offset -> finished
	off := int64(0)
	for step := range 20000 {
		r := rng.IntN(10)
		if (step/1000)%2 == 1 && r < 4 {
			r = 9 // every other thousand steps mostly finishes: blocks let go, the tracker empty at times
		}
		switch {
		case r < 5:
			off += 1 + int64(rng.IntN(3)) // sparse at times
			live = append(live, add(t, tr, off)...)
			state[off] = false
		case r < 6:
			off++
			if err := tr.Skip(off); err != nil {
				t.Fatal(err)
			}
			state[off] = true
		case r < 7 && len(live) > 0:
			i := rng.IntN(len(live))
			clone := &entry{off: live[i].off}
			if !tr.Replace(live[i], clone) {
				t.Fatalf("step %d: Replace(%d): got false, want true", step, clone.off)
			}
			live[i] = clone
		case len(live) > 0:
			i := rng.IntN(len(live))
			e := live[i]
			live = slices.Delete(live, i, i+1)
			tr.Finish(e)
			state[e.off] = true
		}
		if step%97 != 0 || len(state) == 0 {
			continue
		}
		var offs []int64
		for o := range state {
			offs = append(offs, o)
		}
		slices.Sort(offs)
		wantNext, released := off+1, uint64(0)
		for _, o := range offs {
			if !state[o] {
				wantNext = o
				break
			}
			released++
		}
		next, _ := tr.Next()
		if next != wantNext || tr.Released() != released || tr.Pending() != len(live) {
			t.Fatalf("step %d: Next %d Released %d Pending %d, want %d %d %d",
				step, next, tr.Released(), tr.Pending(), wantNext, released, len(live))
		}
		_, ranges, _ := tr.Finished(nil)
		covered := func(o int64) bool {
			for _, r := range ranges {
				if r.Start <= o && o < r.End {
					return true
				}
			}
			return false
		}
		for _, o := range offs {
			if o > wantNext && state[o] != covered(o) {
				t.Fatalf("step %d: offset %d finished=%v but covered=%v by %v", step, o, state[o], covered(o), ranges)
			}
		}
	}
	if got := tr.Fence(); got != len(live) {
		t.Fatalf("Fence: got %d unfinished, want %d", got, len(live))
	}
	for _, e := range live {
		if tr.Finish(e) {
			t.Fatalf("Finish(%d) after Fence: got tracked", e.off)
		}
	}
}

func TestReplace(t *testing.T) {
	tr := New[*entry]()
	es := add(t, tr, 0, 1, 2)
	for i, old := range es {
		clone := &entry{off: old.off}
		if !tr.Replace(old, clone) {
			t.Fatalf("Replace(%d): got false, want true", old.off)
		}
		if tr.Finish(old) {
			t.Fatalf("Finish of the replaced entry %d: got tracked", old.off)
		}
		es[i] = clone
	}
	if tr.Replace(&entry{off: 9}, &entry{off: 9}) {
		t.Fatal("Replace of an entry never added: got true")
	}
	tr.Finish(es[1])
	if _, ranges, _ := tr.Finished(nil); len(ranges) != 1 || ranges[0] != (Range{1, 2}) || tr.Pending() != 2 {
		t.Fatalf("after replacing all and finishing 1: ranges %v pending %d, want [1, 2) and 2", ranges, tr.Pending())
	}
	tr.Finish(es[0])
	tr.Finish(es[2])
	if next, _ := tr.Next(); next != 3 || tr.Released() != 3 {
		t.Fatalf("Next %d Released %d, want 3 and 3", next, tr.Released())
	}
}

func BenchmarkAddFinish(b *testing.B) {
	tr := New[*entry]()
	es := make([]entry, 1024)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		e := &es[off&1023]
		e.off = off
		_ = tr.Add(e)
		tr.Finish(e)
		off++
	}
}
