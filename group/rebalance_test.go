package group

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRebalanceHandoff: a second member joins mid-stream, then the first
// one's context is cancelled; the second finishes. Run once with the eager
// range strategy and once with cooperative-sticky. Nothing may be lost,
// per-key order must hold, no commit may pass unfinished work or go
// backwards (a zombie), and since every handoff is graceful, no message
// may be handled twice. The members are dynamic (no InstanceID): the
// first one's LeaveGroup starts the handoff at once. Static members are
// TestStaticMembershipRestart's.
func TestRebalanceHandoff(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	tests := []struct {
		name     string
		strategy sarama.BalanceStrategy
	}{
		{"eager range", sarama.NewBalanceStrategyRange()},
		{"cooperative sticky", sarama.NewBalanceStrategyCooperativeSticky()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const partitions, n, keys = 6, 60_000, 300
			r := newRig(t, "handoff", partitions, n, keys)
			// 16 workers x 8 messages per 2ms call: about 60k msg/s at
			// most, so the run lasts long enough for both handoffs.
			w, wb := r.work(2*time.Millisecond, 0.01), r.work(2*time.Millisecond, 0.01)
			w.tag, wb.tag = "A", "B"
			cfg := r.config("handoff")
			cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{tt.strategy}
			cfg.Size, cfg.Num, cfg.Ticker = 8, 4, 5*time.Millisecond
			a := newGroup(t, cfg, w.Do)
			b := newGroup(t, cfg, wb.Do)
			stopA := run(t, a)
			waitFor(t, 30*time.Second, "first member to handle 10% of the messages", func() bool { return a.Stats().Handled >= n/10 })
			stopB := run(t, b)
			waitFor(t, 30*time.Second, "second member to get partitions and handle messages", func() bool {
				return b.Stats().Handled > 0 && b.Stats().Partitions > 0
			})
			handledA := a.Stats().Handled
			if handledA >= n {
				t.Fatalf("first member handled everything (%d) before the handoff: slow the work down", handledA)
			}
			if err := stopA(); err != nil {
				t.Fatalf("first member Run: %v", err)
			}
			r.waitAllCommitted(cfg.GroupID, 90*time.Second)
			if err := stopB(); err != nil {
				t.Fatalf("second member Run: %v", err)
			}
			rep := r.check(false)
			r.checkFinalCommits(cfg.GroupID)
			sa, sb := a.Stats(), b.Stats()
			if sa.Revokes == 0 || sa.Claims == 0 || sb.Claims == 0 {
				t.Errorf("claims: first member %d claims %d revokes, second %d claims: want a handoff", sa.Claims, sa.Revokes, sb.Claims)
			}
			if got := sa.Handled + sb.Handled; got != int64(n) {
				t.Errorf("handled by both: got %d (%d + %d), want exactly %d", got, sa.Handled, sb.Handled, n)
			}
			t.Logf("first member: %d handled, %d claims, %d revokes, %d dropped, %d abandoned; second: %d handled, %d resumed from metadata; %d distinct, %d+%d failures",
				sa.Handled, sa.Claims, sa.Revokes, sa.Dropped, sa.Abandoned, sb.Handled, sb.Resumed, rep.Distinct, w.failures(), wb.failures())
		})
	}
}

// TestRevokeWhileBudgetSpent: a cooperative rebalance takes partitions
// from a member whose in-flight budget is spent and whose sarama buffers
// are full (1024 per partition). Its claims must see the revoke and return
// within Rebalance.Timeout; a claim loop that stopped reading would not
// (sarama then reports ErrRebalanceTimedOut and drops the member while it
// is still consuming). The handoff is graceful: nothing handled twice.
func TestRevokeWhileBudgetSpent(t *testing.T) {
	const partitions, n, keys = 4, 12_000, 200
	r := newRig(t, "budget-revoke", partitions, n, keys)
	cfg := r.config("budget-revoke")
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	cfg.Sarama.Consumer.Group.Rebalance.Timeout = 3 * time.Second
	slow := cfg
	// About 400 msg/s: 1024 buffered messages take seconds to drain.
	slow.Size, slow.Num, slow.Ticker, slow.Chan, slow.MaxInFlight = 1, 2, -1, 1024, 64
	wa, wb := r.work(5*time.Millisecond, 0), r.work(0, 0)
	wa.tag, wb.tag = "A", "B"
	a := newGroup(t, slow, wa.Do)
	b := newGroup(t, cfg, wb.Do)
	stopA := run(t, a)
	waitFor(t, 30*time.Second, "the first member to spend its in-flight budget", func() bool {
		return a.Stats().InFlight >= int64(slow.MaxInFlight)
	})
	stopB := run(t, b)
	waitFor(t, 30*time.Second, "the second member to get partitions", func() bool { return b.Stats().Partitions > 0 })
	if sa := a.Stats(); sa.Revokes == 0 || sa.Errors != 0 {
		t.Errorf("first member after the rebalance: %d revokes, %d consumer errors; want revokes and no errors (ErrRebalanceTimedOut)",
			sa.Revokes, sa.Errors)
	}
	if err := stopA(); err != nil {
		t.Fatalf("first member Run: %v", err)
	}
	r.waitAllCommitted(cfg.GroupID, 90*time.Second)
	if err := stopB(); err != nil {
		t.Fatalf("second member Run: %v", err)
	}
	r.check(false)
	r.checkFinalCommits(cfg.GroupID)
}

// TestShutdownReleasesClaimsFirst: when Run's context ends, every claim
// loop drains and commits on its own ("shutdown") while sarama's session
// still lives, rather than after sarama ended it ("session ended"): during
// a cooperative rejoin only the former's commit is accepted. The final
// frontiers each claim logged are what the broker holds.
func TestShutdownReleasesClaimsFirst(t *testing.T) {
	const partitions, n, keys = 4, 20_000, 200
	r := newRig(t, "shutdown", partitions, n, keys)
	cfg := r.config("shutdown")
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	cfg.Size, cfg.Num = 8, 4
	core, logs := observer.New(zapcore.InfoLevel)
	cfg.Logger = zap.New(core)
	g := newGroup(t, cfg, r.work(2*time.Millisecond, 0).Do)
	stop := run(t, g)
	waitFor(t, 30*time.Second, "all partitions claimed and some messages handled", func() bool {
		st := g.Stats()
		return st.Partitions == partitions && st.Handled > 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	committed := r.b.Committed(cfg.GroupID, r.topic)
	released := logs.FilterMessage("partition released").All()
	if len(released) != partitions {
		t.Fatalf("partition released: got %d entries, want %d", len(released), partitions)
	}
	for _, e := range released {
		f := e.ContextMap()
		p, next := int32(f["partition"].(int32)), f["offset"].(int64)
		if f["reason"] != "shutdown" {
			t.Errorf("partition %d released with reason %q, want \"shutdown\"", p, f["reason"])
		}
		if next >= 0 && committed[p] != next {
			t.Errorf("partition %d: broker holds %d, want the final frontier %d", p, committed[p], next)
		}
	}
	if h := g.Stats().Handled; h >= n {
		t.Fatalf("handled everything (%d) before the stop: slow the work down", h)
	}
}
