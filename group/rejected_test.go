package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestRejectedBatchHalved: a Do that fails wrapping ErrRejected for every
// batch holding one bad message (offset 3) gets its batch halved until
// that message stands alone, which alone is dead-lettered (reason
// rejected), with no attempt charged and every batch mate handled once, in
// key order. The "outage" case first fails every call with a plain error
// for 2s, so that the group is in an outage (one probe call at a time, no
// plain failure split) when the rejections come: the probe batch holds
// offset 3, and a rejection handled like a plain failure kept the outage
// on for good, nothing committed.
func TestRejectedBatchHalved(t *testing.T) {
	t.Parallel() // mostly waits on the broker and backoffs
	const bad = 3
	for _, tc := range []struct {
		name string
		down time.Duration // plain failures first, for this long
	}{
		{"alone", 0},
		{"outage", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, "rejected-"+tc.name, 1, 40, 8)
			w := r.work(0, 0)
			var start atomic.Int64
			do := func(ctx context.Context, batch []*Message) error {
				start.CompareAndSwap(0, time.Now().UnixNano())
				if time.Since(time.Unix(0, start.Load())) < tc.down {
					return errors.New("database unreachable")
				}
				for _, m := range batch {
					if m.Offset == bad {
						if len(batch) == 1 {
							r.markSettled(0, bad) // dead-lettered: its test reads the store
						}
						return fmt.Errorf("bulk insert of %d rows: row %d refused: %w", len(batch), bad, ErrRejected)
					}
				}
				return w.Do(ctx, batch)
			}
			cfg := r.config("rejected-" + tc.name)
			cfg.Size, cfg.Num = 64, 2
			cfg.DataPath = t.TempDir()
			cfg.Retry = Retry{Backoff: 200 * time.Millisecond, MaxBackoff: time.Second}
			g := newGroup(t, cfg, do)
			stop := run(t, g)
			r.waitAllCommitted(cfg.GroupID, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			r.checkDeadLettered(1)
			st := g.Stats()
			if tc.down > 0 && st.Outages < 1 {
				t.Fatalf("Stats.Outages: got %d, want at least 1 (the case tests nothing)", st.Outages)
			}
			if st.DeadLettered.Rejected != 1 || st.Splits < 2 || tc.down == 0 && st.Retries != 0 {
				t.Fatalf("Stats: DeadLettered.Rejected %d, Splits %d, Retries %d; want 1, at least 2, and 0 (halving charges nothing)",
					st.DeadLettered.Rejected, st.Splits, st.Retries)
			}
			dead, err := localDeadLetters(filepath.Join(cfg.DataPath, deadletter.DirName))
			if err != nil {
				t.Fatal(err)
			}
			if want := map[tpOff]int{{0, bad}: 1}; !maps.Equal(dead, want) {
				t.Fatalf("dead letters in the local store: got %v, want %v", dead, want)
			}
		})
	}
}
