package group

import (
	"context"
	"errors"
	"fmt"
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
