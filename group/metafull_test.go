package group

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMetadataFullStopsIntake (Config.CommitMetadata): every 20th message
// fails and waits for its retry while the rest finish (1 ms each, 8
// workers: the 20k produced would take seconds, many commit intervals), so
// the finished set above the committed offset is scattered. Once it no
// longer fits three quarters of CommitMetadata (200 bytes), the partition
// takes no new messages: Do never sees most of the 20k while the failures
// last, although MaxInFlight (2000) would let it, and no commit the broker
// receives carries more metadata than CommitMetadata. Once the failures
// stop, everything finishes, in lane order, and the commits reach the high
// watermark.
func TestMetadataFullStopsIntake(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys, limit = 20_000, 5000, 200
	r := newRig(t, "meta-full", 1, n, keys)
	var mu sync.Mutex
	longest := 0 // the longest metadata of a commit the broker received
	r.b.ObserveCommits(func(req *kmsg.OffsetCommitRequest) {
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				if p.Metadata != nil {
					longest = max(longest, len(*p.Metadata))
				}
			}
		}
	})
	w := r.work(time.Millisecond, 0) // 20k take seconds: many commit intervals
	var failing atomic.Bool
	failing.Store(true)
	var seenMu sync.Mutex
	var seenEnd int64 // highest offset Do was called with, plus one
	seen := func() int64 {
		seenMu.Lock()
		defer seenMu.Unlock()
		return seenEnd
	}
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			seenMu.Lock()
			seenEnd = max(seenEnd, m.Offset+1)
			seenMu.Unlock()
			if failing.Load() && m.Offset%20 == 0 {
				return errInjected
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := r.config("meta-full")
	cfg.Size, cfg.Num = 1, 8
	cfg.CommitMetadata = limit
	cfg.MaxInFlight = 2000 // the partition's budget, so that intake is what the metadata stops
	cfg.Retry = Retry{Backoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	waitFor(t, time.Minute, "the partition to stop for its commit metadata", func() bool { return g.Stats().MetadataFull > 0 })
	stopped := seen()
	// Let what was already dispatched run out, over many commit
	// intervals: intake stays stopped while the failures last.
	time.Sleep(2 * time.Second)
	// What was dispatched before it stopped: at most the workers' paced
	// backlog, one intake step past it (a step that starts below the
	// backlog hands over up to Chan), and a message running in each
	// worker.
	ahead := int64(backlog(g.cfg) + g.cfg.Chan + g.cfg.Num)
	got := seen()
	if got-stopped > ahead || got >= n/2 {
		t.Errorf("Do saw offsets up to %d when the partition stopped for its metadata, up to %d of %d two seconds later: want at most %d more (the backlog already dispatched)", stopped, got, n, ahead)
	}
	failing.Store(false)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.check(false)
	mu.Lock()
	defer mu.Unlock()
	if longest == 0 || longest > limit {
		t.Errorf("longest commit metadata the broker received: got %d bytes, want 1 to %d (CommitMetadata)", longest, limit)
	}
	t.Logf("Do saw offsets below %d when the partition stopped, below %d of %d two seconds later; MetadataFull %d; longest metadata %d bytes", stopped, got, n, g.Stats().MetadataFull, longest)
}
