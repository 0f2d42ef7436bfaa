package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestTimedOutDeadLettered (Config.MsgTimeout, Retry.MaxAttempts): a Do
// call on one message that waits on its ctx sees the ctx's deadline at
// MsgTimeout from the call's start and its cancellation with cause
// ErrTimeout; each such call counts in Stats.TimedOut, and after
// MaxAttempts of them the message is dead-lettered with reason "timeout"
// (Stats.DeadLettered.Timeout), not max_attempts, although Do returned
// ctx.Err() (context.Canceled), and the failed call's warning says so
// too. The rest of the partition is handled once each, in order, and the
// commits reach the high watermark.
func TestTimedOutDeadLettered(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the timeouts
	// A timeout long enough that no healthy call under load reaches it.
	const n, keys, target, timeout = 100, 10, 5, time.Second
	r := newRig(t, "slow", 1, n, keys)
	if err := r.b.CreateTopic("slow-dlq", 1); err != nil {
		t.Fatal(err)
	}
	w := r.work(0, 0)
	var mu sync.Mutex
	var calls int
	var problems []string
	cfg := r.config("slow")
	cfg.Size, cfg.Num, cfg.MsgTimeout, cfg.DeadLetterTopic = 1, 4, timeout, "slow-dlq"
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxAttempts: 2}
	var logs *observer.ObservedLogs
	cfg.Logger, logs = observed()
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		if batch[0].Offset != target {
			return w.Do(ctx, batch)
		}
		start := time.Now()
		deadline, ok := ctx.Deadline()
		<-ctx.Done()
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case !ok:
			problems = append(problems, "ctx has no deadline")
		case deadline.After(start.Add(timeout)): // the call began before Do read the clock
			problems = append(problems, "ctx deadline "+deadline.Sub(start).String()+" after Do began, want at most "+timeout.String())
		case !errors.Is(context.Cause(ctx), ErrTimeout):
			problems = append(problems, "ctx cancelled with cause "+context.Cause(ctx).Error()+", want ErrTimeout")
		}
		if batch[0].Attempt == cfg.Retry.MaxAttempts {
			r.markSettled(batch[0].Partition, target) // dead-lettered next: may be committed past once written
		}
		return ctx.Err()
	})
	r.runToEnd(g, cfg.GroupID)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if calls != cfg.Retry.MaxAttempts {
		t.Errorf("calls on offset %d: got %d, want MaxAttempts (%d)", target, calls, cfg.Retry.MaxAttempts)
	}
	st := g.Stats()
	if st.TimedOut < int64(cfg.Retry.MaxAttempts) || st.DeadLettered.Timeout != 1 || st.DeadLettered.MaxAttempts != 0 {
		t.Errorf("Stats: got TimedOut %d, DeadLettered %+v; want TimedOut at least %d and one dead letter, for timeout", st.TimedOut, st.DeadLettered, cfg.Retry.MaxAttempts)
	}
	letters := readDeadLetterInfos(t, r.b.Addrs(), "slow-dlq")
	if len(letters) != 1 {
		t.Fatalf("dead letters: got %d, want 1", len(letters))
	}
	if info := letters[0]; info.Offset != target || info.Reason != deadletter.ReasonTimeout || info.Attempts != cfg.Retry.MaxAttempts {
		t.Errorf("dead letter: got offset %d reason %q attempts %d, want offset %d reason %q attempts %d",
			info.Offset, info.Reason, info.Attempts, target, deadletter.ReasonTimeout, cfg.Retry.MaxAttempts)
	}
	r.checkDeadLettered(1) // and every commit the broker saw behind finished work
	failed := logs.FilterMessage("Do failed; its failing items are retried or dead-lettered").All()
	if len(failed) == 0 {
		t.Fatal("no failed call logged")
	}
	if got := failed[0].ContextMap()["error"]; got != ErrTimeout.Error()+" (context canceled)" {
		t.Errorf("the failed call's warning: got error %q, want %q (the timeout, then what Do returned)", got, ErrTimeout.Error()+" (context canceled)")
	}
}
