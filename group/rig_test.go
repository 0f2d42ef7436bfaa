package group

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// rig is a kfake broker with one topic of known content, and the checks
// every integration test makes: a ledger of what Do saw (loss, per-key
// order, duplicates), the offsets Do finished per partition, and every
// OffsetCommit request the broker received, checked as it arrives (never
// past unfinished work, never backwards).
type rig struct {
	t      *testing.T
	b      *broker.Broker
	topic  string
	counts []uint32 // produced per key
	total  int
	ledger *ledger.Ledger

	mu       sync.Mutex
	finished map[int32]*offsets // offsets whose Do returned nil
	commits  map[int32]int64    // highest offset committed so far
	nCommits int
	problems []string
	seen     map[[2]int64][]sighting // who handled each partition/offset, for failure reports

	plan    []planned
	seqs    []uint32 // each planned message's sequence number within its key
	payload []byte   // appended to every value

	// refusedCommits: commits the broker may refuse are expected (an
	// evicted member's); observe sees requests, not answers, so it does
	// not check them for going backwards.
	refusedCommits bool
}

// sighting is one Do call's success for a message, by member tag.
type sighting struct {
	tag string
	at  time.Time
}

type offsets struct {
	bits   []uint64
	prefix int64 // every offset below is finished
}

func (o *offsets) set(off int64) {
	for int64(len(o.bits))*64 <= off {
		o.bits = append(o.bits, 0)
	}
	o.bits[off/64] |= 1 << (off % 64)
	for o.prefix < int64(len(o.bits))*64 && o.bits[o.prefix/64]&(1<<(o.prefix%64)) != 0 {
		o.prefix++
	}
}

// newRig starts a broker with topic (partitions) and produces n messages
// over keys keys, each value a ledger record.
func newRig(t *testing.T, topic string, partitions int32, n, keys int) *rig {
	t.Helper()
	plan := make([]planned, n)
	for i := range plan {
		plan[i] = planned{key: uint32(i % keys), part: -1}
	}
	r := newRigPlan(t, topic, partitions, plan)
	r.produce(0, n)
	return r
}

// planned is one message of a rig's plan: its key index, and the
// partition it goes to (-1: the key's hash decides).
type planned struct {
	key  uint32
	part int32
}

// newRigPlan starts a broker with topic (partitions) and a ledger for the
// messages of plan, and produces nothing yet (see produce): a test may
// produce the plan in parts, consuming in between.
func newRigPlan(t *testing.T, topic string, partitions int32, plan []planned) *rig {
	t.Helper()
	r := newRigQuiet(t, topic, partitions, plan)
	r.b.ObserveCommits(r.observe)
	return r
}

// newRigQuiet is newRigPlan without the rig's own commit checks (the
// oracle's replace them: see oracleRig).
func newRigQuiet(t *testing.T, topic string, partitions int32, plan []planned) *rig {
	t.Helper()
	keys := 0
	for _, p := range plan {
		keys = max(keys, int(p.key)+1)
	}
	r := &rig{
		t:        t,
		b:        startBroker(t, topic, partitions),
		topic:    topic,
		counts:   make([]uint32, keys),
		total:    len(plan),
		finished: map[int32]*offsets{},
		commits:  map[int32]int64{},
		plan:     plan,
		seqs:     make([]uint32, len(plan)),
	}
	for i, p := range plan {
		r.seqs[i] = r.counts[p.key]
		r.counts[p.key]++
	}
	r.ledger = ledger.New(r.counts)
	return r
}

// produce writes plan[from:to], in order.
func (r *rig) produce(from, to int) {
	r.t.Helper()
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := loadgen.Produce(ctx, r.b.Addrs(), r.topic, to-from, func(i int) loadgen.Record {
		p := r.plan[from+i]
		return loadgen.Record{
			Key:    fmt.Appendf(nil, "k%d", p.key),
			Value:  ledger.Encode(nil, p.key, r.seqs[from+i], now, r.payload),
			Pinned: p.part >= 0, Partition: p.part,
		}
	})
	if err != nil {
		r.t.Fatalf("produce messages %d-%d to %s: %v", from, to, r.topic, err)
	}
}

