package group

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestParkedPoisonRunsOutOfAttempts: with Unordered and a DataPath every
// failure is parked (ParkAfter 0), so a message that always fails comes
// back from the on-disk queue for each retry. It must still be charged
// each failure: tried with Attempt 1, 2, 3 and then dead-lettered to the
// local store once, with Attempts 3 (a re-parked message that kept the
// attempt count of its first park would be retried for ever).
func TestParkedPoisonRunsOutOfAttempts(t *testing.T) {
	const n, keys, poison = 400, 20, 150
	r := newRig(t, "parked-poison", 1, n, keys)
	w := r.work(0, 0)
	cfg := r.config("parked-poison")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 8, 4, Unordered, t.TempDir()
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 3}
	var mu sync.Mutex
	var attempts []int
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
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
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "the poison message dead-lettered and everything committed", func() bool {
		st := g.Stats()
		return st.DeadLettered.MaxAttempts == 1 && st.Parked == 0 && r.b.Committed(cfg.GroupID, r.topic)[0] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(attempts)
	mu.Unlock()
	if want := []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("attempts of the parked poison message: got %v, want %v", got, want)
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
