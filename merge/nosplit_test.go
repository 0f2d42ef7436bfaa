package merge

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// TestNoSplitVerdictsChargeLaneFirst: with NoSplit on (an outage), Do
// names all 4 items of one lane failed: only the lane's first is charged,
// the others go back behind it uncharged, whatever order the verdicts come
// in. In reverse order all 4 were charged.
func TestNoSplitVerdictsChargeLaneFirst(t *testing.T) {
	for _, tt := range []struct {
		name     string
		reversed bool
	}{{"in item order", false}, {"reversed", true}} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			first := true
			r := newRigCtx(t, 8, Config{Num: 1, Ticker: -1, NoSplit: func() bool { return true }}, 20*time.Millisecond,
				func(_ context.Context, items []*dispatch.Item[msg, int]) ([]Verdict, error) {
					mu.Lock()
					defer mu.Unlock()
					if !first {
						return nil, nil
					}
					first = false
					var vs []Verdict
					for i := range items {
						vs = append(vs, Verdict{Index: i, Kind: Failed, Err: errPoison})
					}
					if tt.reversed {
						slices.Reverse(vs)
					}
					return vs, errPoison
				})
			r.feed(t, 0, 0, 0, 0) // 4 items, one lane
			r.waitCommitted(t, 4, 10*time.Second)
			if got := r.stats.Charged.Load(); got != 1 {
				t.Errorf("charged %d of the lane's 4 failed items, want 1 (its first)", got)
			}
		})
	}
}