func (r *rig) observe(req *kmsg.OffsetCommitRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tp := range req.Topics {
		if tp.Topic != r.topic {
			continue
		}
		for _, p := range tp.Partitions {
			r.nCommits++
			fin := r.finished[p.Partition]
			prefix := int64(0)
			if fin != nil {
				prefix = fin.prefix
			}
			if p.Offset > prefix {
				r.problems = append(r.problems, fmt.Sprintf("member %s gen %d committed %s/%d offset %d past unfinished work (finished prefix %d)",
					req.MemberID, req.Generation, tp.Topic, p.Partition, p.Offset, prefix))
			}
			if last, ok := r.commits[p.Partition]; ok && p.Offset < last && !r.refusedCommits {
				r.problems = append(r.problems, fmt.Sprintf("member %s gen %d committed %s/%d offset %d below the earlier commit %d (zombie commit)",
					req.MemberID, req.Generation, tp.Topic, p.Partition, p.Offset, last))
			}
			r.commits[p.Partition] = max(r.commits[p.Partition], p.Offset)
		}
	}
}

// markSettled counts partition/offset as finished for the commit checks:
// a message that leaves the partition other than by Do returning nil for
// it (parked durably with Unordered and a DataPath, or dead-lettered) may
// be committed past once that is done, which its test checks itself.
func (r *rig) markSettled(p int32, off int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fin := r.finished[p]
	if fin == nil {
		fin = &offsets{}
		r.finished[p] = fin
	}
	fin.set(off)
}

// work is a Do that checks and records each message of a successful batch.
type work struct {
	tag      string
	r        *rig
	delay    time.Duration // per call
	failRate float64       // fraction of calls that fail
	mu       sync.Mutex
	rng      *rand.Rand
	fails    int
}

func (r *rig) work(delay time.Duration, failRate float64) *work {
	return &work{r: r, delay: delay, failRate: failRate, rng: rand.New(rand.NewPCG(7, 11))}
}

var errInjected = errors.New("injected failure")

// failingAt is w.Do, except that a batch holding offset target fails as a
// whole while failing is set (it starts set).
func (w *work) failingAt(target int64) (do func(context.Context, []*Message) error, failing *atomic.Bool) {
	failing = new(atomic.Bool)
	failing.Store(true)
	return func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target && failing.Load() {
				return fmt.Errorf("offset %d: %w", target, errInjected)
			}
		}
		return w.Do(ctx, batch)
	}, failing
}

func (w *work) Do(ctx context.Context, batch []*Message) error {
	if w.delay > 0 {
		time.Sleep(w.delay)
	}
	w.mu.Lock()
	fail := w.failRate > 0 && w.rng.Float64() < w.failRate
	if fail {
		w.fails++
	}
	w.mu.Unlock()
	if fail {
		return errInjected
	}
	w.r.mu.Lock()
	if w.r.seen == nil {
		w.r.seen = map[[2]int64][]sighting{}
	}
	for _, m := range batch {
		k := [2]int64{int64(m.Partition), m.Offset}
		w.r.seen[k] = append(w.r.seen[k], sighting{w.tag, time.Now()})
		key, seq, _, _, err := ledger.Decode(m.Value)
		if err != nil {
			w.r.problems = append(w.r.problems, fmt.Sprintf("%s/%d@%d: %v", m.Topic, m.Partition, m.Offset, err))
			continue
		}
		w.r.ledger.Record(key, seq, time.Time{})
		fin := w.r.finished[m.Partition]
		if fin == nil {
			fin = &offsets{}
			w.r.finished[m.Partition] = fin
		}
		fin.set(m.Offset)
	}
	w.r.mu.Unlock()
	return nil
}

func (w *work) failures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fails
}

