package group

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEagerRevokeWithinRebalanceTimeout: under the eager protocol a member
// must join again within Rebalance.Timeout of the rebalance's start, or
// the coordinator drops it; a revoking claim holds that join up for its
// whole release. Here everything in the release takes as long as it can:
// a Do call never returns by itself (the drain waits out DrainTimeout),
// the coordinator refuses the final commit, and it refuses every read of
// the committed offset (the read-back tries again until its budget is
// spent). The first member must still join the generation the second one
// joins in (the generations the broker handed out, as sarama's sessions
// report them), and nothing is lost: with the default DrainTimeout, and
// with one close to the rebalance timeout, which leaves the read-back
// less than its usual quarter of it.
func TestEagerRevokeWithinRebalanceTimeout(t *testing.T) {
	t.Parallel() // waits on timers mostly
	const rebalance = 6 * time.Second
	tests := []struct {
		name  string
		drain time.Duration // DrainTimeout; 0: the default, half of Rebalance.Timeout
	}{
		{"default drain timeout", 0},
		{"drain timeout near the rebalance timeout", rebalance * 8 / 10},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eagerRevokeUnderRefusals(t, fmt.Sprintf("revoke-refused-%d", i), rebalance, tt.drain)
		})
	}
}

func eagerRevokeUnderRefusals(t *testing.T, topic string, rebalance, drain time.Duration) {
	const partitions, n, keys = 2, 2000, 40
	r, o := oracleRig(t, "eager revoke under refusals", topic, partitions, n, keys)
	produced := r.produceAtRate(1000)
	cfg := r.config(topic)
	cfg.Size, cfg.Num, cfg.DrainTimeout = 4, 2, drain
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	cfg.Sarama.Consumer.Group.Rebalance.Timeout = rebalance
	// The read-back would try for far longer than its budget.
	cfg.Sarama.Metadata.Retry.Max, cfg.Sarama.Metadata.Retry.Backoff = 1000, 50*time.Millisecond

	var gens struct {
		sync.Mutex
		a, b []int32 // generations of each member's assignments
	}
	var lost atomic.Int32
	var lostAt atomic.Int64 // when the last of A's claims reported its partition lost (UnixNano)
	cfgA, cfgB := cfg, cfg
	cfgA.OnAssigned = func(_ string, _ []int32, gen int32) { gens.Lock(); gens.a = append(gens.a, gen); gens.Unlock() }
	cfgA.OnLost = func(_ string, parts []int32, _ int32) {
		lostAt.Store(time.Now().UnixNano())
		lost.Add(int32(len(parts)))
	}
	cfgB.OnAssigned = func(_ string, _ []int32, gen int32) { gens.Lock(); gens.b = append(gens.b, gen); gens.Unlock() }

	var stall atomic.Bool
	stalled := make(chan struct{})
	a := &member{tag: "A", o: o, hook: func(ctx context.Context, _ []*Message) error {
		if stall.CompareAndSwap(true, false) {
			close(stalled)
			<-ctx.Done() // cancelled by the drain's timeout
			return ctx.Err()
		}
		return nil
	}}
	stopA := a.start(t, cfgA)
	waitFor(t, 30*time.Second, "the first commits", func() bool { return len(r.b.Committed(cfg.GroupID, r.topic)) == partitions })
	stall.Store(true)
	<-stalled

	c := r.b.Cluster()
	commits := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: cfg.GroupID, Err: kerr.CoordinatorLoadInProgress, Count: -1})
	var refusing atomic.Bool
	var readsRefused atomic.Int32
	refusing.Store(true)
	// Not sarama's own read at a session's start (RequireStable under
	// ReadCommitted): the second member must be able to start.
	r.b.RefuseOffsetFetch(func(req *kmsg.OffsetFetchRequest) bool { return refusing.Load() && !req.RequireStable },
		func() { readsRefused.Add(1) })

	b := &member{tag: "B", o: o}
	joined := time.Now()
	stopB := b.start(t, cfgB)
	waitFor(t, 30*time.Second, "the second member's first assignment", func() bool { gens.Lock(); defer gens.Unlock(); return len(gens.b) > 0 })
	waitFor(t, 30*time.Second, "the first member's claims to report their partitions lost", func() bool { return lost.Load() == partitions })
	released := time.Unix(0, lostAt.Load()).Sub(joined)
	// A's final commits were refused: the next owners repeat what it
	// finished above the commits the broker held when it let go.
	o.uncleanEndGen(a.tag, firstGen(&gens.Mutex, &gens.a), r.b.Commits(cfg.GroupID, r.topic))
	refusing.Store(false)
	commits.Remove()

	produced()
	v := r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true, duplicates: true})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	gens.Lock()
	ga, gb := slices.Compact(slices.Clone(gens.a)), slices.Compact(slices.Clone(gens.b))
	gens.Unlock()
	// OnAssigned comes once per claim: a generation may repeat.
	if len(ga) < 2 || ga[1] != gb[0] || gb[0] != ga[0]+1 {
		t.Fatalf("generations assigned: first member %v, second %v; want the first member in the second's first generation, the one after its own first (a member that joins too late is dropped and joins a generation later)", ga, gb)
	}
	if commits.Hits() == 0 || readsRefused.Load() < 2 {
		t.Fatalf("refused: %d commits, %d reads; want the final commit and the read-back's tries refused", commits.Hits(), readsRefused.Load())
	}
	t.Logf("the second member joined; the first member's last claim let go %v later (Rebalance.Timeout %v, DrainTimeout %v); %d commits and %d reads refused; generations %v and %v; %d duplicates",
		released.Round(time.Millisecond), rebalance, a.g.Load().cfg.DrainTimeout, commits.Hits(), readsRefused.Load(), ga, gb, v.Duplicates)
}

