// Package group consumes Kafka with ordered parallelism: many goroutines per
// partition, strict offset order within each lane (by default each key),
// and offsets committed only behind finished work.
//
//	g, err := group.New(group.Config{
//		Brokers: []string{"localhost:9092"},
//		Topics:  []string{"transfers"},
//		GroupID: "ledger",
//	}, group.Handler[*group.Message]{
//		Do: func(ctx context.Context, batch []*group.Message) error {
//			return store(ctx, batch) // nil: the whole batch is done
//		},
//	})
//	if err != nil { ... }
//	err = g.Run(ctx) // until ctx ends; drains, commits, returns
package group

import (
	"context"
	"fmt"
)

// Handler is what a service plugs in.
type Handler[T any] struct {
	// New decodes a message into the value Do receives. nil: T must be
	// *Message and the message itself is passed. A New error is logged with
	// the message's topic/partition/offset, counted in Stats.DecodeErrors,
	// and the message is skipped past (it counts as finished for commits).
	New func(m *Message) (T, error)
	// Split names the message's ordering lane: messages of one partition
	// with equal Split reach Do in offset order and never concurrently.
	// nil: a hash of Key, or one lane per partition when Key is empty.
	Split func(m *Message, v T) uint64
	// Do handles a batch of at most Config.Size values. nil error: every
	// value is done. An error or a panic fails the whole batch, which is
	// retried (Config.Retry) while later messages of its lanes wait.
	// ctx ends only when Run has given up on in-flight work.
	Do func(ctx context.Context, batch []T) error
}

func (h Handler[T]) validate() error {
	if h.Do == nil {
		return fmt.Errorf("%w: Handler.Do is nil", ErrConfig)
	}
	if h.New == nil {
		var zero T
		if _, ok := any(zero).(*Message); !ok {
			return fmt.Errorf("%w: Handler.New is nil, so T must be *group.Message, not %T", ErrConfig, zero)
		}
	}
	return nil
}

var _ = context.Background
