package group

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/ledger"
	"github.com/orderly-go/orderly/localqueue"
)

// failsFor is how many times the message at (partition, offset) fails
// before it succeeds: 0 for 95% of messages, 1-3 for the rest.
func failsFor(p int32, off int64) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", p, off)
	v := h.Sum32()
	if v%20 != 0 {
		return 0
	}
	return int(v/20%3) + 1
}

// TestRetriesPerItem: 5% of messages fail 1-3 times each (named in a
// BatchError; the handler skips their later lane mates, as one that keeps
// lane order does). Everything is handled once, in key order, every
// delivery's Attempt is 1 plus the failures charged so far, and the final
// commits reach the high watermarks.
func TestRetriesPerItem(t *testing.T) {
	const parts, n, keys = 4, 20_000, 300
	r := newRig(t, "retries", parts, n, keys)
	w := r.work(0, 0)
	var mu sync.Mutex
	failed := map[[2]int64]int{}
	var bad []string
	cfg := r.config("retries")
	cfg.Size, cfg.Num = 16, 8
	cfg.Retry = Retry{Backoff: 2 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		var be BatchError
		var ok []*Message
		skip := map[string]bool{}
		mu.Lock()
		for i, m := range batch {
			k := [2]int64{int64(m.Partition), m.Offset}
			if m.Attempt != failed[k]+1 {
				bad = append(bad, fmt.Sprintf("%v: attempt %d after %d failures", k, m.Attempt, failed[k]))
			}
			switch {
			case skip[string(m.Key)]:
			case failed[k] < failsFor(m.Partition, m.Offset):
				failed[k]++
				skip[string(m.Key)] = true
				be.Fail(i, errors.New("transient"))
			default:
				ok = append(ok, m)
			}
		}
		mu.Unlock()
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return be.Err()
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
	if len(bad) > 0 {
		t.Fatalf("%d deliveries with a wrong Attempt, first: %v", len(bad), bad[:min(5, len(bad))])
	}
	total := 0
	for _, c := range failed {
		total += c
	}
	st := g.Stats()
	if total == 0 || st.Retries != int64(total) || st.Retrying != 0 {
		t.Fatalf("failures %d, Stats.Retries %d, Retrying %d: want Retries = failures > 0 and none left waiting", total, st.Retries, st.Retrying)
	}
	t.Logf("%d messages failed %d times in all; all handled once, in order", len(failed), total)
}

// readDeadLetters reads every record of topic from its start.
func readDeadLetters(t *testing.T, addrs []string, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	c, err := sarama.NewConsumer(addrs, DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*sarama.ConsumerMessage
	client, err := sarama.NewClient(addrs, DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, p := range parts {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil || hw == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for len(out) < 1<<20 {
			m := <-pc.Messages()
			out = append(out, m)
			if m.Offset == hw-1 {
				break
			}
		}
		pc.Close()
	}
	return out
}

// readDeadLetterInfos reads every record of topic from its start and
// parses its __orderly.errors.* headers.
func readDeadLetterInfos(t *testing.T, addrs []string, topic string) []deadletter.Info {
	t.Helper()
	var out []deadletter.Info
	for _, m := range readDeadLetters(t, addrs, topic) {
		hs := make([]deadletter.Header, len(m.Headers))
		for i, h := range m.Headers {
			hs[i] = deadletter.Header{Key: h.Key, Value: h.Value}
		}
		info, err := deadletter.ParseInfo(hs)
		if err != nil {
			t.Fatalf("dead letter at %s/%d offset %d: %v", topic, m.Partition, m.Offset, err)
		}
		out = append(out, info)
	}
	return out
}

func headerMap(hs []*sarama.RecordHeader) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		out[string(h.Key)] = string(h.Value)
	}
	return out
}

// TestPoisonDeadLettered: a message that always fails, with MaxAttempts 3,
// becomes exactly one dead letter, read back from the dead-letter topic
// with its key, value and headers and the __orderly.errors.* headers; its
// lane goes on and the commit passes it. A message New cannot decode is
// dead-lettered the same way (reason poison). With no DeadLetterTopic but a
// DataPath the same goes to the local store.
func TestPoisonDeadLettered(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	for _, dest := range []string{"topic", "local"} {
		t.Run(dest, func(t *testing.T) {
			const n, keys = 3000, 30
			r := newRig(t, "poison-dl", 2, n, keys)
			if err := r.b.CreateTopic("dlq", 1); err != nil {
				t.Fatal(err)
			}
			w := r.work(0, 0)
			cfg := r.config("poison-dl")
			cfg.Size, cfg.Num = 8, 4
			cfg.Retry = Retry{Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxAttempts: 3}
			if dest == "topic" {
				cfg.DeadLetterTopic = "dlq"
			} else {
				cfg.DataPath = t.TempDir()
			}
			isPoison := func(m *Message) bool { return m.Partition == 0 && m.Offset == 100 }
			undecodable := func(m *Message) bool { return m.Partition == 1 && m.Offset == 200 }
			var poisonAttempts atomic.Int64
			g, err := New(cfg, Handler[*Message]{
				New: func(m *Message) (*Message, error) {
					if undecodable(m) {
						return nil, errors.New("cannot decode")
					}
					return m, nil
				},
				Do: func(ctx context.Context, batch []*Message) error {
					for _, m := range batch {
						if isPoison(m) {
							poisonAttempts.Add(1)
							return errors.New("always fails")
						}
					}
					return w.Do(ctx, batch)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, g)
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			// Per partition: each message counted once by its fate,
			// adding up to the broker's committed offset; the poison's
			// three failed attempts counted once it finished.
			hw := r.b.HighWatermarks(r.topic)
			committed := r.b.Committed(cfg.GroupID, r.topic)
			want := map[int32]Outcomes{
				0: {Handled: hw[0] - 1, DeadLettered: 1, FailedAttempts: 3},
				1: {Handled: hw[1] - 1, DeadLettered: 1},
			}
			var got []PartitionStats
			waitFor(t, 10*time.Second, fmt.Sprintf("outcomes %v to add up to %v", want, committed), func() bool {
				got = g.Stats().PartitionStats
				for _, ps := range got {
					o := ps.Outcomes
					if o != want[ps.Partition] || o.Handled+o.DeadLettered != committed[ps.Partition] {
						t.Logf("partition %d: got %+v", ps.Partition, o)
						return false
					}
				}
				return true
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			// Every message but the two was handled, in order; their lanes went on.
			rep := r.ledger.Report()
			if rep.Lost != 2 || rep.Duplicates != 0 || rep.OrderViolations != 0 {
				t.Fatalf("ledger: lost %d duplicates %d order violations %d; want exactly the 2 dead-lettered lost, no others", rep.Lost, rep.Duplicates, rep.OrderViolations)
			}
			var recs []deadletter.Record
			if dest == "topic" {
				for _, m := range readDeadLetters(t, r.b.Addrs(), "dlq") {
					rec := deadletter.Record{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
					for _, h := range m.Headers {
						rec.Headers = append(rec.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
					}
					recs = append(recs, rec)
				}
			} else {
				st, err := deadletter.Open(filepath.Join(cfg.DataPath, deadletter.DirName), deadletter.Options{ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Scan(func(_ int64, rec deadletter.Record) error { recs = append(recs, rec); return nil }); err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			if len(recs) != 2 {
				t.Fatalf("dead letters: got %d, want 2", len(recs))
			}
			byReason := map[string]deadletter.Info{}
			for _, rec := range recs {
				info, err := deadletter.ParseInfo(rec.Headers)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, _, _, err := ledger.Decode(rec.Value); err != nil {
					t.Fatalf("dead letter value is not the original record: %v", err)
				}
				byReason[info.Reason] = info
			}
			if got := byReason["max_attempts"]; got.Topic != r.topic || got.Partition != 0 || got.Offset != 100 || got.Attempts != 3 ||
				got.Group != cfg.GroupID || !strings.Contains(got.Message, "always fails") || got.FirstFailure.IsZero() {
				t.Fatalf("max_attempts dead letter: got %+v, want %s/0@100 after 3 attempts, group %s, its error, a first failure time", got, r.topic, cfg.GroupID)
			}
			if got := byReason["poison"]; got.Partition != 1 || got.Offset != 200 || !strings.Contains(got.Message, "cannot decode") {
				t.Fatalf("poison dead letter: got %+v, want %s/1@200 and the decode error", got, r.topic)
			}
			if poisonAttempts.Load() < 3 {
				t.Fatalf("the poison message was tried %d times, want at least 3", poisonAttempts.Load())
			}
			st := g.Stats()
			if st.DeadLettered.MaxAttempts != 1 || st.DeadLettered.Poison != 1 || st.DeadLetterPending != 0 {
				t.Fatalf("Stats.DeadLettered: %+v pending %d; want 1 max_attempts, 1 poison, none pending", st.DeadLettered, st.DeadLetterPending)
			}
			// Handed out again after its first and second failures; the
			// third used up its attempts.
			if st.Retries != 2 {
				t.Fatalf("Stats.Retries: got %d, want 2 (the poison handed out again twice)", st.Retries)
			}
		})
	}
}

// TestDeadLetterRefused: while the broker refuses the dead-letter topic's
// produce (5 s), the poison message's offset is not committed, its lane
// waits, and nothing is lost; once the produce goes through, the commit
// passes it.
func TestDeadLetterRefused(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys = 2000, 20
	r := newRig(t, "refused", 1, n, keys)
	if err := r.b.CreateTopic("dlq-refused", 1); err != nil {
		t.Fatal(err)
	}
	var refusing atomic.Bool
	refusing.Store(true)
	var refused atomic.Int64
	r.b.RefuseProduce("dlq-refused", refusing.Load, func() { refused.Add(1) })
	w := r.work(0, 0)
	cfg := r.config("refused")
	cfg.Size, cfg.Num = 4, 4
	cfg.DeadLetterTopic = "dlq-refused"
	cfg.Retry = Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAttempts: 2}
	cfg.Sarama.Producer.Retry.Max = 1
	cfg.Sarama.Producer.Retry.Backoff = 10 * time.Millisecond
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == 50 {
				return errors.New("always fails")
			}
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	start := time.Now()
	waitFor(t, time.Minute, "the dead-letter produce to be refused", func() bool { return refused.Load() > 0 })
	for time.Since(start) < 5*time.Second {
		if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c > 50 {
			t.Fatalf("committed %d past the poison message at 50 while its dead letter is refused", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, 30*time.Second, "a failed dead-letter write to be counted", func() bool { return g.Stats().DeadLetterErrors > 0 })
	if st := g.Stats(); st.DeadLetterPending != 1 {
		t.Fatalf("while refused: DeadLetterPending %d, want 1", st.DeadLetterPending)
	}
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c > 50 {
		t.Fatalf("committed %d past the poison message at 50 while its dead letter is refused", c)
	}
	refusing.Store(false)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := len(readDeadLetters(t, r.b.Addrs(), "dlq-refused")); got < 1 {
		t.Fatalf("dead letters after the refusal: got %d, want the poison message", got)
	}
	rep := r.ledger.Report()
	if rep.Lost != 1 || rep.Duplicates != 0 || rep.OrderViolations != 0 {
		t.Fatalf("ledger: lost %d duplicates %d order %d; want only the dead-lettered one lost", rep.Lost, rep.Duplicates, rep.OrderViolations)
	}
	t.Logf("produce refused %d times over 5s; %d write errors retried", refused.Load(), g.Stats().DeadLetterErrors)
}

// attemptLog records each Do call's sight of one offset: its Attempt and
// when.
type attemptLog struct {
	mu    sync.Mutex
	seen  []int
	times []time.Time
}

func (a *attemptLog) add(attempt int) {
	a.mu.Lock()
	a.seen = append(a.seen, attempt)
	a.times = append(a.times, time.Now())
	a.mu.Unlock()
}

func (a *attemptLog) get() ([]int, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.seen...), append([]time.Time(nil), a.times...)
}

// TestAttemptsSurviveHandoff: a message that failed once under member A
// waits for its retry; A's commit carries its attempt and not-before
// time; A leaves gracefully and member B goes on with it at attempt 2, not
// before the backoff A set, and then at attempt 3.
func TestAttemptsSurviveHandoff(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys, target = 300, 10, 5
	r := newRig(t, "handoff-attempts", 1, n, keys)
	w := r.work(0, 0)
	var log attemptLog
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target {
				log.add(m.Attempt)
				if m.Attempt < 3 {
					return errors.New("fails twice")
				}
			}
		}
		return w.Do(ctx, batch)
	}
	var decoded attemptLog // the attempts New saw: once per delivery from Kafka
	newGroupWithNew := func(cfg Config) *Group[*Message] {
		g, err := New(cfg, Handler[*Message]{
			New: func(m *Message) (*Message, error) {
				if m.Offset == target {
					decoded.add(m.Attempt)
				}
				return m, nil
			},
			Do: do,
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	cfg := r.config("handoff-attempts")
	cfg.Size, cfg.Num = 1, 4
	cfg.Retry = Retry{Backoff: 3 * time.Second, MaxBackoff: 3 * time.Second, Jitter: -1}
	logger, logs := observed()
	cfg.Logger = logger
	a := newGroupWithNew(cfg)
	stopA := run(t, a)
	var notBefore time.Time
	waitFor(t, time.Minute, "A's commit to carry the waiting message", func() bool {
		d, err := commit.DecodeMeta(r.b.Commits(cfg.GroupID, r.topic)[0].Metadata)
		if err != nil {
			return false
		}
		w, ok := d.WaitingAt(target)
		notBefore = w.NotBefore
		return ok && w.Attempt == 2 && !w.NotBefore.IsZero()
	})
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if seen, _ := log.get(); len(seen) != 1 {
		t.Fatalf("attempts under A: got %v, want [1] (its retry is 3s away)", seen)
	}
	// Its retry's timer was pending when A stopped: nothing is lost (the
	// commit carries it), so nothing warns that something was discarded.
	for _, e := range logs.All() {
		if e.Level >= zapcore.WarnLevel && e.Message != "Do failed; its failing items are retried or dead-lettered" {
			t.Errorf("A logged %q %v, want no warning but the failure's", e.Message, e.ContextMap())
		}
	}
	cfg.Logger = nil
	b := newGroupWithNew(cfg)
	stopB := run(t, b)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	seen, times := log.get()
	if len(seen) != 3 || seen[0] != 1 || seen[1] != 2 || seen[2] != 3 {
		t.Fatalf("attempts seen: got %v, want [1 2 3] (B continues the count)", seen)
	}
	if times[1].Before(notBefore.Add(-scanInterval(cfg.Retry.Backoff))) {
		t.Fatalf("B's attempt 2 at %v, before the not-before %v A committed", times[1], notBefore)
	}
	if got, _ := decoded.get(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("attempts New saw: got %v, want [1 2] (B decodes it at the attempt it resumes)", got)
	}
	if st := b.Stats(); st.ResumedWaiting != 1 {
		t.Fatalf("B's ResumedWaiting: got %d, want 1", st.ResumedWaiting)
	}
	r.check(true) // A's handoff metadata lists what it finished; B may not repeat it, but the target repeats by design
}

// oneWorkerQuickRetry is r's config for group with one worker, batches of
// one, and a 10 ms retry backoff.
func oneWorkerQuickRetry(r *rig, group string) Config {
	cfg := r.config(group)
	cfg.Size, cfg.Num = 1, 1
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, Jitter: -1}
	return cfg
}

// untilReleased blocks a Do call until release is closed, or returns its
// ctx's error once ctx ends.
func untilReleased(ctx context.Context, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopDuringCall runs a member with cfg and do until its only worker is in
// the call that signals started and waits for release, stops the member,
// lets the call end 500 ms into the shutdown's drain, and returns the
// group's final commit of partition 0 as the broker holds it. Sooner than
// 500 ms, the test using it shows nothing; it cannot fail for that.
func stopDuringCall[S any](t *testing.T, r *rig, cfg Config, do func(context.Context, []*Message) error, started <-chan S, release chan struct{}) broker.Commit {
	t.Helper()
	stop := run(t, newGroup(t, cfg, do))
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the call never started")
	}
	group := cfg.GroupID
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(500 * time.Millisecond)
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	c, ok := r.b.Commits(group, r.topic)[0]
	if !ok {
		t.Fatal("no commit")
	}
	return c
}

// runToCommitted runs a member with cfg and do until everything is
// committed, then stops it.
func runToCommitted(t *testing.T, r *rig, cfg Config, do func(context.Context, []*Message) error) {
	t.Helper()
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestAttemptsSurviveHandoffWhenDue: a message whose retry has come due
// but has not run yet (the only worker is busy with another lane) is still
// in the commit metadata at its attempt, so member B goes on at attempt 2
// rather than 1. Such a retry is neither held nor finished; a commit that
// listed only held lanes left it out, and every handoff between attempts
// restarted the count (MaxAttempts then never ran out).
func TestAttemptsSurviveHandoffWhenDue(t *testing.T) {
	t.Parallel()     // mostly waits on the broker and the blocked call
	const target = 0 // k0 at offset 0; k1 at offset 1 blocks the only worker
	r := newRig(t, "handoff-due", 1, 2, 2)
	w := r.work(0, 0)
	var log attemptLog
	release := make(chan struct{})
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			switch {
			case m.Offset == target:
				log.add(m.Attempt)
				if m.Attempt == 1 {
					return errors.New("fails once")
				}
			case m.Offset == 1 && m.Attempt == 1:
				if err := untilReleased(ctx, release); err != nil { // holds the only worker past the retry's backoff
					return err
				}
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := oneWorkerQuickRetry(r, "handoff-due")
	cfg.DrainTimeout = 200 * time.Millisecond
	a := newGroup(t, cfg, do)
	stopA := run(t, a)
	waitFor(t, time.Minute, "A's commit to carry the due retry at attempt 2", func() bool {
		cs := r.b.Commits(cfg.GroupID, r.topic)
		if len(cs) == 0 {
			return false
		}
		d, err := commit.DecodeMeta(cs[0].Metadata)
		if err != nil {
			return false
		}
		w, ok := d.WaitingAt(target)
		return ok && w.Attempt == 2
	})
	// Listed for the metadata, but not held: PartitionStats.Held counts
	// messages waiting first in their lanes only.
	waitFor(t, 10*time.Second, "PartitionStats.Held 0 with the retry let go", func() bool {
		ps := a.Stats().PartitionStats
		return len(ps) == 1 && ps[0].Held == 0
	})
	if err := stopA(); err != nil { // the blocked call gives up on its ctx at the drain's end
		t.Fatal(err)
	}
	close(release)
	if seen, _ := log.get(); len(seen) != 1 {
		t.Fatalf("attempts under A: got %v, want [1] (its retry waited for the busy worker)", seen)
	}
	runToCommitted(t, r, cfg, do)
	if seen, _ := log.get(); !slices.Equal(seen, []int{1, 2}) {
		t.Fatalf("attempts seen: got %v, want [1 2] (B continues the count)", seen)
	}
}

// TestFinalCommitAfterDrainedRetry: a retry that came due is running
// (attempt 2) when the member shuts down; revoke lists the waiting
// messages before the drain, and the retry then succeeds in the drain and
// the frontier passes it. The final commit must not list it as waiting:
// the decoder rejects a finished message listed waiting, and with it the
// whole metadata (the finished set, every other waiting message).
func TestFinalCommitAfterDrainedRetry(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain
	const target = 0
	r := newRig(t, "drained-retry", 1, 2, 2)
	w := r.work(0, 0)
	started := make(chan struct{})
	release := make(chan struct{})
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target {
				if m.Attempt == 1 {
					return errors.New("fails once")
				}
				close(started)
				if err := untilReleased(ctx, release); err != nil {
					return err
				}
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := oneWorkerQuickRetry(r, "drained-retry")
	cfg.DrainTimeout = 5 * time.Second
	c := stopDuringCall(t, r, cfg, do, started, release)
	d, err := commit.DecodeMeta(c.Metadata)
	if err != nil && !errors.Is(err, commit.ErrNotOrderlyMetadata) {
		t.Fatalf("final commit (offset %d, metadata %q): %v", c.Offset, c.Metadata, err)
	}
	if c.Offset != 2 || len(d.Waiting) != 0 {
		t.Fatalf("final commit: got offset %d waiting %v, want offset 2 and nothing waiting", c.Offset, d.Waiting)
	}
}

// TestFailureInDrainCounts: an attempt that fails while its partition
// drains at shutdown is in the final commit at its next attempt, so the
// next owner goes on at attempt 2, not 1 again (repeated shutdowns in the
// middle of a failing call kept a record at attempt 1 for ever, past
// MaxAttempts).
func TestFailureInDrainCounts(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain
	const target = 0
	r := newRig(t, "drain-failure", 1, 2, 2)
	w := r.work(0, 0)
	var log attemptLog
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target {
				log.add(m.Attempt)
				if m.Attempt == 1 {
					started <- struct{}{}
					<-release // ignores ctx: fails after the drain began
					return errors.New("fails once")
				}
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := oneWorkerQuickRetry(r, "drain-failure")
	cfg.DrainTimeout = 5 * time.Second
	logger, logs := observedTee(t) // "partition released" is at info
	cfg.Logger = logger
	c := stopDuringCall(t, r, cfg, do, started, release)
	released := logs.FilterMessage("partition released").All()
	if len(released) != 1 || released[0].ContextMap()["abandoned"] != int64(1) || released[0].ContextMap()["dropped"] != int64(1) {
		t.Fatalf(`"partition released": got %v, want one with abandoned 1 (the failure in the drain) and dropped 1 (offset 1)`, released)
	}
	cfg.Logger = nil
	d, err := commit.DecodeMeta(c.Metadata)
	if err != nil {
		t.Fatalf("final commit (offset %d, metadata %q): %v", c.Offset, c.Metadata, err)
	}
	if wt, ok := d.WaitingAt(target); c.Offset != target || !ok || wt.Attempt != 2 {
		t.Fatalf("final commit: offset %d, waiting %v; want offset %d with it waiting at attempt 2", c.Offset, d.Waiting, target)
	}
	runToCommitted(t, r, cfg, do)
	if seen, _ := log.get(); !slices.Equal(seen, []int{1, 2}) {
		t.Fatalf("attempts seen: got %v, want [1 2]", seen)
	}
}

// TestDrainFinishesHandledBatchMates (invariant 5: a graceful handoff
// repeats nothing): a batch that fails in part (a BatchError naming one
// item) while its partition drains finishes its other items, so that the
// final commit passes them and the next owner runs only the failed one.
func TestDrainFinishesHandledBatchMates(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain

	const n, failing = 4, 1 // four keys, one batch; offset 1 fails
	r := newRig(t, "drain-mates", 1, n, n)
	var mu sync.Mutex
	var seen []int64 // offsets handed to Do, in order
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	do := func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		for i, m := range batch {
			mu.Lock()
			seen = append(seen, m.Offset)
			mu.Unlock()
			if m.Offset == failing && m.Attempt == 1 {
				failed.Fail(i, errors.New("fails once"))
			}
		}
		if failed.Len() > 0 {
			started <- struct{}{}
			<-release // ignores ctx: fails after the drain began
		}
		return failed.Err()
	}
	cfg := oneWorkerQuickRetry(r, "drain-mates")
	cfg.Size, cfg.Ticker = n, time.Minute // one batch of all four
	cfg.DrainTimeout = 5 * time.Second
	c := stopDuringCall(t, r, cfg, do, started, release)
	d, err := commit.DecodeMeta(c.Metadata)
	if err != nil {
		t.Fatalf("final commit (offset %d, metadata %q): %v", c.Offset, c.Metadata, err)
	}
	if c.Offset != failing || !slices.Equal(d.Ranges, []commit.Range{{Start: failing + 1, End: n}}) {
		t.Fatalf("final commit: offset %d, finished %v; want offset %d with [%d, %d) finished", c.Offset, d.Ranges, failing, failing+1, n)
	}
	mu.Lock()
	seen = nil
	mu.Unlock()
	cfg.Ticker = 10 * time.Millisecond // the failed one runs alone
	runToCommitted(t, r, cfg, do)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int64{failing}) {
		t.Fatalf("offsets the next owner handed to Do: got %v, want [%d] (the failed one only)", seen, failing)
	}
}

// TestNamedLaneMatesSurviveHandoff: Do names two messages of one key in a
// batch as failed; both are charged an attempt, the later one waiting
// behind the earlier. The final commit lists both at attempt 2, so the
// next owner goes on at 2 for each rather than at 1 for the later one
// (MaxAttempts could otherwise be exceeded across restarts).
func TestNamedLaneMatesSurviveHandoff(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the backoff

	const n = 3 // one key: offsets 0 and 1 fail once, 2 follows them
	r := newRig(t, "named-mates", 1, n, 1)
	var mu sync.Mutex
	seen := map[int64][]int{} // attempts Do saw, per offset
	do := func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		mu.Lock()
		defer mu.Unlock()
		for i, m := range batch {
			seen[m.Offset] = append(seen[m.Offset], m.Attempt)
			if m.Offset < 2 && m.Attempt == 1 {
				failed.Fail(i, errors.New("fails once"))
			}
		}
		return failed.Err()
	}
	cfg := r.config("named-mates")
	cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Minute // one batch of all three
	cfg.Retry = Retry{Backoff: time.Second, MaxBackoff: time.Second, Jitter: -1}
	a := newGroup(t, cfg, do)
	stopA := run(t, a)
	waitFor(t, time.Minute, "the batch to fail", func() bool { return a.Stats().Retrying >= 1 })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	c := r.b.Commits(cfg.GroupID, r.topic)[0]
	d, err := commit.DecodeMeta(c.Metadata)
	if err != nil {
		t.Fatalf("final commit (offset %d, metadata %q): %v", c.Offset, c.Metadata, err)
	}
	for _, off := range []int64{0, 1} {
		if w, ok := d.WaitingAt(off); !ok || w.Attempt != 2 {
			t.Fatalf("final commit: offset %d, waiting %v; want offsets 0 and 1 waiting at attempt 2", c.Offset, d.Waiting)
		}
	}
	mu.Lock()
	clear(seen)
	mu.Unlock()
	cfg.Ticker = 10 * time.Millisecond
	runToCommitted(t, r, cfg, do)
	mu.Lock()
	defer mu.Unlock()
	for off, want := range map[int64][]int{0: {2}, 1: {2}, 2: {1}} {
		if !slices.Equal(seen[off], want) {
			t.Fatalf("attempts of offset %d under the next owner: got %v, want %v", off, seen[off], want)
		}
	}
}

// TestDrainDeadLettersRejection (invariant 5): a message Do rejects
// (BatchError.DeadLetter) while its partition drains is dead-lettered in
// the drain, and the final commit passes it: the next owner neither runs
// it again nor writes a second dead letter.
func TestDrainDeadLettersRejection(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain

	const target = 0 // k0 at offset 0; k1 at offset 1 waits for the only worker
	r := newRig(t, "drain-reject", 1, 2, 2)
	if err := r.b.CreateTopic("dlq", 1); err != nil {
		t.Fatal(err)
	}
	w := r.work(0, 0)
	var log attemptLog
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	do := func(ctx context.Context, batch []*Message) error {
		for i, m := range batch {
			if m.Offset == target {
				log.add(m.Attempt)
				started <- struct{}{}
				<-release // ignores ctx: rejects after the drain began
				var rejected BatchError
				rejected.DeadLetter(i, errors.New("rejected by the test"))
				return rejected.Err()
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := oneWorkerQuickRetry(r, "drain-reject")
	cfg.DeadLetterTopic = "dlq"
	cfg.DrainTimeout = 5 * time.Second
	c := stopDuringCall(t, r, cfg, do, started, release)
	if c.Offset != target+1 {
		t.Fatalf("final commit: got offset %d, want %d (past the message dead-lettered in the drain)", c.Offset, target+1)
	}
	runToCommitted(t, r, cfg, do)
	if seen, _ := log.get(); !slices.Equal(seen, []int{1}) {
		t.Fatalf("attempts of offset %d seen by Do: got %v, want [1]", target, seen)
	}
	if got := len(readDeadLetters(t, r.b.Addrs(), "dlq")); got != 1 {
		t.Fatalf("dead letters: got %d, want 1", got)
	}
}

// TestResumedPastMaxAttempts: a message the previous owner's commit lists
// waiting at attempt 3 with MaxAttempts 2 (its last allowed attempt
// failed, and its dead letter did not make it into a commit) is
// dead-lettered at once, not run a third time.
func TestResumedPastMaxAttempts(t *testing.T) {
	t.Parallel() // waits on the broker
	const n, target = 5, 0
	r := newRig(t, "past-max", 1, n, n)
	if err := r.b.CreateTopic("dlq", 1); err != nil {
		t.Fatal(err)
	}
	meta, _, _ := commit.EncodeWaitingMeta(target, []commit.Waiting{{Offset: target, Attempt: 3}}, nil, 4096)
	seedCommit(t, r, "past-max", target, meta)
	cfg := oneWorkerQuickRetry(r, "past-max")
	cfg.Retry.MaxAttempts, cfg.DeadLetterTopic = 2, "dlq"
	var ran atomic.Int64
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target {
				ran.Add(1)
			}
		}
		return nil
	})
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got, st := ran.Load(), g.Stats(); got != 0 || st.DeadLettered.MaxAttempts != 1 || st.Handled != n-1 {
		t.Fatalf("offset %d ran %d times, dead-lettered %d (max_attempts), handled %d; want 0, 1 and %d", target, got, st.DeadLettered.MaxAttempts, st.Handled, n-1)
	}
}

// TestHungCall: a Do that ignores its ctx past MsgTimeout plus grace. With
// Unordered its message is handed to another worker at its next attempt,
// done once, and the late completion is ignored: the commit reaches the
// high watermark while the hung call still runs. With OrderLanes the stuck
// worker is reported and the other lanes flow; the hung lane waits.
func TestHungCall(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	for _, ordering := range []Ordering{Unordered, OrderLanes} {
		t.Run(ordering.String(), func(t *testing.T) {
			const n, keys, target = 400, 20, 7
			r := newRig(t, "hung", 1, n, keys)
			w := r.work(0, 0)
			release := make(chan struct{})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			var log attemptLog
			cfg := r.config("hung-" + ordering.String())
			cfg.Size, cfg.Num, cfg.Ordering, cfg.MsgTimeout = 1, 4, ordering, 200*time.Millisecond
			var logs *observer.ObservedLogs
			cfg.Logger, logs = observed()
			g := newGroup(t, cfg, hangOnFirstAttempt(target, release, &log, w.Do))
			stop := run(t, g)
			waitFor(t, time.Minute, "the stuck worker's log line", func() bool {
				return logs.FilterMessage("worker stuck: Do ran past MsgTimeout and ignored its ctx").Len() > 0
			})
			if !logged(logs, "worker stuck: Do ran past MsgTimeout and ignored its ctx",
				map[string]any{"topic": r.topic, "partition": int32(0), "offset": int64(target), "attempt": int64(1)}) {
				t.Fatalf("stuck worker logged as %v: want topic %q partition 0 offset %d attempt 1",
					logs.FilterMessage("worker stuck: Do ran past MsgTimeout and ignored its ctx").All()[0].ContextMap(), r.topic, target)
			}
			if ordering == Unordered {
				r.waitAllCommitted(cfg.GroupID, time.Minute)
				st := g.Stats()
				if st.Redelivered != 1 || st.Stuck != 1 || st.StuckWorkers != 1 {
					t.Fatalf("Stats: Redelivered %d Stuck %d StuckWorkers %d, want 1 1 1", st.Redelivered, st.Stuck, st.StuckWorkers)
				}
				if seen, _ := log.get(); len(seen) != 2 || seen[1] != 2 {
					t.Fatalf("attempts of the hung message: got %v, want [1 2]", seen)
				}
				close(release) // the late completion
				time.Sleep(100 * time.Millisecond)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				r.checkOrder(false, false) // done once; no order to keep
				return
			}
			waitFor(t, time.Minute, "the stuck worker to be reported", func() bool { return g.Stats().StuckWorkers == 1 })
			waitFor(t, time.Minute, "every message but the hung lane's to finish", func() bool {
				return g.Stats().Handled >= int64(n-n/keys)
			})
			if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c > target {
				t.Fatalf("committed %d past the hung message at %d", c, target)
			}
			close(release)
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			r.check(false)
		})
	}
}

// copyDir copies the regular files of src into a new temp dir, as a crash
// would leave them, and returns it.
// hangOnFirstAttempt is a Do for Size 1: it logs each attempt of the
// message at offset target and blocks the first until release is closed,
// ignoring its ctx (a hung call); every other call is do's.
func hangOnFirstAttempt(target int64, release <-chan struct{}, log *attemptLog, do func(context.Context, []*Message) error) func(context.Context, []*Message) error {
	return func(ctx context.Context, batch []*Message) error {
		if batch[0].Offset == target {
			log.add(batch[0].Attempt)
			if batch[0].Attempt == 1 {
				<-release
				return nil
			}
		}
		return do(ctx, batch)
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// parkedIn opens a copy of dataPath's parked queue and reports how many
// messages it holds, deferred or ready.
func parkedIn(t *testing.T, dataPath string) int {
	t.Helper()
	q, err := localqueue.Open(localqueue.Options{Name: "orderly-parked", DataPath: copyDir(t, dataPath), MaxReqTimeout: maxDelay, MaxMsgSize: 64 << 20})
	if err != nil {
		t.Fatalf("open a copy of the parked queue: %v", err)
	}
	defer q.Close()
	st := q.Stats()
	return int(st.Depth) + st.Deferred
}

// TestUnorderedParking: with Unordered and a DataPath, a message deferred
// by a few seconds is parked: every OffsetCommit the broker sees that
// passes its offset comes after it is on disk (a copy of DataPath taken
// then holds it), the group goes on without it, and after a graceful stop
// and a restart on the same DataPath it is handled once its time has come,
// counted in its partition's Outcomes by the run that handled it.
func TestUnorderedParking(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys, target = 500, 20, 30
	r := newRig(t, "parking", 1, n, keys)
	dataPath := t.TempDir()
	var mu sync.Mutex
	var passedUnparked []int64
	commitsPast := 0
	r.b.ObserveCommits(func(req *kmsg.OffsetCommitRequest) {
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				if tp.Topic != r.topic || p.Offset <= target {
					continue
				}
				mu.Lock()
				first := commitsPast == 0
				commitsPast++
				mu.Unlock()
				if first && parkedIn(t, filepath.Join(dataPath)) == 0 {
					mu.Lock()
					passedUnparked = append(passedUnparked, p.Offset)
					mu.Unlock()
				}
			}
		}
	})
	w := r.work(0, 0)
	var log attemptLog
	deferBy := 5 * time.Second
	var deferredAt atomic.Int64
	do := func(ctx context.Context, batch []*Message) error {
		var be BatchError
		var ok []*Message
		for i, m := range batch {
			if m.Offset == target {
				log.add(m.Attempt)
				if deferredAt.Load() == 0 {
					deferredAt.Store(time.Now().UnixNano())
					r.markSettled(m.Partition, m.Offset)
					be.Defer(i, deferBy)
					continue
				}
			}
			ok = append(ok, m)
		}
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return be.Err()
	}
	cfg := r.config("parking")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 8, 4, Unordered, dataPath
	a := newGroup(t, cfg, do)
	stopA := run(t, a)
	waitFor(t, time.Minute, "every message but the parked one committed", func() bool {
		return r.b.Committed(cfg.GroupID, r.topic)[0] == int64(n) && a.Stats().Parked == 1
	})
	if err := stopA(); err != nil { // before the parked message is due
		t.Fatal(err)
	}
	if seen, _ := log.get(); len(seen) != 1 {
		t.Fatalf("deliveries of the parked message before the restart: %v, want one", seen)
	}
	mu.Lock()
	if commitsPast == 0 || len(passedUnparked) > 0 {
		mu.Unlock()
		t.Fatalf("commits past the parked offset: %d, of which before it was on disk: %v", commitsPast, passedUnparked)
	}
	mu.Unlock()
	b := newGroup(t, cfg, do)
	stopB := run(t, b)
	waitFor(t, time.Minute, "the parked message to be handled after the restart", func() bool {
		seen, _ := log.get()
		// Redelivery from the parked queue may come before the claim is
		// listed in PartitionStats: wait for both.
		return len(seen) == 2 && b.Stats().Parked == 0 && len(b.Stats().PartitionStats) == 1
	})
	// The restart's claim starts past every offset: the one record it
	// handled came from the parked queue, and counts in the partition.
	if ps := b.Stats().PartitionStats; len(ps) != 1 || ps[0].Outcomes != (Outcomes{Handled: 1}) {
		t.Errorf("partition outcomes after the restart: got %+v, want one partition with Handled 1", ps)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	_, times := log.get()
	if due := time.Unix(0, deferredAt.Load()).Add(deferBy); times[1].Before(due.Add(-100 * time.Millisecond)) {
		t.Fatalf("parked message handled at %v, before it was due at %v", times[1], due)
	}
	r.checkOrder(false, false)
}

// TestOutage: every call fails for a few seconds (the dependency behind
// Do is down). The group backs off as a whole: an outage is counted, fetching
// stops growing, no message runs out of attempts (MaxAttempts 3: none is
// dead-lettered), and everything is handled once the dependency is back.
func TestOutage(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys = 6000, 200
	r := newRig(t, "outage", 2, n, keys)
	w := r.work(0, 0)
	var down atomic.Bool
	down.Store(true)
	cfg := r.config("outage")
	cfg.Size, cfg.Num, cfg.MaxInFlight = 16, 8, 1000
	cfg.DataPath = t.TempDir()
	cfg.Retry = Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAttempts: 3}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		if down.Load() {
			return errors.New("database unreachable")
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "the outage to be noticed", func() bool { return g.Stats().Outage })
	waitFor(t, time.Minute, "both partitions to pause their fetching", func() bool {
		p0, p1 := claimOf(g, r.topic, 0), claimOf(g, r.topic, 1)
		return p0 != nil && p1 != nil && p0.fetchPaused.Load() && p1.fetchPaused.Load()
	})
	time.Sleep(2 * time.Second)
	st := g.Stats()
	if st.InFlight > int64(cfg.MaxInFlight)+2 || st.Handled != 0 || !st.Outage {
		t.Fatalf("during the outage: in flight %d, handled %d, outage %v; want at most MaxInFlight %d, nothing handled, on", st.InFlight, st.Handled, st.Outage, cfg.MaxInFlight)
	}
	fetched := st.Fetched
	down.Store(false)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
	st = g.Stats()
	if st.Outages < 1 || st.Outage || st.DeadLettered != (DeadLetterCounts{}) {
		t.Fatalf("Stats: Outages %d, Outage %v, DeadLettered %+v; want at least 1 outage, over, none dead-lettered", st.Outages, st.Outage, st.DeadLettered)
	}
	t.Logf("outage: %d failed calls, %d retries charged, fetched %d while it lasted", st.Failures, st.Retries, fetched)
}
