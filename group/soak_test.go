package group

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestSoak churns the group for ORDERLY_SOAK (a duration, e.g. 2m):
// members join and leave gracefully at random while a backlog is consumed,
// with the cooperative-sticky strategy (ORDERLY_SOAK_EAGER=1: range).
// Every handoff is graceful, so at the end nothing may be lost, reordered
// or handled twice, and no commit may have passed unfinished work.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("ORDERLY_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set ORDERLY_SOAK=2m (a duration) to run the soak test")
	}
	const partitions, keys, slots = 12, 2000, 4
	// Each member handles about 4 workers x 8 messages / 4 ms = 8k msg/s;
	// produce enough for a bit more than d at two members on average.
	n := int(d.Seconds() * 16_000)
	r := newRig(t, "soak", partitions, n, keys)
	cfg := r.config("soak")
	if os.Getenv("ORDERLY_SOAK_EAGER") == "1" {
		cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	}
	cfg.Size, cfg.Num, cfg.Ticker = 8, 4, 5*time.Millisecond
	w := r.work(4*time.Millisecond, 0.005)

	type member struct {
		g    *Group[*Message]
		stop func() error
	}
	var live [slots]*member
	start := func(i int) {
		g := newGroup(t, cfg, w.Do)
		live[i] = &member{g: g, stop: run(t, g)}
	}
	start(0)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	deadline := time.Now().Add(d)
	changes := 0
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		i := rng.IntN(slots)
		switch {
		case live[i] == nil:
			start(i)
		default:
			running := 0
			for _, m := range live {
				if m != nil {
					running++
				}
			}
			if running == 1 {
				continue // keep one member so the backlog moves
			}
			if err := live[i].stop(); err != nil {
				t.Fatalf("member %d Run: %v", i, err)
			}
			live[i] = nil
		}
		changes++
	}
	if live[0] == nil {
		start(0)
	}
	r.waitAllCommitted(cfg.GroupID, 10*time.Minute)
	for i, m := range live {
		if m != nil {
			if err := m.stop(); err != nil {
				t.Fatalf("member %d Run: %v", i, err)
			}
		}
	}
	rep := r.check(false)
	r.checkFinalCommits(cfg.GroupID)
	t.Logf("%d membership changes over %v; %d messages, %d Do failures retried", changes, d, rep.Distinct, w.failures())
}
