package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestBatchErrorBesideFailureFails: a BatchError beside another error
// (errors.Join, several %w: a transaction's commit failed, say) fails the
// whole batch, whatever it names: every message of the batch runs again
// and none is lost. Wrapped alone for context (one %w) it says what
// became of the batch: empty, nothing failed. Beside another error, an
// empty one was taken as "nothing failed" and the batch was committed
// without Do handling it (16 of 200 lost in each case; 5 of 5 runs of the
// API prober's program), and one naming item 0 had the other 15 taken as
// done.
func TestBatchErrorBesideFailureFails(t *testing.T) {
	errReset := errors.New("connection reset")
	for _, tt := range []struct {
		name  string
		fail  func(be *BatchError) error
		rerun bool // the first batch runs again whole
	}{
		{"empty, beside another error", func(be *BatchError) error { return fmt.Errorf("tx commit: %w (per item: %w)", errReset, be) }, true},
		{"empty, joined", func(be *BatchError) error { return errors.Join(errReset, be) }, true},
		{"naming item 0, joined", func(be *BatchError) error { be.Fail(0, errReset); return errors.Join(errReset, be) }, true},
		{"empty, wrapped alone", func(be *BatchError) error { return fmt.Errorf("store: %w", be) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const n, size = 200, 16
			r := newRig(t, "beside", 1, n, 10)
			w := r.work(0, 0)
			var mu sync.Mutex
			first := map[int64]bool{} // the failing call's offsets
			again := map[int64]bool{} // of those, run again
			cfg := r.config("beside")
			cfg.Size, cfg.Num = size, 2
			cfg.Retry = Retry{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
			g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
				mu.Lock()
				if len(first) == 0 {
					for _, m := range batch {
						first[m.Offset] = true
					}
					mu.Unlock()
					if !tt.rerun { // handled: the error says so
						if err := w.Do(ctx, batch); err != nil {
							return err
						}
					}
					var be BatchError
					return tt.fail(&be)
				}
				for _, m := range batch {
					if first[m.Offset] {
						again[m.Offset] = true
					}
				}
				mu.Unlock()
				return w.Do(ctx, batch)
			})
			r.runToEnd(g, cfg.GroupID)
			r.check(false)
			mu.Lock()
			defer mu.Unlock()
			if want := map[bool]int{true: len(first), false: 0}[tt.rerun]; len(again) != want {
				t.Errorf("of the failing call's %d messages, %d ran again; want %d", len(first), len(again), want)
			}
		})
	}
}

// TestAsBatchError: a BatchError is sole (it says what became of the
// batch) as Do's error, wrapped alone however deep, or joined with nils
// only (errors.Join drops them: a cleanup's nil error beside it); beside
// another error it is not. A nil *BatchError is none. Joined with a nil,
// the BatchError was read as beside another error, and the batch failed
// whole (found in review); a nil one made otel's span end panic.
func TestAsBatchError(t *testing.T) {
	var named BatchError
	named.Fail(0, errors.New("x"))
	var nilErr error
	var typedNil *BatchError
	other := errors.New("reset")
	for _, tt := range []struct {
		name     string
		err      error
		found    bool
		wantSole bool
	}{
		{"itself", &named, true, true},
		{"wrapped", fmt.Errorf("store: %w", &named), true, true},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", &named)), true, true},
		{"joined alone", errors.Join(&named), true, true},
		{"joined with a nil", errors.Join(nilErr, &named), true, true},
		{"joined with another error", errors.Join(other, &named), true, false},
		{"two %w", fmt.Errorf("%w (%w)", other, &named), true, false},
		{"a nil *BatchError", typedNil, false, false},
		{"a nil *BatchError wrapped", fmt.Errorf("x: %w", typedNil), false, false},
		{"another error", other, false, false},
		{"nil", nil, false, false},
	} {
		be, sole := AsBatchError(tt.err)
		if (be != nil) != tt.found || sole != tt.wantSole || tt.found && be != &named {
			t.Errorf("%s: AsBatchError gave %p, sole %v; want found %v, sole %v", tt.name, be, sole, tt.found, tt.wantSole)
		}
	}
	if got := typedNil.Len(); got != 0 {
		t.Errorf("a nil *BatchError's Len: got %d, want 0", got)
	}
	if got := typedNil.Error(); got == "" {
		t.Error("a nil *BatchError's Error is empty")
	}
}

