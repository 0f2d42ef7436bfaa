package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Reliability scenarios 7 and 8: a member that cannot keep its session
// (its heartbeats starved past the session timeout while it is mid-batch)
// and a handler slower than the rebalance timeout. Both leave completions
// behind after their partitions moved: those are never committed, the new
// owner keeps lane order, and the repeats stay within the oracle's bound.

// slowMember is a member whose Do can be made slow, that tags each
// completion with its sarama member ID (a member that rejoins after being
// evicted is a new member), and with "late" when the call returned after
// its partition was revoked (ctx cancelled with ErrRevoked); it checks
// that within one member ID and generation each key's completions come in
// offset order (the new owner keeps lane order).
type slowMember struct {
	tag    string
	o      *oracle
	g      atomic.Pointer[Group[*Message]]
	slow   atomic.Int64  // each call sleeps this long (ns) first
	gate   chan struct{} // if set (before start), each call waits until it is closed first
	honour bool          // a slow call returns early with the cause when its ctx ends
	inDo   atomic.Int32
	n      atomic.Int64

	mu      sync.Mutex
	last    map[orderKey]int64
	late    map[string]bool // tags of late completions
	broken  []string
	nLate   int
	nCancel int
}

type orderKey struct {
	tag string
	gen int32
	p   int32
	key string
}

func newSlowMember(tag string, o *oracle, honour bool) *slowMember {
	return &slowMember{tag: tag, o: o, honour: honour, last: map[orderKey]int64{}, late: map[string]bool{}}
}

func (m *slowMember) Do(ctx context.Context, batch []*Message) error {
	m.inDo.Add(1)
	defer m.inDo.Add(-1)
	var timer <-chan time.Time
	if d := time.Duration(m.slow.Load()); d > 0 && m.gate == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	if timer != nil || m.gate != nil {
		var done <-chan struct{}
		if m.honour {
			done = ctx.Done()
		}
		select {
		case <-timer:
		case <-m.gate:
		case <-done:
			m.mu.Lock()
			m.nCancel++
			m.mu.Unlock()
			return context.Cause(ctx)
		}
	}
	now := time.Now()
	late := errors.Is(context.Cause(ctx), ErrRevoked)
	g := m.g.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range batch {
		tag, gen := m.tag+"/?", int32(0)
		if c := claimOf(g, msg.Topic, msg.Partition); c != nil {
			tag, gen = m.tag+"/"+c.sess.MemberID(), c.sess.GenerationID()
		}
		if late {
			tag += "/late"
			m.late[tag] = true
			m.nLate++
		} else {
			k := orderKey{tag, gen, msg.Partition, string(msg.Key)}
			if prev, ok := m.last[k]; ok && msg.Offset <= prev && len(m.broken) < 10 {
				m.broken = append(m.broken, fmt.Sprintf("%s gen %d handled key %q of partition %d at offset %d after offset %d", tag, gen, msg.Key, msg.Partition, msg.Offset, prev))
			}
			m.last[k] = msg.Offset
		}
		m.o.done(tag, gen, msg.Partition, msg.Offset, msg.Attempt, msg.Value, now)
	}
	m.n.Add(int64(len(batch)))
	return nil
}

func (m *slowMember) start(t *testing.T, cfg Config) (stop func() error) {
	t.Helper()
	g := newGroup(t, cfg, m.Do)
	m.g.Store(g)
	return run(t, g)
}

// memberID is the member's current sarama member ID ("" while it holds
// no partition) and its generation.
func (m *slowMember) memberID() (string, int32) {
	g := m.g.Load()
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	for c := range g.claims {
		return c.sess.MemberID(), c.sess.GenerationID()
	}
	return "", 0
}

// checkOrder fails the test on lane order broken within a member's
// generation.
func (m *slowMember) checkOrder(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.broken {
		t.Error(b)
	}
}

// lateTags are the tags of completions that came after a revoke.
func (m *slowMember) lateTags() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for tag := range m.late {
		out = append(out, tag)
	}
	return out
}

// committedBy reports whether member committed every partition in parts at
// a generation above gen (as the broker received it).
func (o *oracle) committedBy(member string, gen int32, parts []int32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[int32]bool{}
	for _, c := range o.commits {
		if c.member == member && c.gen > gen {
			seen[c.p] = true
		}
	}
	for _, p := range parts {
		if !seen[p] {
			return false
		}
	}
	return true
}

