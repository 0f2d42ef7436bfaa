package group

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/commit"
)

// claimOf returns the running claim of topic/part, or nil.
func claimOf[T any](g *Group[T], topic string, part int32) *claimState {
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	for c := range g.claims {
		if c.topic == topic && c.part == part {
			return c
		}
	}
	return nil
}

// stuckDo wraps do: the first call whose batch holds a message for which
// isStuck is true blocks until release is closed (or its ctx ends).
func stuckDo(isStuck func(*Message) bool, do func(context.Context, []*Message) error) (d func(context.Context, []*Message) error, stuck <-chan struct{}, release func()) {
	stuckCh, rel := make(chan struct{}), make(chan struct{})
	var once, relOnce sync.Once
	var blocked atomic.Bool
	d = func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if isStuck(m) && !blocked.Swap(true) {
				once.Do(func() { close(stuckCh) })
				select {
				case <-rel:
				case <-ctx.Done():
				}
				break
			}
		}
		return do(ctx, batch)
	}
	return d, stuckCh, func() { relOnce.Do(func() { close(rel) }) }
}

// TestStuckHeadHoldsOnlyItsPartition (invariants 3 and 4): partition 0's
// first message blocks in Do; 4 partitions x 20k messages, MaxInFlight
// 2000 (a share of 500 each). The other partitions, produced while it is
// stuck, finish and their commits reach the high watermarks; partition 0
// keeps at most its share unfinished. With Size 1 the stuck lane holds back
// only its own messages and partition 0's other lanes finish (the commit
// metadata lists them). With the stuck lane a hot key and Size 16 (the
// stuck batch holds 16 of partition 0's lanes), partition 0 spends its
// share and pauses its own fetching while the others go on.
func TestStuckHeadHoldsOnlyItsPartition(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	for _, tt := range []struct {
		name string
		size int
		hot  bool
	}{
		{"stuck lane, Size 1", 1, false},
		{"stuck hot key, Size 16", 16, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const parts, per, keysPer = 4, 20_000, 250
			plan := make([]planned, 0, parts*per)
			for p := range parts { // partition 0 first: it is produced before the others
				for i := range per {
					key := uint32((i%keysPer)*parts + p) // key % 4 is its partition
					if tt.hot && p == 0 && i%10 < 3 {
						key = 0 // 30% of partition 0
					}
					plan = append(plan, planned{key: key, part: int32(p)})
				}
			}
			r := newRigPlan(t, "stuck", parts, plan)
			r.payload = make([]byte, 150) // a fetch response (1 MiB) then holds ~6k of partition 0's 20k messages
			r.produce(0, per)
			w := r.work(0, 0)
			do, stuck, release := stuckDo(func(m *Message) bool { return m.Partition == 0 && m.Offset == 0 }, w.Do)
			cfg := r.config("stuck")
			cfg.Size, cfg.Num, cfg.MaxInFlight = tt.size, 8, 2000
			g := newGroup(t, cfg, do)
			stop := run(t, g)
			defer release()
			select {
			case <-stuck:
			case <-time.After(time.Minute):
				t.Fatal("partition 0 offset 0 never reached Do")
			}
			r.produce(per, parts*per) // partitions 1-3, while partition 0 is stuck
			hw := r.b.HighWatermarks(r.topic)
			waitFor(t, time.Minute, "partitions 1-3 committed to their high watermarks", func() bool {
				c := r.b.Committed(cfg.GroupID, r.topic)
				return c[1] == hw[1] && c[2] == hw[2] && c[3] == hw[3]
			})
			st0 := claimOf(g, r.topic, 0)
			if st0 == nil {
				t.Fatal("partition 0 is not claimed")
			}
			share := int64(cfg.MaxInFlight / parts)
			if got := r.b.Committed(cfg.GroupID, r.topic)[0]; got != 0 {
				t.Fatalf("partition 0 committed %d while its offset 0 is stuck, want 0", got)
			}
			if got := st0.unfinished.Load(); got > share+1 {
				t.Fatalf("partition 0 unfinished: got %d, want at most its share %d (+1)", got, share)
			}
			if tt.hot {
				fetched := st0.fetched.Load()
				time.Sleep(500 * time.Millisecond)
				if !st0.fetchPaused.Load() || st0.fetched.Load() != fetched || fetched >= per {
					t.Fatalf("partition 0: fetch paused %v, fetched %d then %d of %d; want paused, not growing",
						st0.fetchPaused.Load(), fetched, st0.fetched.Load(), per)
				}
			} else {
				// Only the stuck key's 80 messages wait; the rest of
				// partition 0 finishes and the commits say so.
				waitFor(t, time.Minute, "partition 0's commit metadata to list its finished messages", func() bool {
					c := r.b.Commits(cfg.GroupID, r.topic)[0]
					done, err := commit.DecodeMeta(c.Metadata)
					return err == nil && done.Base == 0 && done.Count() >= per-per/keysPer
				})
				if st0.fetchPaused.Load() {
					t.Fatal("partition 0 paused its fetching with only the stuck lane unfinished")
				}
			}
			t.Logf("while stuck: partition 0 fetched %d, unfinished %d (share %d), paused %v; partitions 1-3 at %v",
				st0.fetched.Load(), st0.unfinished.Load(), share, st0.fetchPaused.Load(), hw)
			release()
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			r.check(false)
			r.checkFinalCommits(cfg.GroupID)
		})
	}
}

