package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// ownStrategy is a balance strategy of the user's own: Orderly cannot copy
// it and must use it as given.
type ownStrategy struct{ sarama.BalanceStrategy }

// TestDefaultSarama: read-committed, metadata refreshed often enough that
// new partitions start within a minute, and fetches held at most
// DefaultFetchMaxWait.
func TestDefaultSarama(t *testing.T) {
	sc := DefaultSarama()
	if sc.Consumer.IsolationLevel != sarama.ReadCommitted {
		t.Errorf("Consumer.IsolationLevel: got %v, want ReadCommitted", sc.Consumer.IsolationLevel)
	}
	if got := sc.Metadata.RefreshFrequency; got != DefaultMetadataRefresh || 2*got > time.Minute {
		t.Errorf("Metadata.RefreshFrequency: got %v, want %v (two periods within a minute)", got, DefaultMetadataRefresh)
	}
	if got := sc.Consumer.MaxWaitTime; got != DefaultFetchMaxWait {
		t.Errorf("Consumer.MaxWaitTime: got %v, want %v", got, DefaultFetchMaxWait)
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestSaramaNotShared: Groups built from one Config.Sarama get balance
// strategies and metrics registries of their own, the base is left as it
// was, a strategy of the user's own is kept, and the fields Orderly owns
// are set from the Config.
func TestSaramaNotShared(t *testing.T) {
	base := DefaultSarama()
	own := ownStrategy{sarama.NewBalanceStrategyRange()}
	base.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{
		sarama.NewBalanceStrategyCooperativeSticky(), sarama.NewBalanceStrategySticky(),
		sarama.NewBalanceStrategyRoundRobin(), sarama.NewBalanceStrategyRange(), own,
	}
	base.Consumer.Group.Rebalance.Strategy = sarama.NewBalanceStrategySticky()
	baseStrategies := append([]sarama.BalanceStrategy(nil), base.Consumer.Group.Rebalance.GroupStrategies...)
	baseRegistry := base.MetricRegistry
	mk := func(instance string, policy ResetPolicy) *sarama.Config {
		t.Helper()
		cfg := Config{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, GroupID: "g", Sarama: base,
			InstanceID: instance, OnOffsetReset: policy}
		g, err := New(cfg, Handler[*Message]{Do: func(context.Context, []*Message) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return g.cfg.Sarama
	}
	a, b := mk("pod-a", ResetFollow), mk("", ResetRefuse)
	for i, s := range baseStrategies {
		as, bs := a.Consumer.Group.Rebalance.GroupStrategies[i], b.Consumer.Group.Rebalance.GroupStrategies[i]
		if as.Name() != s.Name() || bs.Name() != s.Name() {
			t.Errorf("strategy %d: got %q and %q, want %q", i, as.Name(), bs.Name(), s.Name())
		}
		if _, isOwn := s.(ownStrategy); isOwn {
			if as != s || bs != s {
				t.Errorf("strategy %d of the user's own type: replaced, want it kept as given", i)
			}
			continue
		}
		if s.Name() == sarama.RoundRobinBalanceStrategyName {
			continue // a pointer to an empty struct, no state: new ones may share an address
		}
		if as == s || bs == s || as == bs {
			t.Errorf("strategy %d (%s): shared between the base and the groups, want a new one for each", i, s.Name())
		}
		if fmt.Sprintf("%T", as) != fmt.Sprintf("%T", s) {
			t.Errorf("strategy %d: got type %T, want %T", i, as, s)
		}
	}
	if a.Consumer.Group.Rebalance.Strategy == base.Consumer.Group.Rebalance.Strategy {
		t.Error("the deprecated Rebalance.Strategy is shared with the base, want a new one")
	}
	if a.MetricRegistry == baseRegistry || b.MetricRegistry == baseRegistry || a.MetricRegistry == b.MetricRegistry {
		t.Error("metrics registry shared, want one per group")
	}
	for i, s := range baseStrategies {
		if base.Consumer.Group.Rebalance.GroupStrategies[i] != s {
			t.Errorf("base strategy %d was modified", i)
		}
	}
	if base.MetricRegistry != baseRegistry || base.Consumer.Group.InstanceId != "" || !base.Consumer.Group.ResetInvalidOffsets {
		t.Error("the base config was modified")
	}
	if a.Consumer.Group.InstanceId != "pod-a" || b.Consumer.Group.InstanceId != "" {
		t.Errorf("InstanceId: got %q and %q, want \"pod-a\" and \"\"", a.Consumer.Group.InstanceId, b.Consumer.Group.InstanceId)
	}
	if !a.Consumer.Group.ResetInvalidOffsets || b.Consumer.Group.ResetInvalidOffsets {
		t.Errorf("ResetInvalidOffsets: got %v (ResetFollow) and %v (ResetRefuse), want true and false",
			a.Consumer.Group.ResetInvalidOffsets, b.Consumer.Group.ResetInvalidOffsets)
	}
}

// TestGroupsFromOneBase: four Groups built from one Config.Sarama, two
// consumer groups of two members each, run at once against one broker.
// Run with -race: with the base's cooperative-sticky strategy shared, the
// two leaders' Plans raced on its partition movements. Each consumer
// group consumes everything.
func TestGroupsFromOneBase(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, n, keys = 4, 4000, 40
	r := newRig(t, "one-base", partitions, n, keys)
	base := r.config("unused").Sarama
	ids := []string{"one-base-a", "one-base-b"}
	members := map[string][]*Group[*Message]{}
	for _, id := range ids {
		for range 2 {
			cfg := r.config(id)
			cfg.Sarama = base
			members[id] = append(members[id], newGroup(t, cfg, func(context.Context, []*Message) error { return nil }))
		}
	}
	for _, id := range ids {
		for _, g := range members[id] {
			run(t, g)
		}
	}
	for _, id := range ids {
		r.waitAllCommitted(id, time.Minute)
		var handled int64
		for _, g := range members[id] {
			handled += g.Stats().Handled
		}
		if handled < n {
			t.Errorf("group %s: handled %d, want all %d", id, handled, n)
		}
	}
}

// TestStrategiesPlanConcurrently: the leaders of two consumer groups whose
// Groups were built from one Config.Sarama plan their assignments at the
// same time. Run with -race: sarama's sticky strategies write their
// partition movements in Plan, which raced when the base's strategy
// object was shared (the race detector cannot see it through a whole
// group run against an in-process broker, whose channels order
// everything, so the Plans are called here directly).
func TestStrategiesPlanConcurrently(t *testing.T) {
	base := DefaultSarama()
	base.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{
		sarama.NewBalanceStrategyCooperativeSticky(), sarama.NewBalanceStrategySticky(), sarama.NewBalanceStrategyRange(),
	}
	members := map[string]sarama.ConsumerGroupMemberMetadata{
		"m1": {Version: 1, Topics: []string{"t"}}, "m2": {Version: 1, Topics: []string{"t"}},
	}
	topics := map[string][]int32{"t": {0, 1, 2, 3, 4, 5, 6, 7}}
	var plans []sarama.BalanceStrategy
	for range 2 {
		g, err := New(Config{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, GroupID: "g", Sarama: base},
			Handler[*Message]{Do: func(context.Context, []*Message) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, g.cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(plans)*20)
	for _, st := range plans {
		wg.Go(func() {
			for range 20 {
				if _, err := st.Plan(members, topics); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Plan: %v", err)
	}
}

// TestFetchMaxWait reads the wait of the fetch requests that reach the
// broker: DefaultFetchMaxWait when Config.Sarama is nil, and a config of
// the user's own as given. (That the shorter wait lets a resumed
// partition be fetched sooner is measured in docs/SCALING.md, not here.)
func TestFetchMaxWait(t *testing.T) {
	t.Parallel()
	own := DefaultSarama()
	own.Consumer.MaxWaitTime = 300 * time.Millisecond
	for _, tt := range []struct {
		name   string
		sarama *sarama.Config
		want   int32 // ms
	}{
		{"default", nil, int32(DefaultFetchMaxWait / time.Millisecond)},
		{"own config", own, 300},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := startBroker(t, "waits", 2)
			var mu sync.Mutex
			waits := map[int32]int{} // MaxWaitMillis -> fetch requests
			b.Cluster().ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				b.Cluster().KeepControl()
				if r, ok := req.(*kmsg.FetchRequest); ok && len(r.Topics) > 0 {
					mu.Lock()
					waits[r.MaxWaitMillis]++
					mu.Unlock()
				}
				return nil, nil, false
			})
			produceSeq(t, b, "waits", 20, 4)
			cfg := Config{Brokers: b.Addrs(), Topics: []string{"waits"}, GroupID: "waits", Sarama: tt.sarama, Size: 4, Num: 2, Ticker: -1}
			var handled atomic.Int64
			g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
				handled.Add(int64(len(batch)))
				return nil
			})
			stop := run(t, g)
			waitFor(t, 30*time.Second, "all 20 messages handled", func() bool { return handled.Load() == 20 })
			// Caught up: the next fetches find nothing new and are held.
			waitFor(t, 30*time.Second, "three fetch requests", func() bool {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, c := range waits {
					n += c
				}
				return n >= 3
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			// 0 is a side fetch past control records (markers.go), which
			// never waits; every other fetch is the claims'.
			for wait, n := range waits {
				if wait != tt.want && wait != 0 {
					t.Errorf("%d fetch requests with MaxWaitMillis %d, want %d (all: %v)", n, wait, tt.want, waits)
				}
			}
			if waits[tt.want] == 0 {
				t.Errorf("no fetch request with MaxWaitMillis %d (all: %v)", tt.want, waits)
			}
		})
	}
}

// TestJoinReadTimeout: under an eager protocol (any strategy offered that
// is not cooperative, or the deprecated Strategy when it is not) the
// derived sarama config waits for an answer as long as a member with the
// same timeouts can take to join again, plus 5s: a heartbeat interval,
// its drain and the read-back of its final commit (a quarter of the
// rebalance timeout, ending by seven eighths of it less a heartbeat
// interval after the drain began), since a JoinGroup is answered only
// once every member has (a member joining behind a 50s drain under range
// got "i/o timeout" with sarama's 30s). No more: sarama's read timeout is
// every request's, and a longer one notices a dead broker later. A
// cooperative protocol keeps Net.ReadTimeout as given, and so does an
// eager one whose join needs no more; a longer one given is kept. The
// base is left as it was.
func TestJoinReadTimeout(t *testing.T) {
	coop, rng := sarama.NewBalanceStrategyCooperativeSticky, sarama.NewBalanceStrategyRange
	for _, tt := range []struct {
		name       string
		strategies []sarama.BalanceStrategy
		deprecated sarama.BalanceStrategy // Rebalance.Strategy
		rebalance  time.Duration
		drain      time.Duration // DrainTimeout set, 0 the default (half the rebalance timeout here)
		read, want time.Duration // Net.ReadTimeout given and derived
	}{
		{"cooperative-sticky", []sarama.BalanceStrategy{coop()}, nil, 122 * time.Second, 0, 30 * time.Second, 30 * time.Second},
		// 3s heartbeat + 30s drain + 15s read-back + 5s
		{"range", []sarama.BalanceStrategy{rng()}, nil, 60 * time.Second, 0, 30 * time.Second, 53 * time.Second},
		// 3s + 61s + 30.5s + 5s
		{"range, long rebalance timeout", []sarama.BalanceStrategy{rng()}, nil, 122 * time.Second, 0, 30 * time.Second, 99500 * time.Millisecond},
		{"cooperative-sticky and range", []sarama.BalanceStrategy{coop(), rng()}, nil, 122 * time.Second, 0, 30 * time.Second, 99500 * time.Millisecond},
		{"deprecated Strategy range", []sarama.BalanceStrategy{coop()}, rng(), 60 * time.Second, 0, 30 * time.Second, 53 * time.Second},
		{"a strategy of the user's own", []sarama.BalanceStrategy{ownStrategy{rng()}}, nil, 60 * time.Second, 0, 30 * time.Second, 53 * time.Second},
		{"range, a longer read timeout given", []sarama.BalanceStrategy{rng()}, nil, 60 * time.Second, 0, 90 * time.Second, 90 * time.Second},
		// 3s + 2s + 15s + 5s = 25s: the 30s given covers it
		{"range, a short DrainTimeout", []sarama.BalanceStrategy{rng()}, nil, 60 * time.Second, 2 * time.Second, 30 * time.Second, 30 * time.Second},
		// 3s + the read-back's end, 49.5s after the drain began (7/8 of 20s less 3s) + 5s
		{"range, the read-back ending by seven eighths", []sarama.BalanceStrategy{rng()}, nil, 20 * time.Second, 0, 3 * time.Second, 22500 * time.Millisecond},
		// 3s + a 55s drain that leaves the read-back no time + 5s
		{"range, a DrainTimeout past the read-back's end", []sarama.BalanceStrategy{rng()}, nil, 60 * time.Second, 55 * time.Second, 30 * time.Second, 63 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := DefaultSarama()
			base.Consumer.Group.Rebalance.GroupStrategies, base.Consumer.Group.Rebalance.Strategy = tt.strategies, tt.deprecated
			base.Consumer.Group.Rebalance.Timeout, base.Net.ReadTimeout = tt.rebalance, tt.read
			g := offlineGroup(t, func(c *Config) { c.Sarama, c.DrainTimeout = base, tt.drain })
			if got := g.cfg.Sarama.Net.ReadTimeout; got != tt.want {
				t.Errorf("derived Net.ReadTimeout: got %v, want %v", got, tt.want)
			}
			if base.Net.ReadTimeout != tt.read {
				t.Errorf("base Net.ReadTimeout: got %v, want %v (left as given)", base.Net.ReadTimeout, tt.read)
			}
		})
	}
}

// TestJoinReadTimeoutLogged: New logs a Net.ReadTimeout it raises once,
// with the strategies, the read timeout given and used, and the drain and
// rebalance timeouts it follows: a warning when the one given is not
// sarama's default (a user who chose a short one to notice a dead broker
// soon learns that it will be noticed later), info when it is (sarama's
// default, or no Sarama given). Nothing when nothing is raised.
func TestJoinReadTimeoutLogged(t *testing.T) {
	const msg = "Net.ReadTimeout raised: under an eager rebalance protocol a JoinGroup waits for the other members' drains, and sarama waits for any answer only Net.ReadTimeout; a broker or coordinator that stops answering is noticed only after it (a cooperative strategy keeps it as set)"
	for _, tt := range []struct {
		name     string
		strategy string
		read     time.Duration // Net.ReadTimeout given; 0: no Sarama given
		level    zapcore.Level // of the entry; zapcore.InvalidLevel: none
		want     time.Duration
	}{
		{"a short one chosen", "range", 3 * time.Second, zapcore.WarnLevel, 53 * time.Second},
		{"sarama's default", "range", 30 * time.Second, zapcore.InfoLevel, 53 * time.Second},
		{"long enough", "range", time.Minute, zapcore.InvalidLevel, time.Minute},
		{"cooperative", "cooperative-sticky", 3 * time.Second, zapcore.InvalidLevel, 3 * time.Second},
		{"no Sarama given", "", 0, zapcore.InvalidLevel, 30 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			g := offlineGroup(t, func(c *Config) {
				c.Logger = zap.New(core)
				if tt.read == 0 {
					return
				}
				c.Sarama = DefaultSarama()
				st, _ := NewBalanceStrategy(tt.strategy)
				c.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{st}
				c.Sarama.Net.ReadTimeout = tt.read
			})
			if got := g.cfg.Sarama.Net.ReadTimeout; got != tt.want {
				t.Fatalf("Net.ReadTimeout: got %v, want %v", got, tt.want)
			}
			entries := logs.FilterMessage(msg).All()
			if tt.level == zapcore.InvalidLevel {
				if len(entries) != 0 {
					t.Fatalf("got %d entries (%v), want none", len(entries), entries[0].ContextMap())
				}
				return
			}
			if len(entries) != 1 || entries[0].Level != tt.level {
				t.Fatalf("got %d entries %v, want one at %v", len(entries), entries, tt.level)
			}
			got := entries[0].ContextMap()
			want := map[string]any{"group": "g", "strategies": []any{tt.strategy}, "net_read_timeout_set": tt.read,
				"net_read_timeout": tt.want, "drain_timeout": 30 * time.Second, "rebalance_timeout": time.Minute}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("fields: got %v, want %v", got, want)
			}
		})
	}
}