// heldPartitions returns the partitions g holds.
func heldPartitions[T any](g *Group[T]) []int32 {
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	var out []int32
	for c := range g.claims {
		out = append(out, c.part)
	}
	return out
}

// starveHeartbeats holds every Heartbeat of memberID at the broker, and
// with it everything the member sends on that connection after it (its
// commits, its fetches), until release is closed; then they are answered
// normally. started is closed when the first one is held, and inDo is
// read then.
func starveHeartbeats(r *rig, memberID string, release <-chan struct{}, inDo func() int32) (started <-chan int32) {
	c := r.b.Cluster()
	ch := make(chan int32, 1)
	var once sync.Once
	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		hb, ok := req.(*kmsg.HeartbeatRequest)
		if !ok || hb.MemberID != memberID {
			return nil, nil, false
		}
		select {
		case <-release:
			return nil, nil, false
		default:
		}
		once.Do(func() { ch <- inDo() })
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return ch
}

// watchCommitted samples the offsets the broker holds for group every 5 ms
// until the returned check is called; the check returns, by partition,
// the sampled offsets that only commits by member at gen sent after from
// asked for (zombie commits the broker took).
func watchCommitted(t *testing.T, r *rig, o *oracle, group string) (check func(member string, gen int32, from time.Time) map[int32][]int64) {
	t.Helper()
	type sample struct {
		p   int32
		off int64
	}
	seen := map[sample]bool{}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			for p, off := range r.b.Committed(group, r.topic) {
				seen[sample{p, off}] = true
			}
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return func(member string, gen int32, from time.Time) map[int32][]int64 {
		stop()
		o.mu.Lock()
		defer o.mu.Unlock()
		zombie := func(c commitObs) bool { return c.member == member && c.gen == gen && !c.at.Before(from) }
		byOthers := map[sample]bool{}
		for _, c := range o.commits {
			if !zombie(c) {
				byOthers[sample{c.p, c.off}] = true
			}
		}
		out := map[int32][]int64{}
		for _, c := range o.commits {
			if k := (sample{c.p, c.off}); zombie(c) && seen[k] && !byOthers[k] {
				out[c.p] = append(out[c.p], c.off)
			}
		}
		return out
	}
}

