package group

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestLaneMatesStopAtMaxAttempts: when Do names several messages of one
// key in a batch as failed, every one of them is charged, and none reaches
// Do past Retry.MaxAttempts: each is dead-lettered after its third
// failure, in its turn, with its own error and the time it first failed.
// Before, the k-th of them ran MaxAttempts+k-1 times.
func TestLaneMatesStopAtMaxAttempts(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the backoff

	const n, failing = 5, 4 // one key: offsets 0-3 always fail, 4 does not
	r := newRig(t, "mates-max", 1, n, 1)
	if err := r.b.CreateTopic("dlq", 1); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64][]int{}            // attempts Do saw, per offset
	firstFailed := map[int64]time.Time{} // when Do first failed each
	do := func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		mu.Lock()
		defer mu.Unlock()
		for i, m := range batch {
			seen[m.Offset] = append(seen[m.Offset], m.Attempt)
			if m.Offset < failing {
				if _, ok := firstFailed[m.Offset]; !ok {
					firstFailed[m.Offset] = time.Now()
				}
				failed.Fail(i, fmt.Errorf("offset %d always fails", m.Offset))
			}
		}
		return failed.Err()
	}
	const backoff = 200 * time.Millisecond
	cfg := r.config("mates-max")
	cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Second // one batch of all five
	cfg.Retry = Retry{Backoff: backoff, MaxBackoff: backoff, Jitter: -1, MaxAttempts: 3}
	cfg.DeadLetterTopic = "dlq"
	runToCommitted(t, r, cfg, do)

	mu.Lock()
	defer mu.Unlock()
	for off := range int64(failing) {
		if got := seen[off]; !slices.Equal(got, []int{1, 2, 3}) {
			t.Errorf("attempts Do saw of offset %d: got %v, want [1 2 3]", off, got)
		}
	}
	infos := readDeadLetterInfos(t, r.b.Addrs(), "dlq")
	if len(infos) != failing {
		t.Fatalf("dead letters: got %d, want %d", len(infos), failing)
	}
	for i, info := range infos {
		off := int64(i) // in lane order
		want := fmt.Sprintf("offset %d always fails", off)
		if info.Offset != off || info.Reason != "max_attempts" || info.Attempts != 3 || info.Message != want {
			t.Errorf("dead letter %d: got offset %d, reason %s, %d attempts, %q; want offset %d, max_attempts, 3, %q",
				i, info.Offset, info.Reason, info.Attempts, info.Message, off, want)
		}
		// The dead letter comes two backoffs after the first failure;
		// the first failure time is that of the first failed call.
		if d := info.FirstFailure.Sub(firstFailed[off]); d < -time.Second || d > backoff/2 {
			t.Errorf("dead letter of offset %d: first failure %v, %v after Do first failed it; want within %v",
				off, info.FirstFailure, d, backoff/2)
		}
	}
}
