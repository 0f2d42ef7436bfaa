package merge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// TestDeferredCallsAreNotFailures: a call of four items (four lanes) whose
// verdicts are all Deferred counts in Stats.DeferredCalls, not Failures,
// whether it deferred every item or some (the others done); a Failed or
// DeadLettered verdict beside a deferral makes it a failure, and so does
// running past Config.Timeout, whatever verdicts it returned. So does a
// call whose context was cancelled (a revoke, a shutdown): its verdicts
// are not applied, its items run again, and it counts in Cancelled. Every
// later call succeeds.
func TestDeferredCallsAreNotFailures(t *testing.T) {
	named := errors.New("named")
	tests := []struct {
		name          string
		verdicts      []Verdict
		late          bool // the first call returns past Timeout
		cancel        bool // the first call's context is cancelled (CancelRunning) before it returns
		wantFailures  int64
		wantDeferred  int64 // Stats.DeferredCalls
		wantItems     int64 // Stats.Deferred: items deferred
		wantCancelled int64
	}{
		{"every item deferred", []Verdict{{0, Deferred, time.Millisecond, nil}, {1, Deferred, time.Millisecond, nil},
			{2, Deferred, time.Millisecond, nil}, {3, Deferred, time.Millisecond, nil}}, false, false, 0, 1, 4, 0},
		{"some deferred, the others done", []Verdict{{1, Deferred, time.Millisecond, nil}, {3, Deferred, time.Millisecond, nil}}, false, false, 0, 1, 2, 0},
		{"a deferral beside a failure", []Verdict{{0, Deferred, time.Millisecond, nil}, {1, Failed, 0, named}}, false, false, 1, 0, 1, 0},
		{"a deferral beside a dead letter", []Verdict{{0, Deferred, time.Millisecond, nil}, {2, DeadLettered, 0, named}}, false, false, 1, 0, 1, 0},
		{"every item deferred past Timeout", []Verdict{{0, Deferred, time.Millisecond, nil}, {1, Deferred, time.Millisecond, nil},
			{2, Deferred, time.Millisecond, nil}, {3, Deferred, time.Millisecond, nil}}, true, false, 1, 0, 0, 0},
		{"an item deferred after a cancel", []Verdict{{1, Deferred, time.Millisecond, nil}}, false, true, 1, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			cfg := Config{Num: 1, Ticker: 5 * time.Millisecond, Timeout: 40 * time.Millisecond, TimeoutCause: errTimeout, Grace: time.Hour}
			var r *rig
			r = newRigCtx(t, 4, cfg, time.Millisecond, func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
				mu.Lock()
				calls++
				first := calls == 1
				mu.Unlock()
				if !first {
					return nil, nil
				}
				if len(items) != 4 {
					t.Errorf("first call: got %d items, want 4", len(items))
				}
				if tt.late {
					<-ctx.Done()
				}
				if tt.cancel {
					r.s.CancelRunning(r.p, errors.New("revoked"))
					<-ctx.Done()
				}
				return append([]Verdict(nil), tt.verdicts...), named
			})
			r.feed(t, 0, 1, 2, 3)
			r.waitCommitted(t, 4, 10*time.Second)
			if got := r.stats.Failures.Load(); got != tt.wantFailures {
				t.Errorf("Failures: got %d, want %d", got, tt.wantFailures)
			}
			if got := r.stats.DeferredCalls.Load(); got != tt.wantDeferred {
				t.Errorf("DeferredCalls: got %d, want %d", got, tt.wantDeferred)
			}
			if got := r.stats.Deferred.Load(); got != tt.wantItems {
				t.Errorf("Deferred (items): got %d, want %d", got, tt.wantItems)
			}
			if got := r.stats.Cancelled.Load(); got != tt.wantCancelled {
				t.Errorf("Cancelled: got %d, want %d", got, tt.wantCancelled)
			}
			mu.Lock()
			n := int64(calls)
			mu.Unlock()
			if sum := r.stats.Batches() + r.stats.Failures.Load() + r.stats.DeferredCalls.Load(); sum != n {
				t.Errorf("Batches + Failures + DeferredCalls: got %d, want %d (every call counted once)", sum, n)
			}
		})
	}
}