// TestScenario07HeartbeatsStarved: two members under traffic; the victim's
// calls take 100 ms. Its heartbeats are held at the broker while it is
// mid-batch (and everything it sends after them on that connection: its
// commits, its fetches), past the session timeout: the coordinator evicts
// it and the other member takes its partitions from the last commit that
// reached the broker, and commits them in the new generation. Then the
// held requests are let through: the victim's heartbeat learns it is no
// longer a member, and its commits of what it finished meanwhile are
// refused (zombie commits, counted by the oracle; one accepted would be a
// violation). It rejoins as a new member and gets partitions back through
// a graceful handoff. Repeats are only the victim's completions not
// covered by the broker's commits when its heartbeats stopped.
// Cooperative-sticky (ORDERLY_SOAK_EAGER=1: range).
func TestScenario07HeartbeatsStarved(t *testing.T) {
	t.Parallel() // mostly waiting on the session timeout
	const partitions, rate, keys = 4, 1500, 200
	d := scenarioDuration(12 * time.Second)
	n := int(d.Seconds() * rate)
	r, o := oracleRig(t, "7 heartbeats starved past the session timeout mid-batch", "starved", partitions, n, keys)
	produced := r.produceAtRate(rate)
	cfg := r.config("starved")
	cfg.Size, cfg.Num, cfg.Ticker = 16, 4, 5*time.Millisecond
	if envSet("ORDERLY_SOAK_EAGER") { // the default is cooperative-sticky
		cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	}
	victim, other := newSlowMember("victim", o, false), newSlowMember("other", o, false)
	victim.slow.Store(int64(100 * time.Millisecond))
	stopV, stopO := victim.start(t, cfg), other.start(t, cfg)
	var vID string
	var gen0 int32
	waitFor(t, 30*time.Second, "both members to hold partitions and handle records", func() bool {
		vID, gen0 = victim.memberID()
		oID, _ := other.memberID()
		return vID != "" && oID != "" && victim.n.Load() > 0 && other.n.Load() > 0 &&
			len(heldPartitions(victim.g.Load()))+len(heldPartitions(other.g.Load())) == partitions
	})
	vParts := heldPartitions(victim.g.Load())
	release := make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let)
	started := starveHeartbeats(r, vID, release, victim.inDo.Load)
	var inDo int32
	select {
	case inDo = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the victim sent no heartbeat within 10s")
	}
	starvedAt := time.Now()
	held := r.b.Commits(cfg.GroupID, r.topic) // all the victim's commits that will ever count
	// The generation the victim's commits carry (its claims may have
	// started in an earlier one: cooperative claims outlive rebalances).
	gen0 = r.b.Cluster().GroupInfo(cfg.GroupID).Epoch
	if inDo == 0 {
		t.Errorf("the victim had no call in Do when its heartbeats stopped, want it mid-batch")
	}
	oID, _ := other.memberID()
	waitFor(t, 30*time.Second, "the other member to take the victim's partitions and commit them in a new generation", func() bool {
		return len(heldPartitions(other.g.Load())) == partitions && o.committedBy(oID, gen0, vParts)
	})
	evictedAfter := time.Since(starvedAt)
	o.uncleanEnd("victim/"+vID, held)
	watch := watchCommitted(t, r, o, cfg.GroupID)
	released := time.Now()
	let()
	waitFor(t, 30*time.Second, "the victim to rejoin as a new member and hold partitions", func() bool {
		id, _ := victim.memberID()
		return id != "" && id != vID
	})
	accepted := watch(vID, gen0, released)
	if len(accepted) > 0 {
		t.Errorf("zombie commits the broker took (partition: offset only the evicted member committed): %v, want none", accepted)
	}
	produced()
	v := r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true, duplicates: true})
	if v.ZombiesRefused == 0 {
		t.Errorf("zombie commits refused: got 0, want the victim's commits after its eviction seen and refused")
	}
	victim.checkOrder(t)
	other.checkOrder(t)
	for _, stop := range []func() error{stopV, stopO} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	st := victim.g.Load().Stats()
	t.Logf("victim %s (partitions %v) starved with %d calls in Do; taken over and committed by the other member %v later (session timeout %v); victim's rebalance and commit errors %d; %d duplicates within the bound %d",
		vID, vParts, inDo, evictedAfter.Round(time.Millisecond), cfg.Sarama.Consumer.Group.Session.Timeout, st.ErrorsBy.Rebalance, v.Duplicates, v.DupBound)
}

