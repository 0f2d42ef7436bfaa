package group

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/tmpfs"
	"github.com/orderly-go/orderly/merge"
)

// TestRetryInPartialBatchAbandonedAtStop: a message that failed once has
// its retry taken into the partial batch (Size 5, Ticker a minute) when
// the group stops: it is counted Abandoned (left waiting for a retry),
// not Dropped (never failed), and every fetched message is counted once,
// as Handled, Dropped or Abandoned. The final commit lists it at attempt
// 2: the next owner runs it there.
func TestRetryInPartialBatchAbandonedAtStop(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	const n, failing = 5, 2
	r := newRig(t, "retry-partial", 1, n, n)
	w := r.work(0, 0)
	var attempts attemptLog
	do := func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		for i, m := range batch {
			if m.Offset == failing {
				attempts.add(m.Attempt)
				if m.Attempt == 1 {
					failed.Fail(i, errors.New("fails once"))
				}
			}
		}
		if failed.Len() > 0 {
			return failed.Err()
		}
		return w.Do(ctx, batch)
	}
	cfg := oneWorkerQuickRetry(r, "retry-partial")
	cfg.Size, cfg.Ticker = n, time.Minute // one batch of all five, then the retry waits alone
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	waitFor(t, time.Minute, "the others handled and the retry let go after its backoff", func() bool {
		st := g.Stats()
		return st.Handled == n-1 && st.Retries == 1 && st.Retrying == 0
	})
	time.Sleep(100 * time.Millisecond) // the idle worker takes the retry into its partial batch
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if st.Fetched != n || st.Handled != n-1 || st.Dropped != 0 || st.Abandoned != 1 {
		t.Errorf("got Fetched %d, Handled %d, Dropped %d, Abandoned %d; want %d, %d, 0 and 1 (offset %d waited for its retry)",
			st.Fetched, st.Handled, st.Dropped, st.Abandoned, n, n-1, failing)
	}
	if seen, _ := attempts.get(); len(seen) != 1 {
		t.Fatalf("attempts of offset %d: got %v, want [1] (the retry did not run before the stop)", failing, seen)
	}
	cfg.Ticker = 10 * time.Millisecond // the retry runs alone
	runToCommitted(t, r, cfg, do)
	if seen, _ := attempts.get(); len(seen) != 2 || seen[1] != 2 {
		t.Errorf("attempts of offset %d: got %v, want [1 2] (the next owner goes on at 2)", failing, seen)
	}
}

// TestLateDeadLetterCountsInPartitionOutcomes: a dead letter written
// after its claim let go of the message (the store's disk was full past
// DrainTimeout, so the drain gave up on it) counts in Stats.DeadLettered
// and in the Outcomes of its partition, shown once this member claims the
// partition again: the two agree. The message counts as Abandoned too:
// the final commit did not pass it.
func TestLateDeadLetterCountsInPartitionOutcomes(t *testing.T) {
	t.Parallel() // mostly waits on the drain
	const n, target = 3, 1
	dataPath := tmpfs.Mount(t, 4<<20)
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Size: 1, Num: 1,
		DataPath: dataPath, DrainTimeout: 200 * time.Millisecond,
		Retry: Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Jitter: -1}}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		var be BatchError
		for i, m := range batch {
			if m.Offset == target {
				be.DeadLetter(i, errors.New("rejected by the test"))
			}
		}
		return be.Err()
	})
	if err := g.fail.open(nil); err != nil { // the local dead-letter store, as Run opens it
		t.Fatal(err)
	}
	stop := startWorkers(t, g)
	defer stop()
	ballast := tmpfs.Fill(t, dataPath, 0) // the store is open: its writes now fail
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := func() (chan *sarama.ConsumerMessage, <-chan struct{}) { return startMemClaim(g, sess, n) }

	msgs, ended := claim()
	value := make([]byte, 64<<10) // a dead letter needs pages of its own on the full disk
	for off := range int64(n) {
		msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: fmt.Appendf(nil, "k%d", off), Value: value}
	}
	waitFor(t, time.Minute, "the dead letter's write to fail and the others to be handled", func() bool {
		st := g.Stats()
		return st.DeadLetterErrors >= 1 && st.Handled == n-1
	})
	close(msgs) // revoked: the drain gives up on the dead letter after DrainTimeout
	<-ended
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the dead letter to be written", func() bool { return g.Stats().DeadLettered.Rejected == 1 })

	msgs, ended = claim()
	defer func() {
		close(msgs)
		<-ended
	}()
	waitFor(t, time.Minute, "the partition to be claimed again", func() bool { return len(g.Stats().PartitionStats) == 1 })
	st := g.Stats()
	if o := st.PartitionStats[0].Outcomes; o.DeadLettered != st.DeadLettered.Rejected || o.Handled != n-1 || st.Abandoned != 1 {
		t.Errorf("got Outcomes.DeadLettered %d, Stats.DeadLettered %d, Outcomes.Handled %d, Stats.Abandoned %d; want 1, 1, %d and 1",
			o.DeadLettered, st.DeadLettered.Rejected, o.Handled, st.Abandoned, n-1)
	}
}

