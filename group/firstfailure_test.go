package group

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/commit"
)

// TestFirstFailureSurvivesHandoff: a message fails under member A and
// waits for its retry; A leaves gracefully, its final commit carries the
// message's first failure (version 3 metadata); member B takes the
// partition, the message's last allowed attempt fails there, and its dead
// letter, read back from the dead-letter topic, reports A's first failure
// to the millisecond, not B's failure.
func TestFirstFailureSurvivesHandoff(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the backoff: runs beside the others
	const n, keys, target = 50, 5, 7
	r := newRig(t, "handoff-first-failure", 1, n, keys)
	if err := r.b.CreateTopic("dlq", 1); err != nil {
		t.Fatal(err)
	}
	w := r.work(0, 0)
	var mu sync.Mutex
	var calls []time.Time // the target's failing calls: when each started and returned
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == target {
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
				defer func() {
					mu.Lock()
					calls = append(calls, time.Now())
					mu.Unlock()
				}()
				if m.Attempt == 2 { // its last: dead-lettered, which the test checks
					r.markSettled(m.Partition, m.Offset)
				}
				return errors.New("always fails")
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := r.config("handoff-first-failure")
	cfg.Size, cfg.Num = 1, 2
	// Long enough that A leaves before its retry; B waits out the rest,
	// so B's failure comes seconds after A's.
	cfg.Retry = Retry{Backoff: 4 * time.Second, MaxBackoff: 4 * time.Second, Jitter: -1, MaxAttempts: 2}
	cfg.DeadLetterTopic = "dlq"

	stopA := run(t, newGroup(t, cfg, do))
	waitFor(t, time.Minute, "A's commit to list the failed message waiting at attempt 2", func() bool {
		d, err := commit.DecodeMeta(r.b.Commits(cfg.GroupID, r.topic)[0].Metadata)
		if err != nil {
			return false
		}
		w, ok := d.WaitingAt(target)
		return ok && w.Attempt == 2
	})
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	underA := append([]time.Time(nil), calls...)
	mu.Unlock()
	if len(underA) != 2 {
		t.Fatalf("calls of offset %d under A: got %d starts and returns, want 2 (one failed call; its retry is 4s away)", target, len(underA))
	}
	final := r.b.Commits(cfg.GroupID, r.topic)[0]
	d, err := commit.DecodeMeta(final.Metadata)
	if err != nil {
		t.Fatalf("A's final commit %+v: %v", final, err)
	}
	listed, _ := d.WaitingAt(target)

	startB := time.Now()
	b := newGroup(t, cfg, do)
	stopB := run(t, b)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	infos := readDeadLetterInfos(t, r.b.Addrs(), "dlq")
	if len(infos) != 1 || infos[0].Offset != target || infos[0].Attempts != 2 || infos[0].Reason != "max_attempts" {
		t.Fatalf("dead letters: got %+v, want one of offset %d after 2 attempts (max_attempts)", infos, target)
	}
	// A charged the failure between its call's start and a moment after
	// it returned; the header keeps milliseconds, rounded down.
	got, from, to := infos[0].FirstFailure, underA[0].Truncate(time.Millisecond), underA[1].Add(time.Second)
	if got.Before(from) || got.After(to) || !got.Before(startB) {
		t.Fatalf("dead letter's first failure: got %v, want A's, between %v and %v (B started at %v)", got.UTC(), from.UTC(), to.UTC(), startB.UTC())
	}
	if !got.Equal(listed.FirstFailure) || !strings.HasPrefix(final.Metadata, commit.MetaPrefix3) {
		t.Fatalf("dead letter's first failure %v: want the one A's final commit %q lists, %v", got.UTC(), final.Metadata, listed.FirstFailure.UTC())
	}
	if st := b.Stats(); st.ResumedWaiting != 1 || st.DeadLettered.MaxAttempts != 1 {
		t.Fatalf("B's ResumedWaiting %d, DeadLettered.MaxAttempts %d: want 1, 1", st.ResumedWaiting, st.DeadLettered.MaxAttempts)
	}
	r.checkDeadLettered(1)
}