// config is a Config for the rig's topic with fast group timings.
func (r *rig) config(groupID string) Config {
	return fastConfig(r.t, r.b.Addrs(), r.topic, groupID)
}

// fastConfig is a Config with fast group timings for tests.
func fastConfig(t *testing.T, brokers []string, topic, groupID string) Config {
	sc := DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	sc.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 6 * time.Second
	sc.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	return Config{
		Brokers: brokers,
		Topics:  []string{topic},
		GroupID: groupID,
		Sarama:  sc,
		Logger:  zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
		Retry:   Retry{Backoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
	}
}

// run starts g.Run in the background; the returned stop cancels it and
// returns Run's error.
func run[T any](t *testing.T, g *Group[T]) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				err = errors.New("Run did not return within 60s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitAllCommitted waits until the broker's committed offsets for groupID
// equal the high watermarks.
func (r *rig) waitAllCommitted(groupID string, timeout time.Duration) {
	r.t.Helper()
	waitFor(r.t, timeout, "committed offsets to reach the high watermarks", func() bool {
		return r.b.CaughtUp(groupID, r.topic)
	})
}

// runToEnd runs g until the commits of groupID reach the high watermarks,
// then stops it; Run must return no error.
func (r *rig) runToEnd(g *Group[*Message], groupID string) {
	r.t.Helper()
	stop := run(r.t, g)
	r.waitAllCommitted(groupID, time.Minute)
	if err := stop(); err != nil {
		r.t.Fatalf("Run: %v", err)
	}
}

// check fails the test on any recorded problem or ledger violation.
func (r *rig) check(wantDuplicates bool) ledger.Report {
	r.t.Helper()
	return r.checkOrder(wantDuplicates, true)
}

// checkOrder is check, with per-key order checked only when ordered.
func (r *rig) checkOrder(wantDuplicates, ordered bool) ledger.Report {
	r.t.Helper()
	return r.checkLost(wantDuplicates, ordered, 0)
}

// checkDeadLettered is check for a run in which n messages were
// dead-lettered: the ledger has exactly those lost to Do.
func (r *rig) checkDeadLettered(n int) ledger.Report {
	r.t.Helper()
	return r.checkLost(false, true, n)
}

// checkLost is checkOrder with lost messages expected.
func (r *rig) checkLost(wantDuplicates, ordered bool, lost int) ledger.Report {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	nd := 0
	for k, v := range r.seen {
		if len(v) > 1 && nd < 5 {
			nd++
			var who []string
			for _, x := range v {
				who = append(who, x.tag+"@"+x.at.Format("15:04:05.000"))
			}
			r.t.Logf("partition %d offset %d handled more than once: %v", k[0], k[1], who)
		}
	}
	for i, p := range r.problems {
		if i == 10 {
			r.t.Errorf("... and %d more problems", len(r.problems)-10)
			break
		}
		r.t.Error(p)
	}
	rep := r.ledger.Report()
	if rep.Lost != lost || (ordered && rep.OrderViolations != 0) || rep.Unknown != 0 || (!wantDuplicates && rep.Duplicates != 0) {
		r.t.Errorf("ledger: got lost=%d order violations=%d duplicates=%d unknown=%d (seen %d of %d), want lost=%d and the rest 0",
			rep.Lost, rep.OrderViolations, rep.Duplicates, rep.Unknown, rep.Distinct, rep.Produced, lost)
	}
	if r.nCommits == 0 {
		r.t.Error("the broker saw no OffsetCommit request: commit checks did not run")
	}
	return rep
}

// checkFinalCommits compares the committed offsets read back from the
// broker with the high watermarks.
func (r *rig) checkFinalCommits(groupID string) {
	r.t.Helper()
	hw, c := r.b.HighWatermarks(r.topic), r.b.Committed(groupID, r.topic)
	for p, h := range hw {
		if c[p] != h {
			r.t.Errorf("partition %d: committed %d, want the high watermark %d", p, c[p], h)
		}
	}
}