// TestParkedAtStopCountsByAttempt: at a stop, the parked messages taken
// from the queue and not yet run (one worker, hung on a third parked
// message's call) are counted by their attempt, as a revoke counts a
// claim's: the one that was only deferred (attempt 1) as Dropped, the one
// that had failed (attempt 2) as Abandoned, beside the hung call's, late.
// All three stay parked for the next run.
func TestParkedAtStopCountsByAttempt(t *testing.T) {
	t.Parallel() // mostly waits on the broker, the backoff and the drain
	const n, deferred, failed, hung = 10, 3, 5, 7
	r := newRig(t, "parked-stop-counts", 1, n, n)
	w := r.work(0, 0)
	cfg := r.config("parked-stop-counts")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath, cfg.DrainTimeout = 1, 1, Unordered, t.TempDir(), 200*time.Millisecond
	cfg.Retry = Retry{Backoff: 300 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Jitter: -1}
	var calls [n]atomic.Int64 // by offset
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		m := batch[0]
		var be BatchError
		switch call := calls[m.Offset].Add(1); {
		case m.Offset == hung && call == 1:
			be.Defer(0, 10*time.Millisecond) // parked, back before the others
		case m.Offset == hung: // redelivered: holds the only worker
			<-ctx.Done()
			return ctx.Err()
		case m.Offset == deferred && call == 1:
			be.Defer(0, 300*time.Millisecond)
		case m.Offset == failed && call == 1:
			be.Fail(0, errors.New("fails once"))
		default:
			return w.Do(ctx, batch)
		}
		r.markSettled(m.Partition, m.Offset)
		return be.Err()
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "the hung call to run and the two other parked messages to be taken from the queue", func() bool {
		p := g.fail.parkView.Load()
		return calls[hung].Load() == 2 && p != nil && p.side.InFlight() == 3 && g.Stats().Handled == n-3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.Dropped != 1 || st.Abandoned != 2 || st.Parked != 3 {
		t.Errorf("got Dropped %d, Abandoned %d, Parked %d; want 1 (offset %d, deferred), 2 (offset %d, failed once; offset %d, late) and 3",
			st.Dropped, st.Abandoned, st.Parked, deferred, failed, hung)
	}
}

// TestLateSkipCountsInPartitionOutcomes: with no dead-letter destination,
// a message to dead-letter whose hold the hook settles only once its
// partition's owner has sealed the partition (its drain gave up on the
// call) is skipped by the hook, and counted Skipped under its partition
// (Group.past), as a late dead letter counts DeadLettered there:
// Stats.DeadLetterSkipped and the partition's Outcomes agree.
func TestLateSkipCountsInPartitionOutcomes(t *testing.T) {
	t.Parallel()
	g := offlineGroup(t, func(c *Config) { c.Size, c.Num = 1, 1 })
	p := g.sched.NewPartition(4)
	it := p.Alloc()
	it.Msg = Message{Topic: "t", Partition: 3, Offset: 0}
	if err := p.Add(it, 0, 1); err != nil {
		t.Fatal(err)
	}
	p.Flush()
	b := g.sched.NewBatch(g.sched.NewWorker())
	if st := g.sched.Next(b, true, nil); st != dispatch.Run || len(b.Items) != 1 {
		t.Fatalf("Next: got %v with %d items, want Run with 1", st, len(b.Items))
	}
	// The drain gives up on the call while it runs.
	p.Revoke()
	p.Drain()
	p.Seal()
	p.Advance()
	// The call returns a dead-letter verdict: Settle holds the item and
	// the hook, finding no destination, skips it.
	g.sched.Settle(b, []dispatch.Outcome{{Verdict: dispatch.Hold, Kind: merge.DeadLettered, Err: errors.New("rejected by the test")}})
	g.claimsMu.Lock()
	o := g.past[topicPartition{"t", 3}]
	g.claimsMu.Unlock()
	if st := g.Stats(); st.DeadLetterSkipped != 1 || o.Skipped != 1 || o.Handled != 0 {
		t.Errorf("got Stats.DeadLetterSkipped %d, Outcomes.Skipped %d, Outcomes.Handled %d of t/3; want 1, 1 and 0", st.DeadLetterSkipped, o.Skipped, o.Handled)
	}
}

// TestLateParkCountsInPartitionOutcomes: a park written after its claim
// let go of the message (the parked queue's disk was full past
// DrainTimeout, so the drain gave up on it) counts Parked in the Outcomes
// of its partition, shown once this member claims the partition again,
// as a late dead letter counts DeadLettered there. The message counts as
// Abandoned too: the final commit did not pass it.
func TestLateParkCountsInPartitionOutcomes(t *testing.T) {
	t.Parallel() // mostly waits on the drain
	const n, target = 3, 1
	dataPath := tmpfs.Mount(t, 4<<20)
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Size: 1, Num: 1,
		Ordering: Unordered, DataPath: dataPath, DrainTimeout: 200 * time.Millisecond,
		Retry: Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Jitter: -1}}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		var be BatchError
		for i, m := range batch {
			if m.Offset == target {
				be.Defer(i, time.Hour) // parked, and not due in this test
			}
		}
		return be.Err()
	})
	if err := g.fail.open(nil); err != nil { // the parked queue, as Run opens it
		t.Fatal(err)
	}
	stop := startWorkers(t, g)
	defer stop()
	ballast := tmpfs.Fill(t, dataPath, 0) // the queue is open: its writes now fail
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := func() (chan *sarama.ConsumerMessage, <-chan struct{}) { return startMemClaim(g, sess, n) }

	msgs, ended := claim()
	value := make([]byte, 64<<10) // a park needs pages of its own on the full disk
	for off := range int64(n) {
		msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: fmt.Appendf(nil, "k%d", off), Value: value}
	}
	waitFor(t, time.Minute, "the park's write to fail and the others to be handled", func() bool {
		st := g.Stats()
		return st.ParkErrors >= 1 && st.Handled == n-1
	})
	close(msgs) // revoked: the drain gives up on the park after DrainTimeout
	<-ended
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the park to be written", func() bool { return g.Stats().Parked == 1 })

	msgs, ended = claim()
	defer func() {
		close(msgs)
		<-ended
	}()
	waitFor(t, time.Minute, "the partition to be claimed again", func() bool { return len(g.Stats().PartitionStats) == 1 })
	// The park is counted once its item is let go, just after it is
	// written: give that a moment.
	var st Stats
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st = g.Stats(); st.PartitionStats[0].Outcomes.Parked == 1 || time.Now().After(deadline) {
			break
		}
	}
	if o := st.PartitionStats[0].Outcomes; o.Parked != 1 || o.Handled != n-1 || st.Abandoned != 1 {
		t.Errorf("got Outcomes.Parked %d, Outcomes.Handled %d, Stats.Abandoned %d; want 1, %d and 1", o.Parked, o.Handled, st.Abandoned, n-1)
	}
}

