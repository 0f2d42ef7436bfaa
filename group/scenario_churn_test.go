package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Reliability scenarios 1 and 2: membership churn with graceful stops,
// under live traffic. Every handoff is graceful, so the oracle wants no
// duplicate at all, besides no loss, lane order and clean commits. The
// members are dynamic (no InstanceID), so each stop is a LeaveGroup and
// a rebalance at once; static members' graceful stops (no LeaveGroup)
// are TestStaticMembershipRestart's.

// churnConfig is the member config of the churn scenarios: small batches
// and a short call, so that each member keeps up with the traffic alone
// but the run still has work in flight at every change.
func churnConfig(r *rig, groupID string, strategy sarama.BalanceStrategy) Config {
	cfg := r.config(groupID)
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	cfg.Size, cfg.Num, cfg.Ticker = 8, 4, 5*time.Millisecond
	return cfg
}

// TestScenario01JoinLeave: up to 5 members join one after the other, then
// leave one after the other (gracefully), at staggered times, while 3000
// messages a second arrive; once with the eager range strategy and once
// with cooperative-sticky.
func TestScenario01JoinLeave(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	for _, tt := range []struct {
		name     string
		strategy func() sarama.BalanceStrategy
	}{
		{"eager range", sarama.NewBalanceStrategyRange},
		{"cooperative sticky", sarama.NewBalanceStrategyCooperativeSticky},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := scenarioDuration(8 * time.Second)
			const partitions, rate, keys, most = 8, 3000, 400, 5
			n := int(d.Seconds() * rate)
			r, o := oracleRig(t, "1 join/leave, "+tt.name, "join-leave", partitions, n, keys)
			produced := r.produceAtRate(rate)
			cfg := churnConfig(r, "join-leave", tt.strategy())
			step := d / (2 * most)
			var live []func() error
			for i := range most {
				m := &member{tag: fmt.Sprintf("m%d", i), o: o, delay: time.Millisecond}
				live = append(live, m.start(t, cfg))
				time.Sleep(step)
			}
			for len(live) > 1 {
				if err := live[0](); err != nil {
					t.Fatalf("stopping a member: %v", err)
				}
				live = live[1:]
				time.Sleep(step)
			}
			produced()
			r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
			if err := live[0](); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestScenario02RandomToggle: four member slots, toggled at random every
// 0.3-1.5 s (at least one member stays) while 3000 messages a second
// arrive, cooperative-sticky (ORDERLY_SOAK_EAGER=1: range).
func TestScenario02RandomToggle(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	d := scenarioDuration(12 * time.Second)
	const partitions, rate, keys, slots = 8, 3000, 400, 4
	n := int(d.Seconds() * rate)
	r, o := oracleRig(t, "2 random toggling", "toggle", partitions, n, keys)
	strategy := sarama.NewBalanceStrategyCooperativeSticky()
	if envSet("ORDERLY_SOAK_EAGER") {
		strategy = sarama.NewBalanceStrategyRange()
	}
	cfg := churnConfig(r, "toggle", strategy)
	produced := r.produceAtRate(rate)
	var live [slots]func() error
	started := 0
	startSlot := func(i int) {
		m := &member{tag: fmt.Sprintf("s%d-%d", i, started), o: o, delay: time.Millisecond}
		started++
		live[i] = m.start(t, cfg)
	}
	startSlot(0)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	changes := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		i := rng.IntN(slots)
		if live[i] == nil {
			startSlot(i)
			changes++
			continue
		}
		running := 0
		for _, s := range live {
			if s != nil {
				running++
			}
		}
		if running == 1 {
			continue
		}
		if err := live[i](); err != nil {
			t.Fatalf("stopping slot %d: %v", i, err)
		}
		live[i] = nil
		changes++
	}
	produced()
	r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
	for _, s := range live {
		if s != nil {
			if err := s(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d membership changes over %v", changes, d)
}