// TestPoisonInBatch (invariant 2): Size 256 and one message that fails
// every time. Its batch mates in other lanes finish, other partitions are
// untouched, only the poison's lane stays blocked, and no other message is
// ever handed out with an attempt charged.
func TestPoisonInBatch(t *testing.T) {
	const parts, n, keys = 2, 10_000, 100
	r := newRig(t, "poison", parts, n, keys)
	w := r.work(0, 0)
	var mu sync.Mutex
	var poison *[2]int64
	var poisonKey string
	poisonAttempts, charged := 0, map[[2]int64]int{}
	cfg := r.config("poison")
	cfg.Size, cfg.Num, cfg.Ticker = 256, 4, 20*time.Millisecond
	cfg.Retry = Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		mu.Lock()
		for _, m := range batch {
			k := [2]int64{int64(m.Partition), m.Offset}
			if poison == nil && m.Partition == 0 && m.Offset == 100 {
				poison, poisonKey = &k, string(m.Key)
			}
			if poison != nil && k == *poison {
				poisonAttempts = max(poisonAttempts, m.Attempt)
				mu.Unlock()
				return errors.New("poison")
			}
			if m.Attempt > 1 {
				charged[k] = m.Attempt
			}
		}
		mu.Unlock()
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	hw := r.b.HighWatermarks(r.topic)
	waitFor(t, time.Minute, "partition 1 committed to its end, partition 0 to the poison", func() bool {
		c := r.b.Committed(cfg.GroupID, r.topic)
		return c[1] == hw[1] && c[0] == 100
	})
	// Every message of partition 0 but the poison's lane finishes.
	var behind int64
	waitFor(t, time.Minute, "partition 0's other lanes to finish", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		fin := r.finished[0]
		missing := int64(0)
		for off := int64(0); off < hw[0]; off++ {
			if fin == nil || off/64 >= int64(len(fin.bits)) || fin.bits[off/64]&(1<<(off%64)) == 0 {
				missing++
			}
		}
		behind = missing
		return missing > 0 && missing < int64(n/parts/keys*3) // the poison's lane only
	})
	time.Sleep(200 * time.Millisecond) // a few retries of the poison
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(charged) != 0 {
		t.Fatalf("messages other than the poison handed out with an attempt charged: %v", charged)
	}
	if poisonAttempts < 2 {
		t.Fatalf("poison attempts: got %d, want it retried", poisonAttempts)
	}
	st := g.Stats()
	if st.Retries != int64(poisonAttempts-1) && st.Retries != int64(poisonAttempts) {
		t.Fatalf("Stats.Retries: got %d, want %d or %d (the poison's charged attempts only)", st.Retries, poisonAttempts-1, poisonAttempts)
	}
	t.Logf("poison %v (key %s): %d attempts, %d messages of its lane held, %d splits, %d failed calls",
		*poison, poisonKey, poisonAttempts, behind, st.Splits, st.Failures)
}

