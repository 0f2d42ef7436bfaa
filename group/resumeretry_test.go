package group

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Reading the commit metadata at a claim's start (resume.go). In each
// test member A finishes everything but one lane and leaves (oneLaneHeld);
// then the broker refuses member B's claim reads of the metadata.

// TestResumeReadRetried: B's claim reads the metadata again after its
// read is refused once (Sarama.Metadata.Retry), rather than handle again
// what A finished: B skips it and handles the held lane only, each message
// once; its "claim started" line says how many finished offsets the
// metadata listed.
func TestResumeReadRetried(t *testing.T) {
	t.Parallel() // mostly waits on the broker and a retry's backoff
	const n, keys, target = heldN, heldKeys, heldTarget
	r, cfg, do, failing := heldLaneRig(t, "resume-retry", time.Second)
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	cfg.Sarama.Metadata.Retry.Max, cfg.Sarama.Metadata.Retry.Backoff = 1, 50*time.Millisecond
	r.oneLaneHeld(cfg, do)

	refused := refuseClaimReads(r, func(n int32) bool { return n == 1 })
	failing.Store(false)
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Logger = zap.New(core)
	b := newGroup(t, cfg, do)
	r.runToEnd(b, cfg.GroupID)
	if got := refused.Load(); got != 1 {
		t.Fatalf("claim reads refused: got %d, want 1", got)
	}
	if got := logs.FilterMessage("reading commit metadata failed; retrying").Len(); got != 1 {
		t.Errorf("retries logged: got %d, want 1", got)
	}
	st := b.Stats()
	resumed := int64(n - n/keys - target) // what A finished above its commit
	if got, want := st.Handled, int64(n/keys); got != want || st.Resumed != resumed {
		t.Errorf("B: got Handled %d, Resumed %d; want %d (the held lane) and %d (what A finished above offset %d)", got, st.Resumed, want, resumed, target)
	}
	started := logs.FilterMessage("claim started").All()
	if len(started) != 1 || started[0].ContextMap()["finished_above"] != resumed {
		t.Errorf("B's \"claim started\" lines: got %v, want one with finished_above %d", started, resumed)
	}
	r.check(false)
}

// TestResumeReadFailedKeepsMetadata: when every read fails, B's claim
// handles again what A finished (it cannot know), but while its frontier
// stays at A's commit (the held lane still fails) it leaves A's metadata
// on the broker as it is, final commit included: B, with a small in-flight
// share, has seen only the start of the partition, and its own view would
// drop the rest of A's finished set. Committing nothing, the partition is
// STOP. B gives up on the read at once: a 6 s backoff would start past
// half of the 10 s rebalance timeout. Member C then handles the held lane
// only.
func TestResumeReadFailedKeepsMetadata(t *testing.T) {
	t.Parallel() // mostly waits on the broker and a retry's backoff
	const n, keys, target = heldN, heldKeys, heldTarget
	r, cfg, do, failing := heldLaneRig(t, "resume-unread", 50*time.Millisecond)
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	byA := r.oneLaneHeld(cfg, do)

	var refusing atomic.Bool
	refusing.Store(true)
	refused := refuseClaimReads(r, func(int32) bool { return refusing.Load() })
	cfgB := cfg
	cfgB.MaxInFlight, cfgB.Chan = 8, 1
	cfgB.Sarama.Metadata.Retry.Max, cfgB.Sarama.Metadata.Retry.Backoff = 5, 6*time.Second
	if rt := cfgB.Sarama.Consumer.Group.Rebalance.Timeout; rt != 10*time.Second {
		t.Fatalf("the rig's rebalance timeout: got %v, want 10s (the test's budget)", rt)
	}
	b := newGroup(t, cfgB, do)
	stopB := run(t, b)
	waitFor(t, 20*time.Second, "B to give up on the read, fail the held message again and handle others", func() bool {
		st := b.Stats()
		return st.Failures >= 2 && st.Handled > 0
	})
	waitStatus(t, b, 0, StatusStop, 30*time.Second)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if refused.Load() == 0 {
		t.Fatal("no claim read refused")
	}
	if got := r.b.Commits(cfg.GroupID, r.topic)[0]; got.Offset != byA.Offset || got.Metadata != byA.Metadata {
		t.Errorf("the commit after B: got offset %d metadata %q, want A's: offset %d metadata %q", got.Offset, got.Metadata, byA.Offset, byA.Metadata)
	}

	failing.Store(false)
	refusing.Store(false)
	c := newGroup(t, cfg, do)
	r.runToEnd(c, cfg.GroupID)
	if got, want := c.Stats().Handled, int64(n/keys); got != want {
		t.Errorf("C handled %d messages; want %d (the held lane only)", got, want)
	}
	r.check(true) // B handled again what A finished, as far as it read
}

