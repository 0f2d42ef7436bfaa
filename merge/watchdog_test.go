package merge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

var errTimeout = errors.New("timeout")

// TestTimeout: a call past Config.Timeout has its context cancelled with
// TimeoutCause, saw that deadline in ctx.Deadline, and counts as a failed
// attempt when it returns, even if it returned nil.
func TestTimeout(t *testing.T) {
	var mu sync.Mutex
	var causes []error
	var deadlineOK atomic.Bool
	first := true
	r := newRigCtx(t, 1, Config{Num: 1, Ticker: -1, Timeout: 50 * time.Millisecond, TimeoutCause: errTimeout, Grace: time.Hour}, time.Millisecond,
		func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
			mu.Lock()
			slow := first
			first = false
			mu.Unlock()
			if d, ok := ctx.Deadline(); ok && time.Until(d) <= 50*time.Millisecond && time.Until(d) > 0 {
				deadlineOK.Store(true)
			}
			if slow {
				<-ctx.Done()
				mu.Lock()
				causes = append(causes, context.Cause(ctx))
				mu.Unlock()
				return nil, nil // ignores the cancel: still a failed attempt
			}
			return nil, nil
		})
	r.feed(t, 1)
	r.waitCommitted(t, 1, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(causes) != 1 || !errors.Is(causes[0], errTimeout) {
		t.Fatalf("causes seen by the slow call: %v, want [%v]", causes, errTimeout)
	}
	if !deadlineOK.Load() {
		t.Fatal("ctx.Deadline did not report the call's timeout")
	}
	if got := r.stats.TimedOut.Load(); got != 1 {
		t.Fatalf("TimedOut: got %d, want 1", got)
	}
	if got := r.stats.Charged.Load(); got != 1 || r.holds.Load() != 1 {
		t.Fatalf("Charged %d, holds %d: want 1 and 1 (the timed-out call was a failed attempt)", got, r.holds.Load())
	}
}

// TestTimedOutCountedBeforeReturn: a call that ignores its cancelled
// context counts in TimedOut once the watchdog cancels it, while it is
// still running (a hung call is the one an operator must see), and not
// again when it returns.
func TestTimedOutCountedBeforeReturn(t *testing.T) {
	release := make(chan struct{})
	cancelled := make(chan struct{})
	r := newRigCtx(t, 1, Config{Num: 1, Ticker: -1, Timeout: 20 * time.Millisecond, TimeoutCause: errTimeout, Grace: time.Hour}, time.Millisecond,
		func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
			if items[0].Attempt == 1 {
				<-ctx.Done()
				close(cancelled)
				<-release // ignores the cancel
			}
			return nil, nil
		})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the rig's: a failed check does not leave the call hung
	r.feed(t, 1)
	<-cancelled
	deadline := time.Now().Add(10 * time.Second)
	for r.stats.TimedOut.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := r.stats.TimedOut.Load(); got != 1 {
		t.Fatalf("TimedOut while the call hangs past its cancel: got %d, want 1", got)
	}
	unblock()
	r.waitCommitted(t, 1, 10*time.Second)
	if got := r.stats.TimedOut.Load(); got != 1 {
		t.Fatalf("TimedOut after the call returned: got %d, want 1 (counted once)", got)
	}
}

