package group

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/merge"
)

// TestParkedPoisonRunsOutOfAttempts: with Unordered and a DataPath every
// failure is parked (ParkAfter 0), so a message that always fails comes
// back from the on-disk queue for each retry. It must still be charged
// each failure: tried with Attempt 1, 2, 3 and then dead-lettered to the
// local store once, with Attempts 3 (a re-parked message that kept the
// attempt count of its first park would be retried for ever). Each
// comes back through New, which sees the attempt Do then sees.
func TestParkedPoisonRunsOutOfAttempts(t *testing.T) {
	const n, keys, poison = 400, 20, 150
	r := newRig(t, "parked-poison", 1, n, keys)
	w := r.work(0, 0)
	cfg := r.config("parked-poison")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 8, 4, Unordered, t.TempDir()
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 3}
	var mu sync.Mutex
	var attempts, decoded []int // what Do saw; what New saw (each comes back through New)
	g, err := New(cfg, Handler[*Message]{
		New: func(m *Message) (*Message, error) {
			if m.Offset == poison {
				mu.Lock()
				decoded = append(decoded, m.Attempt)
				mu.Unlock()
			}
			return m, nil
		},
		Do: func(ctx context.Context, batch []*Message) error {
			var be BatchError
			ok := make([]*Message, 0, len(batch))
			for i, m := range batch {
				if m.Offset == poison {
					mu.Lock()
					attempts = append(attempts, m.Attempt)
					mu.Unlock()
					be.Fail(i, errors.New("always fails"))
					continue
				}
				ok = append(ok, m)
			}
			if err := w.Do(ctx, ok); err != nil {
				return err
			}
			return be.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, g)
	waitFor(t, time.Minute, "the poison message dead-lettered and everything committed", func() bool {
		st := g.Stats()
		return st.DeadLettered.MaxAttempts == 1 && st.Parked == 0 && r.b.Committed(cfg.GroupID, r.topic)[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got, gotNew := slices.Clone(attempts), slices.Clone(decoded)
	mu.Unlock()
	if want := []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("attempts of the parked poison message: got %v, want %v", got, want)
	}
	if !slices.Equal(gotNew, got) {
		t.Fatalf("attempts New saw: got %v, want %v (as Do saw them)", gotNew, got)
	}
	st, err := deadletter.Open(filepath.Join(cfg.DataPath, deadletter.DirName), deadletter.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var infos []deadletter.Info
	if err := st.Scan(func(_ int64, rec deadletter.Record) error {
		info, err := deadletter.ParseInfo(rec.Headers)
		infos = append(infos, info)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Offset != poison || infos[0].Attempts != 3 || infos[0].Reason != "max_attempts" {
		t.Fatalf("local dead letters: got %+v, want one of offset %d, 3 attempts, reason max_attempts", infos, poison)
	}
}

// TestParkedRedeliveredTogether: parked messages that come due together
// run together, on as many workers as are free, however small Chan is
// (Size 1 makes it 1). Each redelivered message's Do waits until the
// first `together` of them are all inside Do at once, which a redelivery
// that handed out one parked message at a time would never reach.
func TestParkedRedeliveredTogether(t *testing.T) {
	const n, keys, parked, together = 200, 20, 16, 4
	r := newRig(t, "parked-together", 1, n, keys)
	w := r.work(0, 0)
	cfg := r.config("parked-together")
	cfg.Size, cfg.Num, cfg.Ticker, cfg.Ordering, cfg.DataPath = 1, 8, -1, Unordered, t.TempDir()
	var mu sync.Mutex
	seen := make(map[int64]bool)
	inside := 0
	all := make(chan struct{})
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		m := batch[0]
		if m.Offset < parked {
			mu.Lock()
			again := seen[m.Offset]
			seen[m.Offset] = true
			if !again {
				mu.Unlock()
				r.markSettled(m.Partition, m.Offset)
				var be BatchError
				be.Defer(0, 50*time.Millisecond)
				return be.Err()
			}
			if inside++; inside == together {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "every parked message redelivered and everything committed", func() bool {
		st := g.Stats()
		return st.Parked == 0 && st.Handled == n && r.b.Committed(cfg.GroupID, r.topic)[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.checkOrder(false, false)
}

// TestParkedOrphanFinishesItsQueueMessage: a parked message whose
// redelivered call hangs past MsgTimeout is given up on and a copy runs
// in its place (Unordered); the copy's success finishes the queue message
// the hung call was running, so nothing stays parked and a restart would
// not run it again.
func TestParkedOrphanFinishesItsQueueMessage(t *testing.T) {
	t.Parallel() // waits out MsgTimeout and its grace mostly
	const n, keys, target = 100, 10, 7
	r := newRig(t, "parked-orphan", 1, n, keys)
	w := r.work(0, 0)
	cfg := r.config("parked-orphan")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 1, 4, Unordered, t.TempDir()
	cfg.MsgTimeout = 200 * time.Millisecond // a hung call is given up on after it and its grace (1 s)
	release := make(chan struct{})
	var calls atomic.Int64
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		m := batch[0]
		if m.Offset == target {
			switch calls.Add(1) {
			case 1:
				r.markSettled(m.Partition, m.Offset)
				return errors.New("first attempt fails: parked")
			case 2:
				<-release // hangs, ignoring ctx, until the test ends
				return nil
			}
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "the copy of the hung call to finish and everything to be committed", func() bool {
		return calls.Load() >= 3 && r.b.Committed(cfg.GroupID, r.topic)[0] == n
	})
	waitFor(t, 30*time.Second, "nothing left parked", func() bool { return g.Stats().Parked == 0 })
	close(release)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("calls with offset %d: got %d, want 3 (failed, hung, its copy)", target, got)
	}
}

// TestParkedDrainedAtStop: a parked message's redelivered call still
// running when Run stops gets DrainTimeout, as a claim's calls do. One
// that returns nil in time finishes its queue message: Handled, and
// nothing left parked for the next run. One still running then is given
// up on: it returns nil once its ctx is cancelled, and that finishes
// nothing: it is Abandoned, not Handled, and its queue message stays
// parked, so the next run on the same DataPath handles it. Either way each
// message is handled once over both runs.
func TestParkedDrainedAtStop(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain
	const n, target = 10, 3
	for _, tt := range []struct {
		name  string
		drain time.Duration
		// call is the redelivered call of the parked message; stopping
		// is closed when the test stops the first run.
		call func(ctx context.Context, stopping <-chan struct{})
		// the first run's Handled, Abandoned and Parked after it stopped,
		// and the second run's Handled
		handled, abandoned, parked, second int64
	}{
		{"returns nil in time", 5 * time.Second, func(ctx context.Context, stopping <-chan struct{}) {
			<-stopping
			// Ignores ctx, and returns after the rest of Run's stop (the
			// claims' drains and final commits) is done: only a drain of
			// the parked side partition waits for it.
			time.Sleep(1500 * time.Millisecond)
		}, n, 0, 0, 0},
		{"returns nil once cancelled", 200 * time.Millisecond, func(ctx context.Context, _ <-chan struct{}) {
			<-ctx.Done() // honours its ctx, and reports success
		}, n - 1, 1, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := "parked-drained-" + strings.ReplaceAll(tt.name, " ", "-")
			r := newRig(t, name, 1, n, n)
			w := r.work(0, 0)
			cfg := r.config(name)
			cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath, cfg.DrainTimeout = 1, 2, Unordered, t.TempDir(), tt.drain
			var calls atomic.Int64
			stopping := make(chan struct{})
			first := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
				if m := batch[0]; m.Offset == target {
					switch calls.Add(1) {
					case 1:
						r.markSettled(m.Partition, m.Offset)
						var be BatchError
						be.Defer(0, 10*time.Millisecond) // parked (ParkAfter 0)
						return be.Err()
					case 2: // redelivered from the parked queue
						tt.call(ctx, stopping)
					}
				}
				return w.Do(ctx, batch)
			})
			stop := run(t, first)
			waitFor(t, time.Minute, "the parked message's redelivered call, and the rest handled and committed", func() bool {
				return calls.Load() == 2 && first.Stats().Handled == n-1 && r.b.Committed(cfg.GroupID, r.topic)[0] == n
			})
			close(stopping)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			st := first.Stats()
			if st.Handled != tt.handled || st.Abandoned != tt.abandoned || st.Parked != tt.parked {
				t.Errorf("first run: got Handled %d, Abandoned %d, Parked %d; want %d, %d and %d",
					st.Handled, st.Abandoned, st.Parked, tt.handled, tt.abandoned, tt.parked)
			}

			second := newGroup(t, cfg, w.Do)
			stop = run(t, second)
			waitFor(t, time.Minute, "nothing left parked", func() bool {
				st := second.Stats()
				return st.Handled >= tt.second && st.Parked == 0
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if h1, h2 := st.Handled, second.Stats().Handled; h1+h2 != n || h2 != tt.second {
				t.Errorf("Handled over both runs: got %d + %d, want %d + %d (offset %d once)", h1, h2, tt.handled, tt.second, target)
			}
		})
	}
}

// TestParkedDrainCancelsLateCalls: at a stop, a parked message's
// redelivered call still running past DrainTimeout has its ctx cancelled
// by the side partition's drain, as a claim's drain cancels its late
// calls, with ErrShutdown naming the parked messages: by the time the
// drain warns that it leaves the message parked, the call's ctx is done,
// rather than only once the workers' ctx ends after the rest of Run's
// stop.
func TestParkedDrainCancelsLateCalls(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain
	const n, target = 10, 3
	r := newRig(t, "parked-drain-cancel", 1, n, n)
	w := r.work(0, 0)
	cfg := r.config("parked-drain-cancel")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath, cfg.DrainTimeout = 1, 2, Unordered, t.TempDir(), 200*time.Millisecond
	var calls atomic.Int64
	var lateCtx atomic.Pointer[context.Context] // the redelivered call's
	var mu sync.Mutex
	var warned bool
	var atWarning error // the call's ctx's cause when the drain warned; nil: not cancelled
	cfg.Logger = cfg.Logger.WithOptions(zap.Hooks(func(e zapcore.Entry) error {
		if !strings.HasPrefix(e.Message, "parked messages still running after the drain timeout") {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		warned = true
		if ctx := lateCtx.Load(); ctx != nil && (*ctx).Err() != nil {
			atWarning = context.Cause(*ctx)
		}
		return nil
	}))
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		if m := batch[0]; m.Offset == target {
			switch calls.Add(1) {
			case 1:
				r.markSettled(m.Partition, m.Offset)
				var be BatchError
				be.Defer(0, 10*time.Millisecond) // parked (ParkAfter 0)
				return be.Err()
			case 2: // redelivered from the parked queue
				lateCtx.Store(&ctx)
				<-ctx.Done()
				return ctx.Err()
			}
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "the parked message's redelivered call, and the rest handled and committed", func() bool {
		return calls.Load() == 2 && g.Stats().Handled == n-1 && r.b.Committed(cfg.GroupID, r.topic)[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !warned {
		t.Fatal(`no "parked messages still running after the drain timeout" warning`)
	}
	if atWarning == nil || !errors.Is(atWarning, ErrShutdown) || !strings.Contains(atWarning.Error(), "parked messages under "+cfg.DataPath) {
		t.Errorf("the redelivered call's ctx when the drain warned: got cause %v, want cancelled with ErrShutdown naming the parked messages under %s", atWarning, cfg.DataPath)
	}
	if st := g.Stats(); st.Abandoned != 1 || st.Parked != 1 {
		t.Errorf("got Abandoned %d, Parked %d; want 1 and 1 (left parked for the next run)", st.Abandoned, st.Parked)
	}
}

// TestParkedDrainWarnsByCancelledCalls: the parked side partition's drain
// warns of what it leaves unfinished by what it did: a message whose park
// is still being written when DrainTimeout passes is in no call, so the
// drain cancels nothing, and its warning must not say it is cancelling.
func TestParkedDrainWarnsByCancelledCalls(t *testing.T) {
	t.Parallel()
	logger, logs := observed()
	g := offlineGroup(t, func(c *Config) {
		c.Size, c.Num, c.Ordering, c.DataPath, c.DrainTimeout, c.Logger = 1, 1, Unordered, t.TempDir(), 50*time.Millisecond, logger
	})
	if err := g.fail.open(nil); err != nil { // the parked queue, as Run opens it
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.fail.close(); err != nil {
			t.Error(err)
		}
	})
	p := g.fail.park
	p.side = g.sched.NewSidePartition(4) // its writer and redelivery do not run
	it := p.side.Alloc()
	it.Msg = Message{Topic: "t", Partition: 0, Offset: 7}
	if err := p.side.Add(it, 1, 1); err != nil {
		t.Fatal(err)
	}
	p.side.Flush()
	b := g.sched.NewBatch(g.sched.NewWorker())
	if st := g.sched.Next(b, true, nil); st != dispatch.Run || len(b.Items) != 1 {
		t.Fatalf("Next: got %v with %d items, want Run with 1", st, len(b.Items))
	}
	// Deferred: the hold hook queues its park, which nothing writes.
	g.sched.Settle(b, []dispatch.Outcome{{Verdict: dispatch.Hold, Kind: merge.Deferred, Delay: time.Hour}})
	p.drain(context.Background())

	entries := logs.FilterMessageSnippet("parked messages").All()
	if len(entries) != 1 {
		t.Fatalf("drain warnings: got %d, want 1", len(entries))
	}
	e := entries[0]
	if cancelled := e.ContextMap()["cancelled"]; cancelled != int64(0) || strings.Contains(e.Message, "cancelling") || e.ContextMap()["unfinished"] != int64(1) {
		t.Errorf("drain warning: got %q with cancelled %v, unfinished %v; want cancelled 0, unfinished 1 and no word of cancelling", e.Message, cancelled, e.ContextMap()["unfinished"])
	}
}
