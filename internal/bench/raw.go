package bench

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
)

// Raw is a plain sarama ConsumerGroup loop: one goroutine per claimed
// partition (sarama's), the simulated handler called once per message,
// MarkMessage after each. It has no batching (a batched Work costs PerCall
// per message) and no retry concept: a failing call is repeated inline
// until it succeeds.
type Raw struct{}

// Name implements Contender.
func (Raw) Name() string { return "raw" }

// IgnoresNum implements numIndependent: raw's concurrency is the partition
// count.
func (Raw) IgnoresNum() bool { return true }

// Run implements Contender.
func (Raw) Run(ctx context.Context, spec RunSpec) (Result, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := newTracker(spec.Expected, cancel) // everything handled: stop
	err := consume(runCtx, spec, &rawHandler{work: spec.Work, t: t})
	r, err := finish(ctx, spec, t, err)
	if err != nil {
		return r, fmt.Errorf("raw: %w", err)
	}
	return r, nil
}

type rawHandler struct {
	work Work
	t    *tracker
}

func (*rawHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*rawHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim is the loop every sarama tutorial shows. Sarama closes
// claim.Messages() when the session ends, which ends the loop; messages
// still buffered then are handled (or, stalled, given up at once).
func (h *rawHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	ctx := sess.Context()
	msgs := claim.Messages()
	// Handled messages are counted locally and published when the channel
	// runs dry or every countEvery messages: a shared atomic add per
	// message from every partition's goroutine would bounce one cache line
	// between cores and slow raw down for the bookkeeping's sake.
	const countEvery = 256
	n := 0
	for m := range msgs {
		if !h.work.doInlineUncounted(ctx, h.t, m.Partition, m.Offset, 1) {
			continue
		}
		sess.MarkMessage(m, "")
		if n++; n >= countEvery || len(msgs) == 0 {
			h.t.finish(n)
			n = 0
		}
	}
	if n > 0 {
		h.t.finish(n)
	}
	return nil
}
