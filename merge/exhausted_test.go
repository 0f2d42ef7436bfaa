package merge

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// TestRunAroundExhausted: a batch holding an item that has used up its
// attempts (Config.Exhausted) calls Do on the other items only, holds that one (the hook
// decides: a dead letter), and counts the call among the successful ones.
func TestRunAroundExhausted(t *testing.T) {
	var (
		calls atomic.Int64
		mu    sync.Mutex
		saw   []int // lanes Do saw
	)
	r := newRig(t, 2, Config{Num: 1, Ticker: time.Hour, Exhausted: func(attempt int) bool { return attempt > 2 }}, time.Hour,
		func(items []*dispatch.Item[msg, int]) error {
			calls.Add(1)
			mu.Lock()
			for _, it := range items {
				saw = append(saw, it.Msg.lane)
			}
			mu.Unlock()
			return nil
		})
	for i, l := range []int{0, 1} {
		it := r.p.Alloc()
		it.Msg, it.Lane = msg{l, int64(i)}, uint64(l)
		if err := r.p.Add(it, int64(i), 1); err != nil {
			t.Fatal(err)
		}
		if l == 0 {
			it.Attempt = 3 // failed twice, of at most 2 attempts
		}
	}
	r.p.Flush()
	waitUntil(t, 5*time.Second, "the hold", func() bool { return r.holds.Load() == 1 })
	waitUntil(t, 5*time.Second, "the handled item", func() bool { return r.stats.Handled() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(saw) != 1 || saw[0] != 1 {
		t.Errorf("lanes Do saw: got %v, want [1] (lane 0's item has used up its attempts)", saw)
	}
	if c, b := calls.Load(), r.stats.Batches(); b != c {
		t.Errorf("Stats.Batches: got %d after %d successful Do calls", b, c)
	}
}