// TestBatchErrorIndexes: Indexes lists every index marked, in the order
// marked, outside the batch too; nil for a nil BatchError.
func TestBatchErrorIndexes(t *testing.T) {
	var be BatchError
	be.Fail(3, errors.New("x"))
	be.Defer(0, time.Second)
	be.DeadLetter(7, errors.New("y"))
	be.Fail(-1, errors.New("z"))
	if got, want := be.Indexes(), []int{3, 0, 7, -1}; !slices.Equal(got, want) {
		t.Errorf("Indexes: got %v, want %v", got, want)
	}
	if got := (*BatchError)(nil).Indexes(); got != nil {
		t.Errorf("a nil *BatchError's Indexes: got %v, want nil", got)
	}
}

// TestBatchErrorOnlyDeferred: OnlyDeferred reads the verdicts Run takes
// from a BatchError for a batch of n items: those on indexes 0 to n-1, the
// first on each; true when there is one at least and all are Defer.
func TestBatchErrorOnlyDeferred(t *testing.T) {
	fail := errors.New("x")
	tests := []struct {
		name string
		mark func(be *BatchError)
		want bool
	}{
		{"nothing named", func(*BatchError) {}, false},
		{"every item deferred", func(be *BatchError) { be.Defer(0, time.Second); be.Defer(1, time.Second) }, true},
		{"one item deferred", func(be *BatchError) { be.Defer(1, time.Second) }, true},
		{"a deferral and a failure", func(be *BatchError) { be.Defer(0, time.Second); be.Fail(1, fail) }, false},
		{"a deferral and a dead letter", func(be *BatchError) { be.Defer(0, time.Second); be.DeadLetter(1, fail) }, false},
		{"a failure outside the batch beside a deferral", func(be *BatchError) { be.Defer(0, time.Second); be.Fail(2, fail) }, true},
		{"a deferral outside the batch only", func(be *BatchError) { be.Defer(2, time.Second) }, false},
		{"a deferral given first on an item", func(be *BatchError) { be.Defer(0, time.Second); be.Fail(0, fail) }, true},
		{"a failure given first on an item", func(be *BatchError) { be.Fail(0, fail); be.Defer(0, time.Second) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var be BatchError
			tt.mark(&be)
			if got := be.OnlyDeferred(2); got != tt.want {
				t.Errorf("OnlyDeferred(2): got %v, want %v", got, tt.want)
			}
		})
	}
	if (*BatchError)(nil).OnlyDeferred(2) {
		t.Error("a nil *BatchError's OnlyDeferred: got true, want false")
	}
}

// TestDeferredCallLogsNoFailure: a Do call whose BatchError only defers
// items (a throttled endpoint) is not a failure (Stats.DeferredCalls), and
// is not warned of as one: no "Do failed" line, a debug line instead. A
// call that fails an item still warns.
func TestDeferredCallLogsNoFailure(t *testing.T) {
	t.Parallel()
	const n, failing = 20, 7
	r := newRig(t, "deferred-log", 1, n, n)
	w := r.work(0, 0)
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := r.config("deferred-log")
	cfg.Size, cfg.Num, cfg.Logger = 1, 2, zap.New(core)
	cfg.Retry = Retry{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	var mu sync.Mutex
	seen := map[int64]int{} // calls by offset
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		m := batch[0]
		mu.Lock()
		seen[m.Offset]++
		call := seen[m.Offset]
		mu.Unlock()
		var be BatchError
		switch {
		case call > 1:
			return w.Do(ctx, batch)
		case m.Offset == failing:
			be.Fail(0, errors.New("fails once"))
		default:
			be.Defer(0, time.Millisecond)
		}
		return be.Err()
	})
	r.runToEnd(g, cfg.GroupID)
	r.check(false)
	st := g.Stats()
	failed := logs.FilterMessageSnippet("Do failed").FilterField(zap.Int64("offset", failing)).Len()
	if deferred := logs.FilterMessageSnippet("Do failed").Len() - failed; deferred != 0 || failed != 1 {
		t.Errorf("\"Do failed\" warnings: got %d of calls that only deferred and %d of offset %d's failed call, want 0 and 1", deferred, failed, failing)
	}
	if deferred := logs.FilterMessage("Do deferred items; they run again when due").FilterLevelExact(zapcore.DebugLevel).Len(); deferred != n-1 {
		t.Errorf("debug lines of deferred calls: got %d, want %d", deferred, n-1)
	}
	if st.DeferredCalls != n-1 || st.Failures != 1 {
		t.Errorf("got DeferredCalls %d, Failures %d; want %d and 1", st.DeferredCalls, st.Failures, n-1)
	}
}
