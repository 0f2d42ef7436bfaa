package merge

import (
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/histogram"
)

// TestCallDurationsLeaveOutWaits: a call that follows straight on from the
// worker's last starts at that call's end reading, but a worker that waited
// in between (for work, or for a partial batch's Ticker) reads the clock
// again, so the wait is not counted in the next call's duration. Every
// call here returns at once: the calls' durations add up to far less
// than the 200 ms wait, also with the race detector on a loaded machine,
// unless one of them took the wait in.
func TestCallDurationsLeaveOutWaits(t *testing.T) {
	const wait = 200 * time.Millisecond
	tests := []struct {
		name   string
		size   int
		ticker time.Duration
		first  []int // lanes fed and committed before the wait
		then   []int // lanes fed after it
		sleep  bool  // the test waits before feeding then (the worker waits for work)
	}{
		{"the worker waited for work", 1, time.Hour, []int{0, 1, 2}, []int{3}, true},
		// then is a partial batch: the worker waits out the Ticker
		{"the worker waited for a partial batch", 2, wait, []int{0, 1}, []int{2}, false},
		// a full batch and a partial one at once: from the first call the
		// worker goes straight to the partial batch and waits out the Ticker
		{"a call, then a partial batch", 2, wait, []int{0, 1, 2}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.size, Config{Num: 1, Ticker: tt.ticker}, time.Millisecond,
				func([]*dispatch.Item[msg, int]) error { return nil })
			r.feed(t, tt.first...)
			r.waitCommitted(t, int64(len(tt.first)), 10*time.Second)
			if tt.then == nil {
				var s histogram.Snapshot
				r.pool.CallDurations(&s)
				if s.Count != 2 || s.Sum >= wait/2 {
					t.Fatalf("calls' durations: got %d calls, sum %v; want 2, under %v", s.Count, s.Sum, wait/2)
				}
				return
			}
			if tt.sleep {
				time.Sleep(wait)
			}
			r.feed(t, tt.then...)
			r.waitCommitted(t, int64(len(tt.first)+len(tt.then)), 10*time.Second)
			var s histogram.Snapshot
			r.pool.CallDurations(&s)
			if s.Count == 0 || s.Sum >= wait/2 {
				t.Fatalf("calls' durations: got %d calls, sum %v; want some, under %v", s.Count, s.Sum, wait/2)
			}
		})
	}
}
