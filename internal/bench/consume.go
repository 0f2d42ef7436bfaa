package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
)

// SaramaConfig is the base client config every Kafka contender uses, so
// that they fetch the same way: group.DefaultSarama() (Kafka 3.0.0,
// OffsetOldest, the cooperative-sticky rebalance strategy: what Orderly
// uses when Config.Sarama is nil) with errors returned, ChannelBufferSize
// = chanSize (when positive), sarama's default fetch sizes and
// DefaultSarama's fetch wait (group.DefaultFetchMaxWait). Orderly
// receives it as group.Config.Sarama (it sets the same ChannelBufferSize
// and Return.Errors itself).
func SaramaConfig(chanSize int) *sarama.Config {
	cfg := group.DefaultSarama()
	cfg.ClientID = "orderly-bench"
	cfg.Consumer.Return.Errors = true
	if chanSize > 0 {
		cfg.ChannelBufferSize = chanSize
	}
	return cfg
}

// consume runs a sarama consumer group with handler h on spec's topic until
// ctx ends, then closes the group (which commits what was marked) and
// waits for everything it started. It returns the first consumer error
// seen, which matters only if the run did not complete.
func consume(ctx context.Context, spec RunSpec, h sarama.ConsumerGroupHandler) error {
	cg, err := sarama.NewConsumerGroup(spec.Addrs, spec.GroupID, SaramaConfig(spec.Chan))
	if err != nil {
		return fmt.Errorf("connect group %s to %v: %w", spec.GroupID, spec.Addrs, err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	keep := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	wg.Go(func() {
		for err := range cg.Errors() {
			keep(err)
		}
	})
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{spec.Topic}, h); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) || ctx.Err() != nil {
				break
			}
			keep(err)
			select { // a broken session: back off before rejoining
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	cerr := cg.Close() // closes Errors(), ending the drain goroutine
	wg.Wait()
	if firstErr == nil {
		firstErr = cerr
	}
	return firstErr
}

// finish turns a run's tracker into its Result and error: an incomplete run
// is an error unless it was meant to last until ctx ended.
func finish(ctx context.Context, spec RunSpec, t *tracker, runErr error) (Result, error) {
	r := t.result()
	if t.complete() || (spec.UntilCancel && ctx.Err() != nil) {
		return r, nil
	}
	err := ctx.Err()
	if runErr != nil {
		err = runErr
	}
	if err == nil {
		err = errors.New("stopped early")
	}
	return r, fmt.Errorf("handled %d of %d messages: %w", r.Handled, spec.Expected, err)
}
