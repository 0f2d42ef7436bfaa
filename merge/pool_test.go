package merge

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/leakcheck"

	"github.com/orderly-go/orderly/dispatch"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

type msg struct {
	lane int
	off  int64
}

// rig is a scheduler with one partition fed by the test and a pool whose
// handler is the test's.
type rig struct {
	s     *dispatch.Scheduler[msg, int]
	p     *dispatch.Partition[msg, int]
	pool  *Pool[msg, int]
	stats *Stats
	off   int64
	holds atomic.Int64

	mu       sync.Mutex
	deadOffs []int64 // offsets held as DeadLettered, finished at once
}

func newRig(t *testing.T, size int, cfg Config, backoff time.Duration, h func(items []*dispatch.Item[msg, int]) error) *rig {
	t.Helper()
	return newRigCtx(t, size, cfg, backoff, func(_ context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) { return nil, h(items) })
}

// newRigCtx is newRig with a handler that sees its context and returns
// verdicts. A held item's lane goes on after backoff (what group does
// through its queue), and the rig counts the holds.
func newRigCtx(t *testing.T, size int, cfg Config, backoff time.Duration, h func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error)) *rig {
	t.Helper()
	r := &rig{stats: NewStats(cfg.Num)}
	var timers sync.WaitGroup
	stop := make(chan struct{})
	r.s = dispatch.New[msg, int](dispatch.Options[msg, int]{Size: size, MaxInFlight: 1 << 20, Hold: func(it *dispatch.Item[msg, int], o dispatch.Outcome) {
		r.holds.Add(1)
		if o.Kind == DeadLettered {
			// As group does once the dead letter is written.
			r.mu.Lock()
			r.deadOffs = append(r.deadOffs, it.Msg.off)
			r.mu.Unlock()
			timers.Go(func() { r.s.Unhold(it, true) })
			return
		}
		timers.Go(func() {
			select {
			case <-time.After(backoff):
				r.s.Unhold(it, false)
			case <-stop:
			}
		})
	}})
	t.Cleanup(func() { close(stop); timers.Wait() })
	r.p = r.s.NewPartition(64)
	r.pool = Start(context.Background(), r.s, cfg, func(ctx context.Context, _ int, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
		return h(ctx, items)
	}, r.stats)
	t.Cleanup(r.pool.Stop)
	return r
}

func (r *rig) feed(t *testing.T, lanes ...int) {
	t.Helper()
	for _, l := range lanes {
		it := r.p.Alloc()
		it.Msg, it.Lane = msg{l, r.off}, uint64(l)
		if err := r.p.Add(it, r.off, 1); err != nil {
			t.Fatal(err)
		}
		r.off++
	}
	r.p.Flush()
}

// waitCommitted advances the partition (as its owner) until the frontier
// reaches want.
func (r *rig) waitCommitted(t *testing.T, want int64, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.p.Advance()
		if next, _ := r.p.Next(); next >= want {
			return
		}
		select {
		case <-r.p.Wake():
		case <-time.After(time.Millisecond):
		case <-deadline:
			next, _ := r.p.Next()
			t.Fatalf("frontier: got %d after %v, want %d", next, timeout, want)
		}
	}
}

func TestFlushOnSizeAndTicker(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		ticker time.Duration
		feed   int
		want   []int // batch sizes, in order
	}{
		{"full batches flush at once", 4, time.Hour, 8, []int{4, 4}},
		{"a partial batch waits for the ticker", 4, 30 * time.Millisecond, 3, []int{3}},
		{"negative ticker never waits", 4, -1, 1, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var sizes []int
			var first time.Time
			r := newRig(t, tt.size, Config{Num: 1, Ticker: tt.ticker}, time.Millisecond,
				func(items []*dispatch.Item[msg, int]) error {
					mu.Lock()
					if first.IsZero() {
						first = time.Now()
					}
					sizes = append(sizes, len(items))
					mu.Unlock()
					return nil
				})
			start := time.Now()
			lanes := make([]int, tt.feed)
			for i := range lanes {
				lanes[i] = i
			}
			r.feed(t, lanes...)
			r.waitCommitted(t, int64(tt.feed), 10*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if len(sizes) != len(tt.want) {
				t.Fatalf("batch sizes: got %v, want %v", sizes, tt.want)
			}
			for i := range sizes {
				if sizes[i] != tt.want[i] {
					t.Fatalf("batch sizes: got %v, want %v", sizes, tt.want)
				}
			}
			if tt.ticker > 0 && tt.feed < tt.size {
				if waited := first.Sub(start); waited < tt.ticker {
					t.Fatalf("partial batch ran after %v, want at least the ticker %v", waited, tt.ticker)
				}
			}
		})
	}
}

