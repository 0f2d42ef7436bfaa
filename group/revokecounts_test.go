package group

import (
	"context"
	"errors"
	"testing"
	"time"
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