// TestBatchErrorRedeliversLaneInOrder: Do names about 5% of its items as
// failed (BatchError) and skips their later lane mates, as a handler that
// honours lane order would. Everything is handled exactly once in key
// order, and only named items are charged an attempt: their lane mates
// come back with Attempt 1.
func TestBatchErrorRedeliversLaneInOrder(t *testing.T) {
	const parts, n, keys = 4, 20_000, 200
	r := newRig(t, "named", parts, n, keys)
	w := r.work(0, 0)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(5, 6))
	named := map[[2]int64]int{}
	var badAttempt []string
	cfg := r.config("named")
	cfg.Size, cfg.Num = 32, 8
	cfg.Retry = Retry{Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		var ok []*Message
		held := map[string]bool{}
		mu.Lock()
		for i, m := range batch {
			k := [2]int64{int64(m.Partition), m.Offset}
			if m.Attempt != 1+named[k] {
				badAttempt = append(badAttempt, fmt.Sprintf("%v attempt %d after %d named failures", k, m.Attempt, named[k]))
			}
			switch {
			case held[string(m.Key)]:
			case m.Attempt < 3 && rng.IntN(20) == 0:
				named[k]++
				held[string(m.Key)] = true
				failed.Fail(i, errors.New("named"))
			default:
				ok = append(ok, m)
			}
		}
		mu.Unlock()
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return failed.Err()
	})
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
	r.checkFinalCommits(cfg.GroupID)
	mu.Lock()
	defer mu.Unlock()
	if len(badAttempt) > 0 {
		t.Fatalf("wrong Attempt on %d deliveries, first: %v", len(badAttempt), badAttempt[:min(5, len(badAttempt))])
	}
	total := 0
	for _, c := range named {
		total += c
	}
	if st := g.Stats(); st.Retries != int64(total) || total == 0 {
		t.Fatalf("Stats.Retries: got %d, want %d (the named failures, > 0)", st.Retries, total)
	}
}

// TestMetadataMidRun: while one lane is stuck, the commits the broker
// holds carry the finished offsets above the frontier, and keep up with
// them, at every commit interval (before, the interval's metadata was
// overwritten before sarama sent it).
func TestMetadataMidRun(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys = 12_000, 100
	plan := make([]planned, n)
	for i := range plan {
		plan[i] = planned{key: uint32(i % keys), part: 0}
	}
	r := newRigPlan(t, "midrun", 1, plan)
	w := r.work(0, 0)
	do, stuck, release := stuckDo(func(m *Message) bool { return m.Offset == 0 }, w.Do)
	cfg := r.config("midrun")
	cfg.Size, cfg.Num = 1, 4
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	defer release()
	var seen []int64 // finished counts in the commits read back
	waitListed := func(want int64) {
		t.Helper()
		waitFor(t, time.Minute, fmt.Sprintf("a commit listing %d finished messages", want), func() bool {
			c, ok := r.b.Commits(cfg.GroupID, r.topic)[0]
			if !ok {
				return false
			}
			done, err := commit.DecodeMeta(c.Metadata)
			if err != nil || c.Offset != 0 {
				return false
			}
			if k := len(seen); k == 0 || seen[k-1] != done.Count() {
				seen = append(seen, done.Count())
			}
			return done.Count() == want
		})
	}
	r.produce(0, n/2)
	<-stuck
	waitListed(n/2 - n/2/keys) // all but the stuck key's messages
	r.produce(n/2, n)
	waitListed(n - n/keys)
	t.Logf("finished above the stuck head in the commits read back: %v", seen)
	release()
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
}

// TestRevokedBatchContextCancelled (invariant 5): a batch still in Do when
// its partition's DrainTimeout passes has its ctx cancelled, with a cause
// naming the partition, so that it stops while the new owner takes over;
// the call is counted.
func TestRevokedBatchContextCancelled(t *testing.T) {
	causes, inDo := make(chan error, 1), make(chan struct{}, 1)
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Size: 1, Num: 2, Ticker: -1,
		DrainTimeout: 100 * time.Millisecond}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		inDo <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	stopWorkers := startWorkers(t, g)
	t.Cleanup(stopWorkers)
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &memClaim{p: 3, msgs: make(chan *sarama.ConsumerMessage, 1)}
	consumed := make(chan error, 1)
	go func() { consumed <- g.consume(sess, claim) }()
	claim.msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: 3, Offset: 0, Key: []byte("k")}
	// In Do, not only fetched (InFlight): a revoke before a worker takes
	// the message drops it, and Do never runs.
	select {
	case <-inDo:
	case <-time.After(5 * time.Second):
		t.Fatal("the message never reached Do")
	}
	start := time.Now()
	close(claim.msgs) // revoke
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(10 * time.Second):
		t.Fatal("Do's ctx was not cancelled after DrainTimeout")
	}
	if waited := time.Since(start); waited < cfg.DrainTimeout {
		t.Fatalf("ctx cancelled after %v, want DrainTimeout %v first", waited, cfg.DrainTimeout)
	}
	if !errors.Is(cause, ErrRevoked) || !strings.Contains(cause.Error(), "mem/3") {
		t.Fatalf("cause: got %v, want ErrRevoked naming mem/3", cause)
	}
	<-consumed
	waitFor(t, 5*time.Second, "the cancelled call to be counted", func() bool { return g.Stats().Cancelled == 1 })
	if sess.marked[3] != 0 {
		t.Fatalf("committed %d past the unfinished message, want 0", sess.marked[3])
	}
}
