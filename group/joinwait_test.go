package group

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestEagerJoinBehindDrain: under range, member B joins while every call
// of member A is in flight and ignores nothing but its ctx, so A's drain
// runs its whole DrainTimeout (3s, half a 6s rebalance timeout) and B's
// JoinGroup is answered only after it. B's Net.ReadTimeout is set to 1s;
// the raise to joinWait plus 5s covers the drain, and B joins at its
// first try: no Consume fails. (With the read timeout left at 1s, B's
// JoinGroup fails with an i/o timeout and Consume is retried.)
func TestEagerJoinBehindDrain(t *testing.T) {
	t.Parallel() // waits on the drain mostly
	const partitions = 2
	r := newRig(t, "join-behind-drain", partitions, 200, 20)
	cfg := r.config("join-behind-drain")
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	cfg.Sarama.Consumer.Group.Rebalance.Timeout = 6 * time.Second
	var holding atomic.Bool
	holding.Store(true)
	var held atomic.Int64 // A's calls waiting for their ctx
	a := newGroup(t, cfg, func(ctx context.Context, _ []*Message) error {
		if holding.Load() {
			held.Add(1)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	stopA := run(t, a)
	waitFor(t, 30*time.Second, "A to hold both partitions and a call in flight", func() bool {
		return a.Stats().Partitions == partitions && held.Load() > 0
	})

	scB := *cfg.Sarama
	scB.Net.ReadTimeout = time.Second
	cfgB := cfg
	cfgB.Sarama = &scB
	core, logs := observer.New(zapcore.WarnLevel)
	cfgB.Logger = zap.New(core)
	b := newGroup(t, cfgB, func(context.Context, []*Message) error { return nil })
	if got, drain := b.cfg.Sarama.Net.ReadTimeout, b.cfg.DrainTimeout; got < drain+time.Second {
		t.Fatalf("B's Net.ReadTimeout: got %v, want past the 3s drain it waits behind (DrainTimeout %v)", got, drain)
	}
	joining := time.Now()
	stopB := run(t, b)
	waitFor(t, 30*time.Second, "B to hold a partition", func() bool { return b.Stats().Partitions > 0 })
	took := time.Since(joining)
	holding.Store(false)
	if took < b.cfg.DrainTimeout {
		t.Errorf("B joined %v after it started: want behind A's %v drain (past its given Net.ReadTimeout of 1s)", took.Round(time.Millisecond), b.cfg.DrainTimeout)
	}
	if failed := logs.FilterMessage("consume failed; retrying").All(); len(failed) != 0 {
		t.Errorf("B's Consume failed %d times (first: %v), want none", len(failed), failed[0].ContextMap()["error"])
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	t.Logf("B joined %v after it started (Net.ReadTimeout %v)", took.Round(time.Millisecond), b.cfg.Sarama.Net.ReadTimeout)
}
