package group

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOutageChargesNoLaneMates: while a dependency is down, a batch that
// fails charges only the first message of each key (whose charge the
// outage takes back): the later ones of the key go back behind it
// uncharged. With 8 keys and batches of 16, charging every message made
// the later ones run out of attempts in the outage, and they were
// dead-lettered once it ended (22 of them here) although failures in an
// outage do not count. That holds whether the batch fails as a whole or
// Do names every message in a BatchError (8 dead-lettered, one a key, in
// each of 3 runs before).
func TestOutageChargesNoLaneMates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		fail func(batch []*Message) error
	}{
		{"whole batch", func([]*Message) error { return errors.New("database unreachable") }},
		{"BatchError", func(batch []*Message) error {
			var failed BatchError
			for i := range batch {
				failed.Fail(i, errors.New("database unreachable"))
			}
			return failed.Err()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // mostly waits on the broker and the outage's probes
			testOutageChargesNoLaneMates(t, tt.fail)
		})
	}
}

func testOutageChargesNoLaneMates(t *testing.T, fail func(batch []*Message) error) {
	const n, keys = 800, 8
	r := newRig(t, "outage-mates", 1, n, keys)
	w := r.work(0, 0)
	var down atomic.Bool
	down.Store(true)
	var maxAttempt atomic.Int64
	cfg := r.config("outage-mates")
	cfg.Size, cfg.Num, cfg.MaxInFlight = 16, 2, 400
	cfg.DataPath = t.TempDir()
	cfg.Retry = Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxAttempts: 3}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if a := int64(m.Attempt); a > maxAttempt.Load() {
				maxAttempt.Store(a)
			}
		}
		if down.Load() {
			return fail(batch)
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "the outage to be noticed", func() bool { return g.Stats().Outage })
	time.Sleep(2 * time.Second)
	down.Store(false)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if st.DeadLettered != (DeadLetterCounts{}) || maxAttempt.Load() > 3 {
		t.Fatalf("after an outage: dead-lettered %+v, highest attempt Do saw %d; want none dead-lettered and at most 3", st.DeadLettered, maxAttempt.Load())
	}
	if rep := r.ledger.Report(); rep.Lost != 0 || rep.OrderViolations != 0 {
		t.Fatalf("ledger: lost %d, order violations %d; want 0 and 0", rep.Lost, rep.OrderViolations)
	}
}

// TestHungLastAttemptDeadLetteredAsTimeout: Unordered, MaxAttempts 1: the
// only allowed call of a message hangs past MsgTimeout and its grace. Its
// copy, one attempt on, is past MaxAttempts: it is dead-lettered without
// running, with reason timeout, as a last attempt that timed out is.
func TestHungLastAttemptDeadLetteredAsTimeout(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the hung call
	const n, keys, target = 40, 20, 7
	r := newRig(t, "hung-last", 1, n, keys)
	if err := r.b.CreateTopic("dlq", 1); err != nil {
		t.Fatal(err)
	}
	w := r.work(0, 0)
	release := make(chan struct{})
	var once sync.Once
	rel := func() { once.Do(func() { close(release) }) }
	defer rel()
	var log attemptLog
	cfg := r.config("hung-last")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.MsgTimeout = 1, 4, Unordered, 200*time.Millisecond
	cfg.Retry.MaxAttempts = 1
	cfg.DeadLetterTopic = "dlq"
	stop := run(t, newGroup(t, cfg, hangOnFirstAttempt(target, release, &log, w.Do)))
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	rel()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	seen, _ := log.get()
	infos := readDeadLetterInfos(t, r.b.Addrs(), "dlq")
	if len(seen) != 1 || len(infos) != 1 || infos[0].Offset != target || infos[0].Reason != "timeout" || infos[0].Attempts != 1 {
		t.Fatalf("attempts Do saw of offset %d: %v; dead letters %+v; want one attempt, and one dead letter of it: timeout after 1 attempt", target, seen, infos)
	}
}