// TestResumeReadAgain: B's claim gives up on its read of the metadata
// when it starts, and takes messages (its small in-flight share fills
// with the held lane); once the broker answers again, a commit tick reads
// the metadata after all, and from then on B skips what A finished above
// the messages it had taken. B handles the held lane and, again, only
// what A finished among the messages it took before the read.
func TestResumeReadAgain(t *testing.T) {
	t.Parallel() // mostly waits on the broker and a retry's backoff
	const n, target = heldN, heldTarget
	r, cfg, do, failing := heldLaneRig(t, "resume-again", 50*time.Millisecond)
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	r.oneLaneHeld(cfg, do)

	var refusing atomic.Bool
	refusing.Store(true)
	refuseClaimReads(r, func(int32) bool { return refusing.Load() })
	b, stopB, logs := startUnreadMember(t, cfg, do, 0)
	refusing.Store(false)
	readLog := "commit metadata read at last: skipping what the previous owner finished above the messages taken"
	waitFor(t, 20*time.Second, "a commit tick to read the metadata", func() bool { return logs.FilterMessage(readLog).Len() == 1 })
	read := logs.FilterMessage(readLog).All()[0].ContextMap()
	failing.Store(false)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	seen, ahead := read["seen"].(int64), read["finished_above"].(int64)
	st := b.Stats()
	if ahead == 0 || st.Resumed != ahead || st.Handled+st.Resumed != n-target {
		t.Errorf("B: got Handled %d, Resumed %d, %d finished by A above offset %d when read; want Resumed > 0 and equal to it, and Handled + Resumed = %d",
			st.Handled, st.Resumed, ahead, seen, n-target)
	}
	if heldLane := int64(n / heldKeys); st.Handled < heldLane || st.Handled > heldLane+seen-target+1 {
		t.Errorf("B handled %d; want the held lane (%d) and at most the %d others it had taken when it read the metadata", st.Handled, heldLane, seen-target+1)
	}
	t.Logf("B read the metadata at offset %d taken: handled %d, skipped %d", seen, st.Handled, st.Resumed)
	r.check(true) // B handled again what A finished among what it took before the read
}

// TestResumeReadAgainUnanswered: the commit tick's read of the metadata
// runs beside the claim loop. Here the broker never answers it (the
// coordinator's connection, shared with the fetches, is held until
// Net.ReadTimeout); meanwhile B's claim goes on handling the messages it
// has already fetched once the held lane is let go, rather than wait the
// 10 s the read takes to fail.
func TestResumeReadAgainUnanswered(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	const n, target = heldN, heldTarget
	r, cfg, do, failing := heldLaneRig(t, "resume-unanswered", 50*time.Millisecond)
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	r.oneLaneHeld(cfg, do)

	var refusing, holding atomic.Bool
	refusing.Store(true)
	refuseClaimReads(r, func(int32) bool { return refusing.Load() })
	held := holdClaimRead(r, holding.Load)
	b, stopB, logs := startUnreadMember(t, cfg, do, 10*time.Second)
	holding.Store(true)
	refusing.Store(false)
	waitFor(t, 10*time.Second, "a commit tick's read to be held", func() bool { return held.Load() == 1 })
	failing.Store(false)
	released := time.Now()
	waitFor(t, 20*time.Second, "B to handle every message from A's commit on", func() bool { return b.Stats().Handled >= n-target })
	if took := time.Since(released); took > 5*time.Second {
		t.Errorf("B handled the partition %v after the held lane was let go; want well within the 10s the unanswered read takes", took.Round(time.Millisecond))
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if got := logs.FilterMessage("commit metadata read at last: skipping what the previous owner finished above the messages taken").Len(); got != 0 {
		t.Errorf("metadata reads that succeeded: got %d, want 0 (the broker never answered)", got)
	}
	r.check(true) // B handled again what A finished
}

// TestResumeReadWaitEndsOnStop: B's claim, waiting a minute to read the
// metadata again, lets go as soon as B stops: Run returns well within the
// wait, B takes no message, A's commit stays on the broker as it was, and
// the partition counts as revoked (OnRevoked), not lost.
func TestResumeReadWaitEndsOnStop(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	r, cfg, do, _ := heldLaneRig(t, "resume-stop", time.Second)
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	byA := r.oneLaneHeld(cfg, do)

	if byA.Metadata == "" {
		t.Fatal("A's commit has no metadata: the test needs some to keep")
	}
	refused := refuseClaimReads(r, func(int32) bool { return true })
	cfg.Sarama.Metadata.Retry.Max, cfg.Sarama.Metadata.Retry.Backoff = 5, time.Minute
	cfg.Sarama.Consumer.Group.Rebalance.Timeout = 10 * time.Minute // the wait fits in half of it
	var revoked, lost atomic.Int32
	cfg.OnRevoked = func(string, []int32, int32) { revoked.Add(1) }
	cfg.OnLost = func(string, []int32, int32) { lost.Add(1) }
	b := newGroup(t, cfg, do)
	stopB := run(t, b)
	waitFor(t, time.Minute, "B's claim read to be refused", func() bool { return refused.Load() > 0 })
	time.Sleep(500 * time.Millisecond) // sarama's fetch has messages waiting for the claim by now
	start := time.Now()
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("B's Run returned %v after the stop; want it well within the 1m wait", took)
	}
	if st := b.Stats(); st.Fetched != 0 || st.Handled != 0 {
		t.Errorf("B: got Fetched %d, Handled %d; want none (it let go before taking a message)", st.Fetched, st.Handled)
	}
	if got := r.b.Commits(cfg.GroupID, r.topic)[0]; got.Offset != byA.Offset || got.Metadata != byA.Metadata {
		t.Errorf("the commit after B: got offset %d metadata %q, want A's: offset %d metadata %q", got.Offset, got.Metadata, byA.Offset, byA.Metadata)
	}
	// It made no commit, so there is none to confirm (the coordinator,
	// refusing the claim's reads, could not have): revoked, not lost.
	if revoked.Load() != 1 || lost.Load() != 0 {
		t.Errorf("B's partition: got OnRevoked %d, OnLost %d; want 1 and 0", revoked.Load(), lost.Load())
	}
}

