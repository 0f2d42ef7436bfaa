package merge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

var errPoison = errors.New("poison")

// TestPoisonSplit: Size 256, one item that fails every time. Its batch
// mates in other lanes finish after about 2*log2(256) calls, no innocent
// item is charged an attempt, and only the poison's lane is held: its later
// message waits, the others do not.
func TestPoisonSplit(t *testing.T) {
	const size, poison = 256, 100 // offset 100, lane 100 % 64
	var mu sync.Mutex
	calls, poisonCalls := 0, 0
	charged := map[int64]int{}
	r := newRig(t, size, Config{Num: 1, Ticker: time.Hour}, time.Hour,
		func(items []*dispatch.Item[msg, int]) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			for _, it := range items {
				if it.Attempt > 1 {
					charged[it.Msg.off] = it.Attempt
				}
				if it.Msg.off == poison {
					poisonCalls++
					return errPoison
				}
			}
			return nil
		})
	lanes := make([]int, size)
	for i := range lanes {
		lanes[i] = i % 64
	}
	r.feed(t, lanes...)
	r.waitCommitted(t, poison, 10*time.Second)
	// Everything but the poison and its later lane mates finishes.
	const want = size - 1 - poison - (size-1-poison)/64
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.p.Advance()
		if got := r.p.FinishedAbove(); got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("finished above the poison: got %d, want %d", r.p.FinishedAbove(), want)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls > 2*8+1 {
		t.Fatalf("Do calls to isolate one poison among 256: got %d, want at most %d", calls, 2*8+1)
	}
	if len(charged) != 0 {
		t.Fatalf("items handed out with attempts charged: %v, want none before the backoff", charged)
	}
	if got := r.stats.Charged.Load(); got != 1 {
		t.Fatalf("items charged an attempt: got %d, want 1 (the poison)", got)
	}
	if next, _ := r.p.Next(); next != poison {
		t.Fatalf("frontier: got %d, want %d (the poison)", next, poison)
	}
	if got := r.p.Unfinished(); got != 1+int64((size-1-poison)/64) {
		t.Fatalf("unfinished: got %d, want the poison and its %d later lane mates", got, (size-1-poison)/64)
	}
	t.Logf("%d calls (%d with the poison) isolated it; %d splits", calls, poisonCalls, r.stats.Splits.Load())
}

// TestNamedFailure: a call that names one item as failed finishes the
// others except the failed item's later lane mates, which go back behind
// it, uncharged, and run after its retry, in order.
func TestNamedFailure(t *testing.T) {
	var mu sync.Mutex
	var order []int64
	attempts := map[int64][]int{}
	failedOnce := false
	r := newRigCtx(t, 8, Config{Num: 1, Ticker: -1}, 20*time.Millisecond,
		func(_ context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, it := range items {
				attempts[it.Msg.off] = append(attempts[it.Msg.off], it.Attempt)
			}
			for i, it := range items {
				if it.Msg.off == 1 && !failedOnce {
					failedOnce = true
					for _, later := range items[i+1:] {
						order = append(order, later.Msg.off) // the handler ran them anyway
					}
					return []Verdict{{Index: i, Kind: Failed, Err: errPoison}}, errPoison
				}
				order = append(order, it.Msg.off)
			}
			return nil, nil
		})
	r.feed(t, 0, 1, 2, 1, 1) // lane 1: offsets 1, 3, 4
	r.waitCommitted(t, 5, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for off, want := range map[int64][]int{1: {1, 2}, 3: {1, 1}, 4: {1, 1}, 0: {1}, 2: {1}} {
		if !slices.Equal(attempts[off], want) {
			t.Fatalf("offset %d attempts: got %v, want %v", off, attempts[off], want)
		}
	}
	// After the failure, lane 1 runs 1, 3, 4 again in that order.
	var lane1 []int64
	for _, off := range order[len(order)-3:] {
		lane1 = append(lane1, off)
	}
	if !slices.Equal(lane1, []int64{1, 3, 4}) {
		t.Fatalf("lane 1 after the retry: got %v, want [1 3 4] (order: %v)", lane1, order)
	}
}

// TestCancelledCallIsNotCharged: a call whose context was cancelled (its
// partition revoked past the drain, or shutdown) and that fails hands its
// items back uncharged.
func TestCancelledCallIsNotCharged(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	first := true
	var r *rig
	r = newRigCtx(t, 4, Config{Num: 1, Ticker: -1}, time.Hour,
		func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
			mu.Lock()
			seen = append(seen, items[0].Attempt)
			cancel := first
			first = false
			mu.Unlock()
			if cancel {
				r.s.CancelRunning(r.p, errors.New("revoked"))
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			return nil, nil
		})
	r.feed(t, 1)
	r.waitCommitted(t, 1, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int{1, 1}) {
		t.Fatalf("attempts seen: got %v, want [1 1] (the cancelled call is not charged)", seen)
	}
	if got := r.stats.Cancelled.Load(); got != 1 {
		t.Fatalf("cancelled calls: got %d, want 1", got)
	}
}
