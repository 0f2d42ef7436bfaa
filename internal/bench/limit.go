package bench

import (
	"context"
	"fmt"
	"sync"
)

// Limit is the physical limit of the simulated work on this machine: Num
// plain goroutines, each calling the work on its share of the messages in
// batches of Size, with no Kafka, no pipeline and no ordering. Failing
// calls are repeated inline.
type Limit struct{}

// Name implements Contender.
func (Limit) Name() string { return "limit" }

// Run implements Contender.
func (Limit) Run(ctx context.Context, spec RunSpec) (Result, error) {
	t := newTracker(spec.Expected, nil)
	num, size := max(spec.Num, 1), max(spec.Size, 1)
	var wg sync.WaitGroup
	for w := range num {
		share := spec.Expected / num
		if w < spec.Expected%num {
			share++
		}
		wg.Go(func() {
			// The worker's messages are identified as partition w, offsets
			// 0..share-1, for the failure draw.
			for off := 0; off < share; off += size {
				n := min(size, share-off)
				if !spec.Work.doInline(ctx, t, int32(w), int64(off), n) {
					return
				}
			}
		})
	}
	wg.Wait()
	r, err := finish(ctx, spec, t, nil)
	if err != nil {
		return r, fmt.Errorf("limit: %w", err)
	}
	return r, nil
}