// TestLaneOrderAcrossRetries fails a fraction of Do calls at random: every
// lane must still see its messages in offset order, never two of its
// batches at once, and a failed lane's later messages must wait for it.
func TestLaneOrderAcrossRetries(t *testing.T) {
	const lanes, perLane = 20, 200
	var (
		mu      sync.Mutex
		running = make([]atomic.Int32, lanes)
		fails   atomic.Int64
		rng     = rand.New(rand.NewPCG(1, 2))
		order   = make([][]int64, lanes)
	)
	r := newRig(t, 8, Config{Num: 6, Ticker: time.Millisecond}, time.Millisecond,
		func(items []*dispatch.Item[msg, int]) error {
			seen := map[int]bool{}
			for _, it := range items {
				if !seen[it.Msg.lane] {
					seen[it.Msg.lane] = true
					if running[it.Msg.lane].Add(1) != 1 {
						t.Errorf("lane %d in two Do calls at once", it.Msg.lane)
					}
				}
			}
			time.Sleep(50 * time.Microsecond)
			mu.Lock()
			fail := rng.IntN(10) == 0
			if !fail {
				for _, it := range items {
					order[it.Msg.lane] = append(order[it.Msg.lane], it.Msg.off)
				}
			}
			mu.Unlock()
			for l := range seen {
				running[l].Add(-1)
			}
			if fail {
				fails.Add(1)
				return errors.New("injected")
			}
			return nil
		})
	var all []int
	for i := 0; i < perLane; i++ {
		for l := 0; l < lanes; l++ {
			all = append(all, l)
		}
	}
	r.feed(t, all...)
	r.waitCommitted(t, int64(len(all)), 30*time.Second)
	if fails.Load() == 0 {
		t.Fatal("no Do call failed: the test did not exercise retries")
	}
	mu.Lock()
	defer mu.Unlock()
	for l := range lanes {
		if len(order[l]) != perLane {
			t.Fatalf("lane %d: got %d messages done, want %d", l, len(order[l]), perLane)
		}
		for i, off := range order[l] {
			if want := int64(i*lanes + l); off != want {
				t.Fatalf("lane %d message %d: got offset %d, want %d (order broken)", l, i, off, want)
			}
		}
	}
}

// TestFailedLaneDoesNotBlockOthers: one lane fails forever; the others on
// the same single worker still finish.
func TestFailedLaneDoesNotBlockOthers(t *testing.T) {
	var done atomic.Int64
	var attempts atomic.Int64
	r := newRig(t, 1, Config{Num: 1, Ticker: -1}, time.Millisecond,
		func(items []*dispatch.Item[msg, int]) error {
			if items[0].Msg.lane == 0 {
				attempts.Add(1)
				return errors.New("poison")
			}
			done.Add(1)
			return nil
		})
	r.feed(t, 0, 0, 1, 2, 3, 1, 2, 3)
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() < 6 || attempts.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("other lanes done: got %d, want 6 (poison attempts %d)", done.Load(), attempts.Load())
		}
		time.Sleep(time.Millisecond)
	}
	r.p.Advance()
	if next, _ := r.p.Next(); next != 0 {
		t.Fatalf("frontier moved to %d past the failing head message", next)
	}
	if got := r.p.Outstanding(); got != 2 {
		t.Fatalf("outstanding: got %d, want 2 (the poison message and the one behind it)", got)
	}
}