// TestScenario08SlowerThanRebalance: one member consumes with calls that
// take longer than the rebalance timeout (they last until a second member
// has joined and got partitions, and at least 4 s, against a rebalance
// timeout of 3 s; DrainTimeout is half of it), calls in Do on every
// partition; the second member joins. The slow member's revoked
// partitions cannot wait for their calls: after DrainTimeout their ctx is
// cancelled, the final frontier is committed, and the member rejoins in
// time, keeping its member ID (it is not dropped from the group). A
// handler that honours its ctx returns at once and nothing is handled
// twice; one that ignores it finishes later, and those late completions
// are never committed: the new owner handles them again (the only repeats,
// at most the batches running at the revoke).
func TestScenario08SlowerThanRebalance(t *testing.T) {
	for _, tt := range []struct {
		name     string
		honour   bool
		strategy func() sarama.BalanceStrategy
	}{
		{"cooperative sticky, ctx honoured", true, sarama.NewBalanceStrategyCooperativeSticky},
		{"cooperative sticky, ctx ignored", false, sarama.NewBalanceStrategyCooperativeSticky},
		{"eager range, ctx ignored", false, sarama.NewBalanceStrategyRange},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // mostly waiting on slow calls and rebalances
			const partitions, n, keys = 4, 4000, 80
			const rebalance, call = 3 * time.Second, 4 * time.Second
			r, o := oracleRig(t, "8 handler slower than the rebalance timeout, "+tt.name, "slow-handler", partitions, n, keys)
			r.produce(0, n/2)
			cfg := r.config("slow-handler")
			cfg.Sarama.Consumer.Group.Rebalance.Timeout = rebalance
			cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{tt.strategy()}
			// 64 workers on 80 lanes (20 keys per partition), one message
			// per call: once all are in Do, every partition has at least
			// 4 calls there, whichever partitions the rebalance moves.
			cfg.Size, cfg.Num, cfg.Ticker = 1, 64, 5*time.Millisecond
			slow, joiner := newSlowMember("slow", o, tt.honour), newSlowMember("joiner", o, true)
			slow.gate = make(chan struct{})
			var gateOnce sync.Once
			openGate := func() { gateOnce.Do(func() { close(slow.gate) }) }
			t.Cleanup(openGate) // before stopS's cleanup runs (cleanups run last first)
			stopS := slow.start(t, cfg)
			var slowID string
			waitFor(t, 30*time.Second, "the slow member to hold every partition with calls in Do", func() bool {
				slowID, _ = slow.memberID()
				return len(heldPartitions(slow.g.Load())) == partitions && slow.inDo.Load() == int32(cfg.Num)
			})
			calling := time.Now()
			gen0 := r.b.Cluster().GroupInfo(cfg.GroupID).Epoch
			// What the broker holds now covers none of the calls in Do:
			// those that finish after their revoke are repeats to expect.
			held := r.b.Commits(cfg.GroupID, r.topic)
			joined := time.Now()
			stopJ := joiner.start(t, cfg)
			waitFor(t, 30*time.Second, "the joiner to hold partitions", func() bool { return len(heldPartitions(joiner.g.Load())) > 0 })
			rebalanced := time.Since(joined)
			// The calls end once the rebalance is over and they ran
			// longer than the rebalance timeout.
			time.Sleep(time.Until(calling.Add(call)))
			openGate()
			waitFor(t, 30*time.Second, "both members to hold partitions", func() bool {
				return len(heldPartitions(slow.g.Load())) > 0 && len(heldPartitions(joiner.g.Load()))+len(heldPartitions(slow.g.Load())) == partitions
			})
			// The coordinator's view: the slow member is still a member,
			// under the same ID, in a later generation.
			gi := r.b.Cluster().GroupInfo(cfg.GroupID)
			var members []string
			kept := false
			for _, m := range gi.Members {
				members = append(members, m.MemberID)
				kept = kept || (m.MemberID == slowID && m.NumAssigned() > 0)
			}
			if !kept || gi.Epoch <= gen0 {
				t.Errorf("after the rebalance: generation %d, members %v; want %q among them with partitions, in a generation above %d (kept, not dropped)", gi.Epoch, members, slowID, gen0)
			}
			// Two rounds under cooperative-sticky, each within the
			// rebalance timeout; generous for a loaded machine. (Had the
			// revoke waited for the 4 s calls, the coordinator would
			// have dropped the slow member: its ID checked above.)
			if rebalanced > 3*rebalance {
				t.Errorf("the joiner got partitions %v after joining, want within two rebalance rounds of %v (and a margin)", rebalanced, rebalance)
			}
			r.produce(n/2, n)
			waitFor(t, 30*time.Second, "the slow calls to return", func() bool { return slow.inDo.Load() == 0 })
			for _, tag := range slow.lateTags() {
				o.uncleanEnd(tag, held)
			}
			v := r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true, duplicates: !tt.honour})
			slow.checkOrder(t)
			joiner.checkOrder(t)
			st := slow.g.Load().Stats()
			slow.mu.Lock()
			nLate, nCancel := slow.nLate, slow.nCancel
			slow.mu.Unlock()
			switch {
			case tt.honour && (nCancel == 0 || nLate != 0):
				t.Errorf("calls returning on their cancelled ctx %d, late completions %d; want some and 0", nCancel, nLate)
			case !tt.honour && (nLate == 0 || v.Duplicates > nLate):
				t.Errorf("late completions %d, duplicates %d; want some, and duplicates at most the late completions", nLate, v.Duplicates)
			}
			if st.Cancelled == 0 && st.Abandoned == 0 {
				t.Errorf("Stats.Cancelled %d, Abandoned %d; want the calls running at the revoke counted", st.Cancelled, st.Abandoned)
			}
			for _, stop := range []func() error{stopS, stopJ} {
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("calls of %v, rebalance timeout %v: the joiner held partitions %v after joining; slow member kept %s; %d calls cancelled, %d abandoned, %d late completions, %d duplicates",
				call, rebalance, rebalanced.Round(time.Millisecond), slowID, st.Cancelled, st.Abandoned, nLate, v.Duplicates)
		})
	}
}
