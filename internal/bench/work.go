package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/internal/loadgen"
)

// Work is the simulated handler every contender runs: a call handling n
// messages sleeps PerCall + n*PerItem (the simulated I/O), and fails with
// probability FailRate, decided by a deterministic hash of the call's first
// message and attempt, so every contender sees the same failures whatever
// its scheduling.
type Work struct {
	PerCall  time.Duration
	PerItem  time.Duration
	FailRate float64
	// Stall makes every call block until the run ends (the memory scenario).
	Stall bool
}

// errSimulated is what a failing simulated call returns.
var errSimulated = errors.New("bench: simulated handler failure")

// Cost is the simulated I/O time of a call handling n messages.
func (w Work) Cost(n int) time.Duration { return w.PerCall + time.Duration(n)*w.PerItem }

// Fails reports whether the attempt-th call whose first message is
// partition/offset fails (loadgen.Fails with seed 0).
func (w Work) Fails(partition int32, offset int64, attempt int) bool {
	return loadgen.Fails(w.FailRate, 0, partition, offset, attempt)
}

// Do simulates one call on n messages: it sleeps the cost, or blocks until
// ctx ends when stalled, and returns errSimulated when the call fails.
func (w Work) Do(ctx context.Context, partition int32, offset int64, attempt, n int) error {
	if w.Stall {
		<-ctx.Done()
		return ctx.Err()
	}
	if d := w.Cost(n); d > 0 {
		time.Sleep(d)
	}
	if w.Fails(partition, offset, attempt) {
		return errSimulated
	}
	return nil
}

// doInline is a call for contenders with no retry concept (databus and
// limit; raw uses doInlineUncounted): it repeats the call until it succeeds, counting the failures, and
// reports the n messages handled. It gives up, returning false, only when
// ctx ends.
func (w Work) doInline(ctx context.Context, t *tracker, partition int32, offset int64, n int) bool {
	if !w.doInlineUncounted(ctx, t, partition, offset, n) {
		return false
	}
	t.finish(n)
	return true
}

// doInlineUncounted is doInline without counting the messages handled: the
// caller counts them (see rawHandler).
func (w Work) doInlineUncounted(ctx context.Context, t *tracker, partition int32, offset int64, n int) bool {
	t.begin()
	for attempt := 1; ; attempt++ {
		err := w.Do(ctx, partition, offset, attempt, n)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		t.failed.Add(1)
	}
}

// tracker times one run: the start of the first call, the end of the call
// that brings the count to expected, and the total since the run began.
type tracker struct {
	base     time.Time
	expected int64
	handled  atomic.Int64
	failed   atomic.Int64
	first    atomic.Int64 // ns since base, +1 so that 0 means unset
	last     atomic.Int64
	done     chan struct{}
	onDone   func()
}

// newTracker starts timing a run of expected messages; onDone (if not nil)
// is called once, by the call that handles the last of them, typically to
// cancel the run's context.
func newTracker(expected int, onDone func()) *tracker {
	return &tracker{base: time.Now(), expected: int64(expected), done: make(chan struct{}), onDone: onDone}
}

// begin marks the start of a handler call.
func (t *tracker) begin() {
	if t.first.Load() == 0 {
		t.first.CompareAndSwap(0, int64(time.Since(t.base))+1)
	}
}

// finish counts n handled messages; the call that reaches expected closes
// done and calls onDone.
func (t *tracker) finish(n int) {
	v := t.handled.Add(int64(n))
	if v >= t.expected && v-int64(n) < t.expected {
		t.last.Store(int64(time.Since(t.base)) + 1)
		close(t.done)
		if t.onDone != nil {
			t.onDone()
		}
	}
}

// complete reports whether expected messages were handled.
func (t *tracker) complete() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// result is the run's measurement; an incomplete run is measured up to now.
func (t *tracker) result() Result {
	first, last := t.first.Load(), t.last.Load()
	if last == 0 {
		last = int64(time.Since(t.base)) + 1
	}
	r := Result{Handled: t.handled.Load(), Failed: t.failed.Load(), Total: time.Duration(last - 1)}
	if first > 0 {
		r.Elapsed = time.Duration(last - first)
	}
	return r
}
