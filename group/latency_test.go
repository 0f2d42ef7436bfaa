package group

import (
	"testing"
	"time"
)

// TestStatsLatencyPerSucceededCall: Stats.Latency has one observation per
// Do call that succeeded, of its first record's timestamp to the call's
// end, and none for a call that failed. With Size 1 each message ends in
// exactly one successful call, however often it failed before; each
// observation spans at least its own call (the record was produced before
// the call began), so their sum is at least the calls' 2 ms each, and at
// most the time since the first record was produced, per call.
func TestStatsLatencyPerSucceededCall(t *testing.T) {
	const n = 200
	produced := time.Now()
	r := newRig(t, "latency", 2, n, 50)
	w := r.work(2*time.Millisecond, 0.1)
	cfg := r.config("latency")
	cfg.Size, cfg.Num = 1, 8
	cfg.Retry = Retry{Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	g := newGroup(t, cfg, w.Do)
	r.runToEnd(g, cfg.GroupID)
	bound := time.Since(produced)
	st := g.Stats()
	if w.failures() == 0 {
		t.Fatal("no Do call failed: the failed-call case was not exercised")
	}
	if st.Latency.Count != n {
		t.Errorf("latency observations: got %d, want %d (one per message's successful call; %d calls failed)", st.Latency.Count, n, w.failures())
	}
	var inBuckets uint64
	for _, c := range st.Latency.Counts {
		inBuckets += c
	}
	if inBuckets != st.Latency.Count {
		t.Errorf("latency buckets: got %d observations, want Count %d", inBuckets, st.Latency.Count)
	}
	if low, high := time.Duration(n)*2*time.Millisecond, time.Duration(n)*bound; st.Latency.Sum < low || st.Latency.Sum > high {
		t.Errorf("latency sum: got %v, want %v to %v (%d calls of at least 2ms, each within %v of the first record)", st.Latency.Sum, low, high, n, bound)
	}
	if st.DoDuration.Count == 0 {
		t.Fatal("no Do duration observed")
	}
	if mean := st.DoDuration.Sum / time.Duration(st.DoDuration.Count); st.Latency.Sum < mean*n {
		t.Errorf("latency sum: got %v, want at least %d calls of the mean Do duration %v", st.Latency.Sum, n, mean)
	}
}
