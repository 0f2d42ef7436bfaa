package group

import (
	"testing"
	"time"
)

// TestConsumeAllInOrder is the main integration test: 4 partitions
// x 100k messages over 1k keys, 1% of Do calls failing and retried.
func TestConsumeAllInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("400k messages")
	}
	const partitions, perPartition, keys = 4, 100_000, 1000
	r := newRig(t, "orders", partitions, partitions*perPartition, keys)
	w := r.work(0, 0.01)
	cfg := r.config("all-in-order")
	cfg.Size, cfg.Num = 64, 16
	g := newGroup(t, cfg, w.Do)
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rep := r.check(false)
	r.checkFinalCommits(cfg.GroupID)
	if w.failures() == 0 {
		t.Fatal("no Do call failed: retries were not exercised")
	}
	st := g.Stats()
	if st.Handled != int64(r.total) || st.Fetched != int64(r.total) || st.Committed != int64(r.total) {
		t.Errorf("stats: got handled %d fetched %d committed %d, want %d each", st.Handled, st.Fetched, st.Committed, r.total)
	}
	// A failed batch is retried in halves at once: every failed call is
	// an injected one, the split calls are counted, and an item is charged
	// an attempt only when it failed alone (rare with 1% of calls failing).
	if st.Failures != int64(w.failures()) || st.Splits == 0 || st.Retries > st.Failures {
		t.Errorf("stats: got failures %d splits %d retries %d, want failures %d, splits > 0, retries <= failures",
			st.Failures, st.Splits, st.Retries, w.failures())
	}
	if st.InFlight != 0 || st.Partitions != 0 {
		t.Errorf("stats after Run: got in flight %d partitions %d, want 0 and 0", st.InFlight, st.Partitions)
	}
	t.Logf("handled %d, %d Do failures retried, %d batches", rep.Distinct, w.failures(), st.Batches)
}

// TestMaxInFlightBoundsFetching: with a handler slower than fetching, the
// messages dispatched and not finished never exceed MaxInFlight (plus the
// one message per claimed partition that a claim loop may read after
// finding room); those fetched and not finished (held undispatched too,
// while the workers' backlog paces intake or a share is spent) reach it, so
// that fetching really pauses.
func TestMaxInFlightBoundsFetching(t *testing.T) {
	const partitions, n, keys, bound = 4, 20_000, 500, 2000
	r := newRig(t, "bounded", partitions, n, keys)
	w := r.work(time.Millisecond, 0)
	cfg := r.config("bounded")
	cfg.Size, cfg.Num, cfg.MaxInFlight = 16, 8, bound
	g := newGroup(t, cfg, w.Do)
	stop := run(t, g)
	var peak, peakFetched int64
	paused := false
	deadline := time.Now().Add(2 * time.Minute)
	for !r.b.CaughtUp(cfg.GroupID, r.topic) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the group to catch up")
		}
		st := g.Stats()
		fetched := st.InFlight
		for _, p := range st.PartitionStats {
			fetched += p.Undispatched
			paused = paused || p.Paused
		}
		peak, peakFetched = max(peak, st.InFlight), max(peakFetched, fetched)
		time.Sleep(200 * time.Microsecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.check(false)
	if peak > bound+partitions {
		t.Fatalf("dispatched and unfinished peaked at %d, want at most MaxInFlight %d + %d partitions", peak, bound, partitions)
	}
	if peakFetched < bound*3/4 || !paused {
		t.Fatalf("fetched and unfinished peaked at %d, fetching paused: %v; want near MaxInFlight %d and paused: the bound was never reached, the test proves nothing",
			peakFetched, paused, bound)
	}
	t.Logf("fetched and unfinished peaked at %d (dispatched %d) of %d", peakFetched, peak, bound)
}

// TestCommittedCountsWhatIsMarked: Stats.Committed counts the messages
// behind the frontier marked for commit, as Lag and the partitions'
// Frontier do, not the frontier that moved since: with no commit tick
// yet, everything handled is still lag and nothing is counted committed;
// the final commit at the stop counts it all. The two figures sit on one
// progress line, and counting the live frontier made them disagree by up
// to an interval's traffic.
func TestCommittedCountsWhatIsMarked(t *testing.T) {
	t.Parallel() // waits on the broker
	const n = 200
	r := newRig(t, "marked", 1, n, 10)
	cfg := r.config("marked")
	cfg.Sarama.Consumer.Offsets.AutoCommit.Interval = time.Hour // no tick during the test
	g := newGroup(t, cfg, r.work(0, 0).Do)
	stop := run(t, g)
	waitFor(t, time.Minute, "every message handled", func() bool { return g.Stats().Handled == n })
	st := g.Stats()
	if st.Committed != 0 || st.Lag != n {
		t.Fatalf("before any commit tick: got Committed %d, Lag %d; want 0 and %d (nothing marked yet)", st.Committed, st.Lag, n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := g.Stats().Committed; got != n {
		t.Fatalf("after the final commit: got Committed %d, want %d", got, n)
	}
	if got := r.b.Committed(cfg.GroupID, r.topic)[0]; got != n {
		t.Fatalf("broker's committed offset: got %d, want %d", got, n)
	}
}
