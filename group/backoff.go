package group

import (
	"context"
	"time"
)

// retryWrites calls write until it succeeds, waiting Retry.Backoff after
// the first failure and doubling up to Retry.MaxBackoff; failed is told of
// each failure and the wait before the next try. It reports false if ctx
// ended first. The dead-letter writer and the parker use it: their items
// stay held meanwhile, so nothing is committed past them.
func (g *Group[T]) retryWrites(ctx context.Context, write func() error, failed func(err error, wait time.Duration)) bool {
	wait := g.cfg.Retry.Backoff
	for {
		err := write()
		if err == nil {
			return true
		}
		failed(err, wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		wait = min(2*wait, g.cfg.Retry.MaxBackoff)
	}
}