// firstGen is the first generation in *gens, read under mu.
func firstGen(mu *sync.Mutex, gens *[]int32) int32 {
	mu.Lock()
	defer mu.Unlock()
	return (*gens)[0]
}

// TestReadBackUnansweredLetsGo: a releasing claim whose read-back of its
// final commit the coordinator never answers lets go (OnLost: nothing
// confirms the commit) when the read-back's budget, a quarter of the
// rebalance timeout, is spent, not when the read times out
// (Net.ReadTimeout, 8 s here).
func TestReadBackUnansweredLetsGo(t *testing.T) {
	t.Parallel() // waits on timers mostly
	r := newRig(t, "readback-unanswered", 1, 200, 10)
	cfg := r.config("readback-unanswered")
	cfg.Status.ReadBack = -1 // the final read-back is the only read after the claim's start
	cfg.Sarama.Consumer.Group.Rebalance.Timeout = 4 * time.Second
	cfg.Sarama.Net.ReadTimeout = 8 * time.Second
	var lost atomic.Int64 // when OnLost came (UnixNano)
	cfg.OnLost = func(string, []int32, int32) { lost.CompareAndSwap(0, time.Now().UnixNano()) }
	g := newGroup(t, cfg, r.work(0, 0).Do)
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	var holding atomic.Bool
	holding.Store(true)
	held := holdClaimRead(r, holding.Load)
	stopped := time.Now()
	stopErr := make(chan error, 1)
	go func() { stopErr <- stop() }()
	waitFor(t, 30*time.Second, "OnLost", func() bool { return lost.Load() != 0 })
	took := time.Unix(0, lost.Load()).Sub(stopped)
	holding.Store(false)
	if err := <-stopErr; err != nil {
		t.Fatal(err)
	}
	if held.Load() != 1 {
		t.Fatalf("read-backs held: got %d, want 1", held.Load())
	}
	budget := cfg.Sarama.Consumer.Group.Rebalance.Timeout / 4
	if took > budget+time.Second {
		t.Fatalf("OnLost %v after the stop, want within the read-back's budget %v (and far from Net.ReadTimeout %v)", took, budget, cfg.Sarama.Net.ReadTimeout)
	}
	t.Logf("OnLost %v after the stop (budget %v)", took.Round(time.Millisecond), budget)
}
