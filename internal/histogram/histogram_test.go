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

// TestQuantileBucket: a quantile that falls in the +Inf bucket says so
// (above the last bound), one in a bounded bucket gives that bucket's
// upper bound; Quantile gives the same bound either way.
func TestQuantileBucket(t *testing.T) {
	var h H
	for i := range 8 {
		h.Observe(time.Duration(i+1) * time.Minute) // 1m (at the last bound) to 8m
	}
	h.Observe(time.Millisecond)
	var s Snapshot
	h.AddTo(&s)
	for _, c := range []struct {
		q     float64
		le    time.Duration
		above bool
	}{
		{0.05, time.Millisecond, false}, // the 1ms record
		{0.15, time.Minute, false},      // the record of exactly 1m: at most the last bound
		{0.5, time.Minute, true},        // 4m: above every bound
		{0.99, time.Minute, true},
	} {
		le, above := s.QuantileBucket(c.q)
		if le != c.le || above != c.above {
			t.Errorf("QuantileBucket(%v): got %v, %v; want %v, %v (counts %v)", c.q, le, above, c.le, c.above, s.Counts)
		}
		if got := s.Quantile(c.q); got != c.le {
			t.Errorf("Quantile(%v): got %v, want %v", c.q, got, c.le)
		}
	}
	var empty Snapshot
	if le, above := empty.QuantileBucket(0.5); le != 0 || above {
		t.Errorf("empty: got %v, %v; want 0, false", le, above)
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
