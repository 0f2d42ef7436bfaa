package group

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/deadletter"
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
