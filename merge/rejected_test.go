package merge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

var errRejected = errors.New("rejected")

// TestRejectedHalved: a call whose error Config.Rejected recognises is
// halved, even with NoSplit on (an outage), until the rejected item
// stands alone, which is dead-lettered, not charged; a call that ran past
// Timeout is a timeout whatever it returned, and is charged.
func TestRejectedHalved(t *testing.T) {
	const bad = 5
	for _, tc := range []struct {
		name     string
		slow     bool // the call on the bad item alone runs past Timeout
		wantDead []int64
		charged  int64
	}{
		{"halved under NoSplit", false, []int64{bad}, 0},
		{"past Timeout: charged", true, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Num: 1, Ticker: -1, NoSplit: func() bool { return true },
				Rejected: func(err error) bool { return errors.Is(err, errRejected) }}
			if tc.slow {
				cfg.Timeout, cfg.TimeoutCause, cfg.Grace = 20*time.Millisecond, errors.New("timeout"), time.Hour
			}
			first := true
			r := newRigCtx(t, 8, cfg, time.Hour, // a charged item is not run again within the test
				func(ctx context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
					for _, it := range items {
						if it.Msg.off != bad || !first {
							continue
						}
						if len(items) == 1 {
							first = false
							if tc.slow {
								<-ctx.Done()
							}
						}
						return nil, fmt.Errorf("%d items: %w", len(items), errRejected)
					}
					return nil, nil
				})
			r.feed(t, 0, 1, 2, 3, 4, 5, 6, 7) // one item a lane; offset 5 is bad
			want := int64(8)
			if tc.charged > 0 {
				want = bad // held for its backoff
			}
			r.waitCommitted(t, want, 10*time.Second)
			for deadline := time.Now().Add(10 * time.Second); r.holds.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) // the bad item's last call: dead-lettered or charged
			}
			r.mu.Lock()
			dead := slices.Clone(r.deadOffs)
			r.mu.Unlock()
			if !slices.Equal(dead, tc.wantDead) || r.stats.Charged.Load() != tc.charged || r.stats.Splits.Load() < 2 {
				t.Fatalf("dead-lettered %v, charged %d, splits %d; want %v, %d and at least 2",
					dead, r.stats.Charged.Load(), r.stats.Splits.Load(), tc.wantDead, tc.charged)
			}
		})
	}
}
