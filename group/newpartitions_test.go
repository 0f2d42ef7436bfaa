package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/loadgen"
)

// TestNewPartitionsDelay measures how long partitions added to a topic
// wait before a Group built on DefaultSarama's metadata refresh
// (DefaultMetadataRefresh) consumes them: sarama's group leader compares
// partition counts with its metadata cache once per
// Metadata.RefreshFrequency, and the cache is refreshed once per
// RefreshFrequency too, so the bound is two periods (one minute) plus a
// rebalance. The test adds two partitions to a two-partition topic,
// produces a record to each new one at once, and times until Do has both;
// it fails past the bound. It waits up to a minute, so it runs under
// ORDERLY_SOAK only.
func TestNewPartitionsDelay(t *testing.T) {
	if !soak() {
		t.Skip("waits up to a minute on sarama's metadata refresh: ORDERLY_SOAK=1 runs it")
	}
	t.Parallel()
	r := newRig(t, "new-partitions", 2, 200, 10)
	r.produce(0, 200)
	cfg := r.config("new-partitions")
	if got := cfg.Sarama.Metadata.RefreshFrequency; got != DefaultMetadataRefresh {
		t.Fatalf("fastConfig's Metadata.RefreshFrequency: got %v, want DefaultSarama's %v", got, DefaultMetadataRefresh)
	}
	var mu sync.Mutex
	firstSeen := map[int32]time.Time{}
	w := r.work(0, 0)
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		planned := make([]*Message, 0, len(batch))
		mu.Lock()
		for _, m := range batch {
			if _, ok := firstSeen[m.Partition]; !ok {
				firstSeen[m.Partition] = time.Now()
			}
			if m.Partition < 2 { // the new partitions' records are not in the rig's plan
				planned = append(planned, m)
			}
		}
		mu.Unlock()
		return w.Do(ctx, planned)
	})
	started := time.Now()
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	admin := clusterAdmin(t, r.b.Addrs())
	if err := admin.CreatePartitions(r.topic, 4, nil, false); err != nil {
		t.Fatalf("add partitions to %s: %v", r.topic, err)
	}
	added := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := loadgen.Produce(ctx, r.b.Addrs(), r.topic, 2, func(i int) loadgen.Record {
		return loadgen.Record{Key: []byte("new"), Value: []byte("new"), Pinned: true, Partition: int32(2 + i)}
	}); err != nil {
		t.Fatalf("produce to the new partitions: %v", err)
	}
	bound := 2*DefaultMetadataRefresh + cfg.Sarama.Consumer.Group.Rebalance.Timeout
	waitFor(t, bound+10*time.Second, "both new partitions handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, a := firstSeen[2]
		_, b := firstSeen[3]
		return a && b
	})
	mu.Lock()
	last := firstSeen[2]
	if firstSeen[3].After(last) {
		last = firstSeen[3]
	}
	took := last.Sub(added)
	mu.Unlock()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if took > bound {
		t.Fatalf("new partitions consumed %v after they were added, want at most %v (two metadata refreshes and a rebalance)", took, bound)
	}
	t.Logf("new partitions, added %v after Run started, consumed %v after they were added (Metadata.RefreshFrequency %v)",
		added.Sub(started).Round(100*time.Millisecond), took.Round(100*time.Millisecond), DefaultMetadataRefresh)
}