// startMemClaim runs a claim loop of g on partition 0 of sess, fed by the
// returned channel (buffered for n messages); ended is closed when the
// loop returns (close the channel: a revoke).
func startMemClaim[T any](g *Group[T], sess *memSession, n int) (msgs chan *sarama.ConsumerMessage, ended <-chan struct{}) {
	msgs, done := make(chan *sarama.ConsumerMessage, n), make(chan struct{})
	go func() {
		defer close(done)
		_ = g.consume(sess, &memClaim{p: 0, msgs: msgs})
	}()
	return msgs, done
}

// TestCancelledDeferralNotLoggedAsDeferred: a call that returns only
// deferrals after the drain gave up on it (its ctx cancelled with
// ErrRevoked) counts as a cancelled failure, and its items are not
// deferred: it is not logged as "Do deferred items; they run again when
// due", which it was.
func TestCancelledDeferralNotLoggedAsDeferred(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	started := make(chan struct{}, 1)
	g := newGroup(t, Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Num: 1, Size: 1,
		Ticker: -1, DrainTimeout: 100 * time.Millisecond, Logger: zap.New(core)},
		func(ctx context.Context, batch []*Message) error {
			started <- struct{}{}
			<-ctx.Done()
			var be BatchError
			be.Defer(0, time.Millisecond)
			return be.Err()
		})
	stop := startWorkers(t, g)
	defer stop()
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	msgs, ended := startMemClaim(g, sess, 1)
	msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: 0, Key: []byte("k")}
	<-started
	close(msgs) // the revoke: the drain gives up after DrainTimeout
	<-ended
	waitFor(t, 10*time.Second, "the cancelled call to be counted", func() bool { return g.Stats().Cancelled == 1 })
	st := g.Stats()
	if n := logs.FilterMessage("Do deferred items; they run again when due").Len(); n != 0 || st.DeferredCalls != 0 {
		t.Fatalf("got %d \"Do deferred items\" lines, DeferredCalls %d; want 0 and 0 (Cancelled %d, Failures %d)", n, st.DeferredCalls, st.Cancelled, st.Failures)
	}
}
