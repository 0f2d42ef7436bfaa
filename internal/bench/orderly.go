package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/group"
)

// Orderly is github.com/orderly-go/orderly/group as a contender: Handler.Do
// runs the simulated work on the batch and returns its error, so failures
// are retried by the framework (Retry.Backoff 1 ms). Split is the
// default (a hash of the key).
type Orderly struct {
	cur atomic.Pointer[group.Group[*group.Message]]

	// Attach, if set, is called with each run's group before its Run
	// (what a service does around it, e.g. a metrics scraper: the
	// scrape-cost test); the func it returns is called once Run returns.
	Attach func(*group.Group[*group.Message]) (detach func())
}

// Name implements Contender.
func (*Orderly) Name() string { return "orderly" }

// InFlight implements inFlighter: the running group's Stats().InFlight.
func (o *Orderly) InFlight() (int64, bool) {
	g := o.cur.Load()
	if g == nil {
		return 0, false
	}
	return g.Stats().InFlight, true
}

// Run implements Contender.
func (o *Orderly) Run(ctx context.Context, spec RunSpec) (Result, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := newTracker(spec.Expected, cancel) // everything handled: stop
	g, err := group.New(group.Config{
		Brokers:     spec.Addrs,
		Topics:      []string{spec.Topic},
		GroupID:     spec.GroupID,
		Sarama:      SaramaConfig(spec.Chan),
		Size:        spec.Size,
		Num:         spec.Num,
		Ticker:      spec.Ticker,
		Chan:        spec.Chan,
		MaxInFlight: spec.MaxInFlight,
		// raw and databus repeat a failed call at once; orderly retries
		// after 1 ms, doubling up to 10 ms (the default, 100 ms, would
		// measure the backoff policy rather than the pipeline).
		Retry: group.Retry{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
	}, group.Handler[*group.Message]{
		Do: func(_ context.Context, batch []*group.Message) error {
			t.begin()
			first := batch[0]
			// runCtx, not Do's ctx: a stalled call must end when the run
			// is cancelled, not when Run gives up draining.
			if err := spec.Work.Do(runCtx, first.Partition, first.Offset, first.Attempt, len(batch)); err != nil {
				if errors.Is(err, errSimulated) {
					t.failed.Add(1)
				}
				return err
			}
			t.finish(len(batch))
			return nil
		},
	})
	if err != nil {
		return Result{}, fmt.Errorf("orderly: %w", err)
	}
	o.cur.Store(g)
	defer o.cur.Store(nil)
	if o.Attach != nil {
		defer o.Attach(g)()
	}

	r, err := finish(ctx, spec, t, g.Run(runCtx))
	if err != nil {
		return r, fmt.Errorf("orderly: %w", err)
	}
	return r, nil
}
