package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWrappedEmptyBatchErrorFails: a BatchError that names nothing, wrapped
// in an error that says something else failed (a transaction's commit,
// say), fails the whole batch: its messages run again, and none is lost.
// They were taken as done and committed without Do handling them (5 of 5
// runs of the prober's program lost the first batch).
func TestWrappedEmptyBatchErrorFails(t *testing.T) {
	errReset := errors.New("connection reset")
	for _, tt := range []struct {
		name string
		wrap func(be *BatchError) error
	}{
		{"wrapped beside another error", func(be *BatchError) error { return fmt.Errorf("tx commit: %w (per item: %w)", errReset, be) }},
		{"joined", func(be *BatchError) error { return errors.Join(errReset, be) }},
		{"wrapped alone", func(be *BatchError) error { return fmt.Errorf("store: %w", be) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, "wrapped-empty", 1, 200, 10)
			w := r.work(0, 0)
			var failed atomic.Bool
			cfg := r.config("wrapped-empty")
			cfg.Size, cfg.Num = 16, 2
			cfg.Retry = Retry{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
			g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
				if !failed.Swap(true) {
					var be BatchError
					return tt.wrap(&be)
				}
				return w.Do(ctx, batch)
			})
			r.runToEnd(g, cfg.GroupID)
			r.check(false)
		})
	}
}

// TestRetriesCountLaneMates: Do names all 3 messages of one key failed on
// their first attempt; each is handed out again once, at attempt 2, and
// Stats.Retries counts 3. Only the lane's first was counted (1): the later
// ones go back charged behind it, where the hook that counted never sees
// them.
func TestRetriesCountLaneMates(t *testing.T) {
	t.Parallel()
	const n = 3 // one key
	r := newRig(t, "retries-mates", 1, n, 1)
	w := r.work(0, 0)
	var mu sync.Mutex
	attempts := map[int64][]int{}
	cfg := r.config("retries-mates")
	cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Minute // one batch of all three
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		var ok []*Message
		mu.Lock()
		for i, m := range batch {
			attempts[m.Offset] = append(attempts[m.Offset], m.Attempt)
			if m.Attempt == 1 {
				failed.Fail(i, errors.New("fails once"))
			} else {
				ok = append(ok, m)
			}
		}
		mu.Unlock()
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return failed.Err()
	})
	r.runToEnd(g, cfg.GroupID)
	r.check(false)
	mu.Lock()
	defer mu.Unlock()
	for off := range int64(n) {
		if got := attempts[off]; !slices.Equal(got, []int{1, 2}) {
			t.Errorf("offset %d: Do saw attempts %v, want [1 2]", off, got)
		}
	}
	if st := g.Stats(); st.Retries != n {
		t.Errorf("Stats.Retries: got %d, want %d (each message handed out again once)", st.Retries, n)
	}
}
