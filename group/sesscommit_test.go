package group

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShutdownCommitsOnce: at shutdown every claim commits its final
// frontier inside the session, and those commits reach the broker as a few
// OffsetCommit requests for the member (one under way when others mark,
// and the next carrying all of them: one or two when the claims end
// together, a few more when a loaded machine spreads their ends over
// several round trips, as under -race in CI), not one request per claim,
// nor the same request several times. The claims' reads of their
// committed offsets (at the start, for the commit metadata; at the end,
// to confirm the final commit) share OffsetFetch requests too.
func TestShutdownCommitsOnce(t *testing.T) {
	t.Parallel()
	const partitions, n = 128, 12800
	r := newRig(t, "shutdown-commits", partitions, n, 256)
	cfg := r.config("shutdown-commits")
	cfg.Sarama.Consumer.Offsets.AutoCommit.Interval = time.Hour // only the shutdown's commits
	cfg.Status.ReadBack = -1                                    // only the claims' reads
	var stopping atomic.Bool
	var fetches [2]atomic.Int64 // OffsetFetch requests before and after the stop began
	c := r.b.Cluster()
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r, ok := req.(*kmsg.OffsetFetchRequest)
		ours := ok && r.Group == "shutdown-commits"
		for _, g := range r.Groups { // v8 and later ask for many groups
			ours = ours || g.Group == "shutdown-commits"
		}
		if ours {
			i := 0
			if stopping.Load() {
				i = 1
			}
			fetches[i].Add(1)
		}
		return nil, nil, false
	})
	var mu sync.Mutex
	var requests []int // partitions per request after the stop began
	r.b.ObserveCommits(func(req *kmsg.OffsetCommitRequest) {
		if !stopping.Load() || req.Group != "shutdown-commits" {
			return
		}
		parts := 0
		for _, tp := range req.Topics {
			parts += len(tp.Partitions)
		}
		mu.Lock()
		requests = append(requests, parts)
		mu.Unlock()
	})
	w := r.work(0, 0)
	g := newGroup(t, cfg, w.Do)
	stop := run(t, g)
	waitFor(t, time.Minute, "every message handled", func() bool { return g.Stats().Handled >= n })
	stopping.Store(true)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	committed, hw := r.b.Committed("shutdown-commits", r.topic), r.b.HighWatermarks(r.topic)
	for p := range int32(partitions) {
		if got, want := committed[p], hw[p]; got != want {
			t.Fatalf("partition %d: committed %d, want %d (the final commit)", p, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range requests {
		total += n
	}
	if len(requests) == 0 || len(requests) > partitions/16 || total > partitions+partitions/8 {
		t.Fatalf("shutdown of %d claims: got %d OffsetCommit requests (partitions each: %v), want at most %d carrying each partition about once",
			partitions, len(requests), requests, partitions/16)
	}
	// (At the start sarama's offset manager reads each partition's offset
	// itself, one request each: only the shutdown's are Orderly's alone.)
	if got := fetches[1].Load(); got == 0 || got > partitions/4 {
		t.Errorf("shutdown of %d claims: got %d OffsetFetch requests, want 1 to %d (they share requests)", partitions, got, partitions/4)
	}
	t.Logf("shutdown of %d claims: %d OffsetCommit requests, partitions each %v; OffsetFetch requests: %d at the start, %d at shutdown",
		partitions, len(requests), requests, fetches[0].Load(), fetches[1].Load())
}