// TestResumeReadUnansweredEndsOnStop: B's claim reads the metadata when it
// starts and the broker never answers; B is stopped meanwhile. The claim
// lets go at once (OnRevoked), before it takes a message, rather than
// when the read fails 20 s later (Net.ReadTimeout). Run itself returns
// only after that: sarama's LeaveGroup waits on the same connection.
func TestResumeReadUnansweredEndsOnStop(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	r, cfg, do, _ := heldLaneRig(t, "resume-unanswered-stop", time.Second)
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	r.oneLaneHeld(cfg, do)

	held := holdClaimRead(r, func() bool { return true })
	cfg.Sarama.Net.ReadTimeout = 20 * time.Second
	revoked := make(chan time.Time, 1)
	cfg.OnRevoked = func(string, []int32, int32) { revoked <- time.Now() }
	b := newGroup(t, cfg, do)
	stopB := run(t, b)
	waitFor(t, 20*time.Second, "B's claim read to be held", func() bool { return held.Load() == 1 })
	stopped := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- stopB() }()
	select {
	case at := <-revoked:
		if took := at.Sub(stopped); took > 5*time.Second {
			t.Errorf("B's claim let go %v after the stop; want well within the 20s the unanswered read takes", took.Round(time.Millisecond))
		}
	case <-time.After(time.Minute):
		t.Fatal("B's claim never let go")
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Fetched != 0 || st.Handled != 0 {
		t.Errorf("B: got Fetched %d, Handled %d; want none (it let go before taking a message)", st.Fetched, st.Handled)
	}
}

// startUnreadMember starts member B of the held-lane tests with a small
// in-flight share (it fills with the held lane), one quick retry of its
// claim's metadata read and, if not 0, readTimeout as Net.ReadTimeout, and
// waits until B has given up on the read (the broker refuses it) and
// failed the held message again.
func startUnreadMember(t *testing.T, cfg Config, do func(context.Context, []*Message) error, readTimeout time.Duration) (*Group[*Message], func() error, *observer.ObservedLogs) {
	t.Helper()
	cfg.MaxInFlight, cfg.Chan = 8, 1
	cfg.Sarama.Metadata.Retry.Max, cfg.Sarama.Metadata.Retry.Backoff = 1, 50*time.Millisecond
	if readTimeout > 0 {
		cfg.Sarama.Net.ReadTimeout = readTimeout
	}
	core, logs := observer.New(zapcore.InfoLevel)
	cfg.Logger = zap.New(core)
	b := newGroup(t, cfg, do)
	stop := run(t, b)
	waitFor(t, 20*time.Second, "B to give up on the read and fail the held message again", func() bool {
		return logs.FilterMessage("reading commit metadata failed; messages finished by the previous owner may be handled again").Len() == 1 &&
			b.Stats().Failures >= 2
	})
	return b, stop, logs
}

// holdClaimRead makes the broker never answer the first claim read of a
// committed offset (OffsetFetch without RequireStable, as in
// refuseClaimReads) that comes while holding says so: the connection it
// came on is held until the client's Net.ReadTimeout. It returns how many
// it held (0 or 1).
func holdClaimRead(r *rig, holding func() bool) *atomic.Int32 {
	var held atomic.Int32
	c := r.b.Cluster()
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if f, ok := req.(*kmsg.OffsetFetchRequest); !ok || f.RequireStable || !holding() || held.Load() > 0 {
			return nil, nil, false
		}
		held.Add(1)
		return nil, nil, true // never answered
	})
	return &held
}

// refuseClaimReads makes the broker refuse the claims' reads of their
// committed offsets (OffsetFetch without RequireStable: sarama's own read
// at a session's start asks for stable offsets under ReadCommitted) when
// refuse, given the read's number from 1, says so; it returns the count
// of refused reads. The tests turn the group's periodic read-back off
// (Status.ReadBack), so that every read counted is a claim's at its start.
func refuseClaimReads(r *rig, refuse func(n int32) bool) *atomic.Int32 {
	var reads, refused atomic.Int32
	r.b.RefuseOffsetFetch(func(req *kmsg.OffsetFetchRequest) bool {
		return !req.RequireStable && refuse(reads.Add(1))
	}, func() { refused.Add(1) })
	return &refused
}
