package pqueue

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestPeekAndShiftOrder(t *testing.T) {
	base := time.Unix(1000, 0)
	q := New[int](0)
	r := rand.New(rand.NewPCG(1, 2))
	var want []int
	for i := 0; i < 500; i++ {
		d := r.IntN(10000)
		want = append(want, d)
		q.Push(&Entry[int]{Value: d, Deadline: base.Add(time.Duration(d) * time.Millisecond)})
	}
	slices.Sort(want)
	// Nothing is due before the earliest deadline.
	if e, wait := q.PeekAndShift(base.Add(-time.Second)); e != nil || wait <= 0 {
		t.Fatalf("PeekAndShift before any deadline: got entry %v wait %v, want nil and a positive wait", e, wait)
	}
	var got []int
	for {
		e, _ := q.PeekAndShift(base.Add(time.Hour))
		if e == nil {
			break
		}
		if e.Index() != -1 {
			t.Fatalf("popped entry index: got %d, want -1", e.Index())
		}
		got = append(got, e.Value)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pop order: got %v..., want %v...", got[:5], want[:5])
	}
	if e, wait := q.PeekAndShift(base); e != nil || wait != 0 {
		t.Fatalf("empty queue: got %v, %v; want nil, 0", e, wait)
	}
}

func TestRemoveAndUpdate(t *testing.T) {
	base := time.Unix(0, 0)
	q := New[string](4)
	tests := []struct {
		name string
		at   int
	}{{"a", 5}, {"b", 1}, {"c", 9}, {"d", 3}, {"e", 7}}
	entries := map[string]*Entry[string]{}
	for _, tt := range tests {
		e := &Entry[string]{Value: tt.name, Deadline: base.Add(time.Duration(tt.at))}
		entries[tt.name] = e
		q.Push(e)
	}
	q.Remove(entries["d"].Index())
	q.Update(entries["c"], base) // c becomes the earliest
	var got []string
	for q.Len() > 0 {
		got = append(got, q.Pop().Value)
	}
	want := []string{"c", "b", "a", "e"}
	if !slices.Equal(got, want) {
		t.Fatalf("order after Remove/Update: got %v, want %v", got, want)
	}
}

func BenchmarkPushPop(b *testing.B) {
	q := New[int](1024)
	now := time.Now()
	es := make([]Entry[int], 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e := &es[i%1024]
		e.Deadline = now.Add(time.Duration(i*7919%1024) * time.Microsecond)
		q.Push(e)
		if q.Len() == 1024 {
			for q.Len() > 0 {
				q.Pop()
			}
		}
	}
}
