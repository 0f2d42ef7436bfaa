package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Franz is a plain franz-go (kgo) consumer-group loop, what a Go user would
// pick instead of sarama: franz-go's goroutine-per-partition pattern (its
// examples/goroutine_per_partition_consuming, autocommit-marks variant).
// One poll loop hands each partition's records to that partition's
// goroutine, which calls the simulated handler once per record and marks
// it (AutoCommitMarks + MarkCommitRecords per record, as raw calls
// MarkMessage per message). Like raw it has no batching and repeats a
// failing call inline.
//
// Fetching matches what the sarama contenders do as far as the two clients
// allow: 1 MiB per partition per fetch (both clients' default), the same
// fetch wait (SaramaConfig's MaxWaitTime; kgo's default is 5 s), reading from the
// start, the cooperative-sticky balancer (kgo's default, and what
// SaramaConfig sets).
type Franz struct{}

// Name implements Contender.
func (Franz) Name() string { return "franz" }

// IgnoresNum implements numIndependent: franz's concurrency is the
// partition count.
func (Franz) IgnoresNum() bool { return true }

// franzPartition is one assigned partition's goroutine.
type franzPartition struct {
	recs chan []*kgo.Record
	quit chan struct{}
	done chan struct{}
}

// franzSplit owns the partition goroutines; the kgo callbacks and the poll
// loop reach them under mu.
type franzSplit struct {
	work Work
	t    *tracker
	ctx  context.Context // the run's: ends the handler when the run is cancelled

	mu    sync.Mutex
	parts map[int32]*franzPartition
}

// Run implements Contender.
func (Franz) Run(ctx context.Context, spec RunSpec) (Result, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := newTracker(spec.Expected, cancel) // everything handled: stop
	s := &franzSplit{work: spec.Work, t: t, ctx: runCtx, parts: map[int32]*franzPartition{}}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(spec.Addrs...),
		kgo.ClientID("orderly-bench"),
		kgo.ConsumerGroup(spec.GroupID),
		kgo.ConsumeTopics(spec.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(SaramaConfig(0).Consumer.MaxWaitTime),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.AutoCommitMarks(),
		kgo.BlockRebalanceOnPoll(),
	)
	if err != nil {
		return Result{}, fmt.Errorf("franz: connect group %s to %v: %w", spec.GroupID, spec.Addrs, err)
	}
	runErr := s.poll(runCtx, cl)
	// Close leaves the group; with AutoCommitMarks it first revokes
	// everything, which stops the partition goroutines (revoked) and
	// commits what they marked.
	cl.Close()
	s.stopAll()
	r, err := finish(ctx, spec, t, runErr)
	if err != nil {
		return r, fmt.Errorf("franz: %w", err)
	}
	return r, nil
}

// poll is the franz-go poll loop: fetches are split by partition and
// handed to the partitions' goroutines; a rebalance may run only between
// polls (BlockRebalanceOnPoll). It returns the first fetch error seen when
// the run ends.
func (s *franzSplit) poll(ctx context.Context, cl *kgo.Client) error {
	var firstErr error
	for {
		fetches := cl.PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			return firstErr
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if firstErr == nil && !errors.Is(err, context.Canceled) {
				firstErr = fmt.Errorf("fetch %s/%d: %w", topic, p, err)
			}
		})
		s.mu.Lock()
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			if pc := s.parts[p.Partition]; pc != nil {
				select {
				case pc.recs <- p.Records:
				case <-ctx.Done():
				}
			}
		})
		s.mu.Unlock()
		cl.AllowRebalance()
	}
}

// consume is a partition's goroutine: the handler on each record, then
// mark it.
func (s *franzSplit) consume(cl *kgo.Client, pc *franzPartition) {
	defer close(pc.done)
	for {
		select {
		case <-pc.quit:
			return
		case recs := <-pc.recs:
			n := 0
			for _, r := range recs {
				if !s.work.doInlineUncounted(s.ctx, s.t, r.Partition, r.Offset, 1) {
					break
				}
				cl.MarkCommitRecords(r)
				n++
			}
			// Counted once per fetch (a few thousand records at most): a
			// shared atomic add per record would cost more than the loop
			// (see rawHandler).
			s.t.finish(n)
		}
	}
}

func (s *franzSplit) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range assigned {
		for _, p := range ps {
			pc := &franzPartition{recs: make(chan []*kgo.Record, 5), quit: make(chan struct{}), done: make(chan struct{})}
			s.parts[p] = pc
			go s.consume(cl, pc)
		}
	}
}

// revoked stops the revoked partitions' goroutines, then commits what they
// marked (franz-go's example does the same).
func (s *franzSplit) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	s.stop(revoked)
	_ = cl.CommitMarkedOffsets(ctx)
}

func (s *franzSplit) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) { s.stop(lost) }

func (s *franzSplit) stop(ps map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, parts := range ps {
		for _, p := range parts {
			if pc := s.parts[p]; pc != nil {
				delete(s.parts, p)
				close(pc.quit)
				<-pc.done
			}
		}
	}
}

// stopAll stops any goroutine a callback did not (Close revokes
// everything, so normally none).
func (s *franzSplit) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, pc := range s.parts {
		delete(s.parts, p)
		close(pc.quit)
		<-pc.done
	}
}
