package histogram

import (
	"sync"
	"testing"
	"time"
)

func TestObserve(t *testing.T) {
	var h H
	for _, d := range []time.Duration{0, 500 * time.Microsecond, 501 * time.Microsecond, time.Second, time.Hour, -time.Minute} {
		h.Observe(d)
	}
	var s Snapshot
	h.AddTo(&s)
	want := map[int]uint64{0: 3, 1: 1, 10: 1, 16: 1} // 0, -1m (as 0) and 0.5ms in the first; 0.501ms in (0.5, 1]; 1s in (0.5, 1]; an hour above 60s
	for i, c := range s.Counts {
		if c != want[i] {
			t.Fatalf("bucket %d: got %d, want %d (counts %v)", i, c, want[i], s.Counts)
		}
	}
	if want := 500*time.Microsecond + 501*time.Microsecond + time.Second + time.Hour; s.Count != 6 || s.Sum != want {
		t.Fatalf("got count %d sum %v, want 6 and %v", s.Count, s.Sum, want)
	}
	if got := s.Quantile(0.5); got != time.Millisecond {
		t.Fatalf("median: got %v, want 1ms (the bucket of the fourth observation)", got)
	}
}

func TestConcurrent(t *testing.T) {
	var h H
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				h.Observe(3 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var s Snapshot
	h.AddTo(&s)
	if s.Count != 8000 || s.Counts[3] != 8000 {
		t.Fatalf("count %d bucket(2.5ms, 5ms] %d, want 8000 and 8000", s.Count, s.Counts[3])
	}
}

func BenchmarkObserve(b *testing.B) {
	var h H
	for b.Loop() {
		h.Observe(7 * time.Millisecond)
	}
}
