package group

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestJoinGroupOfOtherStrategies: a group whose members offer only range
// (a group moving to Orderly from another client) does not let a member
// in whose strategies it does not share (INCONSISTENT_GROUP_PROTOCOL).
// Run does not end: it says why it cannot join, naming its strategies,
// counts the error as a rebalance error, and joins once the other member
// leaves, then handles everything. A member that also offers range joins
// beside it at once (both hold partitions), the first step of a rolling
// move to cooperative-sticky.
func TestJoinGroupOfOtherStrategies(t *testing.T) {
	t.Parallel() // waits on the broker mostly
	tests := []struct {
		name       string
		strategies []sarama.BalanceStrategy
		shares     bool
	}{
		{"cooperative-sticky only", []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}, false},
		{"cooperative-sticky and range", []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky(), sarama.NewBalanceStrategyRange()}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const partitions, n, keys = 4, 2000, 40
			topic := "strategies"
			if tt.shares {
				topic = "strategies-shared"
			}
			r := newRig(t, topic, partitions, n, keys)
			other, err := r.b.JoinRange(topic, r.topic)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(other.Leave)
			held, leave := other.Held, other.Leave
			waitFor(t, 30*time.Second, "the other member to hold every partition", func() bool { return held() == partitions })

			cfg := r.config(topic)
			cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = tt.strategies
			cfg.Retry.Backoff, cfg.Retry.MaxBackoff = 100*time.Millisecond, 400*time.Millisecond
			core, logs := observer.New(zapcore.WarnLevel)
			cfg.Logger = zap.New(core)
			g := newGroup(t, cfg, r.work(0, 0).Do)
			stop := run(t, g)
			const cannot = "cannot join: the group's members use other assignment strategies; retrying until they leave or one of this member's strategies is theirs too"
			if tt.shares {
				waitFor(t, 30*time.Second, "both members to hold partitions", func() bool {
					return g.Stats().Partitions > 0 && held() > 0 && int(g.Stats().Partitions)+held() == partitions
				})
				if got := logs.FilterMessage(cannot).Len(); got != 0 {
					t.Fatalf("a member sharing range: got %d %q warnings, want 0", got, cannot)
				}
			} else {
				waitFor(t, 30*time.Second, "the member to say why it cannot join", func() bool { return logs.FilterMessage(cannot).Len() >= 2 })
				e := logs.FilterMessage(cannot).All()[0]
				if got := e.ContextMap()["strategies"]; !slices.Equal(toStrings(got), []string{sarama.CooperativeStickyBalanceStrategyName}) {
					t.Errorf("strategies logged: got %v, want [%s]", got, sarama.CooperativeStickyBalanceStrategyName)
				}
				if st := g.Stats(); st.Handled != 0 || st.Partitions != 0 || st.ErrorsBy.Rebalance == 0 {
					t.Fatalf("while the other member holds the group: handled %d, partitions %d, rebalance errors %d; want 0, 0, > 0",
						st.Handled, st.Partitions, st.ErrorsBy.Rebalance)
				}
			}
			leave()
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			if err := stop(); err != nil {
				t.Fatalf("Run: got %v, want nil", err)
			}
			r.check(false)
		})
	}
}

// toStrings is a zap field's []string as the observer returns it.
func toStrings(v any) []string {
	switch v := v.(type) {
	case []string:
		return v
	case []any:
		out := make([]string, len(v))
		for i, s := range v {
			out[i], _ = s.(string)
		}
		return out
	}
	return nil
}

// TestStrategyNames: the strategies a member offers, as sarama picks
// them: the deprecated Strategy wins when set.
func TestStrategyNames(t *testing.T) {
	tests := []struct {
		name     string
		strategy sarama.BalanceStrategy
		group    []sarama.BalanceStrategy
		want     []string
	}{
		{"GroupStrategies", nil, []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky(), sarama.NewBalanceStrategyRange()},
			[]string{sarama.CooperativeStickyBalanceStrategyName, sarama.RangeBalanceStrategyName}},
		{"Strategy set", sarama.NewBalanceStrategyRoundRobin(), []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()},
			[]string{sarama.RoundRobinBalanceStrategyName}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := DefaultSarama()
			sc.Consumer.Group.Rebalance.Strategy, sc.Consumer.Group.Rebalance.GroupStrategies = tt.strategy, tt.group
			if got := strategyNames(sc); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestNewBalanceStrategy: every name BalanceStrategyNames lists makes
// that strategy, a new instance of the sticky ones each time (they keep
// state, so no two groups may share one); an unknown name makes none.
func TestNewBalanceStrategy(t *testing.T) {
	for _, name := range BalanceStrategyNames() {
		a, ok := NewBalanceStrategy(name)
		b, _ := NewBalanceStrategy(name)
		stateful := strings.Contains(name, "sticky")
		if !ok || a.Name() != name || stateful && a == b {
			t.Errorf("%s: got ok %v, name %q, a second call's instance the same %v; want true, %q, a new one for a sticky strategy", name, ok, a.Name(), a == b, name)
		}
	}
	if s, ok := NewBalanceStrategy("fair"); ok || s != nil {
		t.Errorf("fair: got %v, %v; want nil, false", s, ok)
	}
}