// TestStuck: a call that ignores its cancelled context past Timeout plus
// Grace makes its worker stuck: OnStuck is told once, StuckNow counts it
// until the call returns, and the other worker goes on.
func TestStuck(t *testing.T) {
	release := make(chan struct{})
	stuck := make(chan int, 4)
	var since, entered atomic.Pointer[time.Time]
	var done atomic.Int64
	var r *rig
	r = newRigCtx(t, 1, Config{Num: 2, Ticker: -1, Timeout: 20 * time.Millisecond, TimeoutCause: errTimeout, Grace: 20 * time.Millisecond,
		OnStuck: func(worker int, _ uint64, s time.Time) { since.Store(&s); stuck <- worker }}, time.Millisecond,
		func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
			if items[0].Msg.lane == 0 && items[0].Attempt == 1 {
				now := time.Now()
				entered.Store(&now)
				<-release // ignores ctx
			}
			done.Add(1)
			return nil, nil
		})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	r.feed(t, 0, 1, 2, 3)
	select {
	case <-stuck:
	case <-time.After(5 * time.Second):
		t.Fatal("OnStuck not called")
	}
	waitUntil(t, 5*time.Second, "the other lanes done on the other worker, and the stuck call in Do", func() bool {
		return done.Load() >= 3 && entered.Load() != nil
	})
	if got := r.pool.StuckNow(); got != 1 {
		t.Fatalf("StuckNow: got %d, want 1", got)
	}
	// The stuck call started before Do was entered, and not long before.
	if s, e := *since.Load(), *entered.Load(); s.After(e) || e.Sub(s) > time.Second {
		t.Fatalf("OnStuck's since: got %v, want at most a second before Do was entered at %v", s, e)
	}
	var busy []time.Time
	for _, ws := range r.pool.Workers(nil) {
		if ws.Busy && ws.Stuck {
			busy = append(busy, ws.Since)
		}
	}
	if len(busy) != 1 || !busy[0].Equal(*since.Load()) {
		t.Fatalf("Workers: stuck and busy since %v, want one, since %v (as OnStuck was told)", busy, *since.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if len(stuck) != 0 {
		t.Fatal("OnStuck called more than once for one call")
	}
	close(release)
	r.waitCommitted(t, 4, 10*time.Second)
	if got := r.pool.StuckNow(); got != 0 {
		t.Fatalf("StuckNow after the call returned: got %d, want 0", got)
	}
	if got := r.stats.Stuck.Load(); got != 1 {
		t.Fatalf("Stats.Stuck: got %d, want 1", got)
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

var errHung = errors.New("hung call failed")

// TestOrphanedCallReturnChargesNothing: a call given up on (Orphan, as
// group does with Unordered once its worker is stuck) that later returns
// with an error charges none of its items: their copies, made one attempt
// on, run with attempt 2 whether the copies were made before or after the
// hung call returned, and no retry is counted for the hung call. Run with
// -race: a charge of the orphaned item would race with its owner reading
// it to make the copy.
func TestOrphanedCallReturnChargesNothing(t *testing.T) {
	tests := []struct {
		name string
		// returnFirst: the hung call returns before the owner makes the
		// copy; otherwise after the copy has run.
		returnFirst bool
	}{
		{"hung call returns before the copy is made", true},
		{"hung call returns after the copy ran", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orphaned := make(chan int, 1)
			var returned atomic.Bool
			var copyAttempt atomic.Int64
			var r *rig
			release := newGate(t) // opened after the pool stops
			r = newRigCtx(t, 1, Config{Num: 2, Ticker: -1, Timeout: 20 * time.Millisecond, TimeoutCause: errTimeout, Grace: 20 * time.Millisecond,
				OnStuck: func(worker int, call uint64, since time.Time) {
					orphaned <- r.s.Orphan(r.pool.Worker(worker), call)
				}}, time.Millisecond,
				func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
					if items[0].Attempt > 1 {
						copyAttempt.Store(int64(items[0].Attempt))
						return nil, nil
					}
					if tt.returnFirst {
						<-release.ch
					} else {
						time.Sleep(300 * time.Millisecond) // no synchronisation with the owner
					}
					returned.Store(true)
					return nil, errHung
				})
			r.feed(t, 0)
			select {
			case n := <-orphaned:
				if n != 1 {
					t.Fatalf("Orphan: got %d, want 1", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OnStuck not called")
			}
			if tt.returnFirst {
				select { // Orphan's wake, for the copy
				case <-r.p.Wake():
				default:
				}
				release.open()
				// The hung batch's item is handed back (Settle) after
				// its outcome was recorded: its push wakes the owner,
				// who has not made the copy yet.
				select {
				case <-r.p.Wake():
				case <-time.After(5 * time.Second):
					t.Fatal("timed out waiting for the hung call to be settled")
				}
			}
			r.waitCommitted(t, 1, 10*time.Second)
			r.pool.Stop() // the hung call has returned and been settled
			r.p.Advance()
			if !returned.Load() {
				t.Fatal("the hung call did not return before the pool stopped")
			}
			if got := r.p.Outstanding(); got != 0 {
				t.Fatalf("Outstanding once the hung call was settled and taken back: got %d, want 0", got)
			}
			if got := copyAttempt.Load(); got != 2 {
				t.Fatalf("attempt of the copy: got %d, want 2", got)
			}
			if got := r.stats.Charged.Load(); got != 0 {
				t.Fatalf("Charged: got %d, want 0 (the orphaned call's failure is not charged)", got)
			}
			if got := r.holds.Load(); got != 0 {
				t.Fatalf("holds: got %d, want 0", got)
			}
		})
	}
}

// gate is a channel a test opens once, by closing it; Cleanup opens what
// the test left closed, so that no call stays blocked.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// TestStuckReportOnReturnedCall: the watchdog judged a call stuck, and by
// the time OnStuck gives up on it (Orphan) the call has returned and the
// worker runs its next one. That next call is not given up on: it runs
// once, at attempt 1, and its result counts.
func TestStuckReportOnReturnedCall(t *testing.T) {
	reported, orphaned := make(chan struct{}, 1), make(chan int, 1)
	inNext := make(chan struct{})
	var mu sync.Mutex
	var nextAttempts []int
	var r *rig
	// The gates open after the pool stops (Cleanups run last first).
	release, proceed, nextRelease := newGate(t), newGate(t), newGate(t)
	r = newRigCtx(t, 1, Config{Num: 1, Ticker: -1, Timeout: 20 * time.Millisecond, TimeoutCause: errTimeout, Grace: 20 * time.Millisecond,
		OnStuck: func(worker int, call uint64, since time.Time) {
			reported <- struct{}{}
			<-proceed.ch
			orphaned <- r.s.Orphan(r.pool.Worker(worker), call)
		}}, time.Millisecond,
		func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
			switch it := items[0]; {
			case it.Msg.lane == 0 && it.Attempt == 1:
				<-release.ch // ignores ctx: stuck
			case it.Msg.lane == 1:
				mu.Lock()
				nextAttempts = append(nextAttempts, it.Attempt)
				first := len(nextAttempts) == 1
				mu.Unlock()
				if first {
					close(inNext)
					<-nextRelease.ch
				}
			}
			return nil, nil
		})
	r.feed(t, 0, 1)
	select {
	case <-reported:
	case <-time.After(5 * time.Second):
		t.Fatal("OnStuck not called")
	}
	release.open() // the stuck call returns; the worker takes lane 1
	select {
	case <-inNext:
	case <-time.After(5 * time.Second):
		t.Fatal("the next call did not start")
	}
	proceed.open()
	if n := <-orphaned; n != 0 {
		t.Errorf("Orphan after the stuck call returned: got %d items given up on, want 0", n)
	}
	nextRelease.open()
	r.waitCommitted(t, 2, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(nextAttempts) != 1 || nextAttempts[0] != 1 {
		t.Fatalf("attempts of the next call's item: got %v, want [1]", nextAttempts)
	}
}

// TestTimeoutError: a call past Timeout fails with TimeoutCause, wrapping
// what the handler returned, so that errors.Is finds the cause whatever
// the handler made of its cancelled ctx.
func TestTimeoutError(t *testing.T) {
	other := errors.New("store unavailable")
	for _, tt := range []struct {
		name       string
		cause, err error
		want       []error // errors.Is must find each
		text       string
	}{
		{"handler returned nil", errTimeout, nil, []error{errTimeout}, "timeout"},
		{"handler returned ctx.Err()", errTimeout, context.Canceled, []error{errTimeout, context.Canceled}, "timeout (context canceled)"},
		{"handler returned its own error", errTimeout, other, []error{errTimeout, other}, "timeout (store unavailable)"},
		{"handler returned the cause", errTimeout, fmt.Errorf("gave up: %w", errTimeout), []error{errTimeout}, "gave up: timeout"},
		{"no cause configured", nil, other, []error{context.DeadlineExceeded, other}, "context deadline exceeded (store unavailable)"},
		{"no cause configured, handler returned nil", nil, nil, []error{context.DeadlineExceeded}, "context deadline exceeded"},
	} {
		got := TimeoutError(tt.cause, tt.err)
		for _, w := range tt.want {
			if !errors.Is(got, w) {
				t.Errorf("%s: got %v, want it to wrap %v", tt.name, got, w)
			}
		}
		if got.Error() != tt.text {
			t.Errorf("%s: got %q, want %q", tt.name, got.Error(), tt.text)
		}
	}
}

// TestTimedOutCountsEachCallOnce: a call is counted once, whoever comes
// first, and a watchdog that comes late with an older call's number,
// after the worker counted a later call, counts nothing.
func TestTimedOutCountsEachCallOnce(t *testing.T) {
	p := Pool[msg, int]{stats: &Stats{}}
	var cs callState
	for _, call := range []uint64{1, 1, 2, 1, 3, 2, 3} {
		p.countTimedOut(&cs, call)
	}
	if got := p.stats.TimedOut.Load(); got != 3 {
		t.Fatalf("TimedOut after counting calls 1, 1, 2, 1, 3, 2, 3: got %d, want 3", got)
	}
}
