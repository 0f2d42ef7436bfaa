package group

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/loadgen"
)

// TestFreshPartitionBesideBacklog: records that arrive on one partition
// while another works through a backlog are handled beside that backlog,
// not behind it. Partition 0 has 4,000 records over 50 keys; once 100 are
// handled, 5 are produced to partition 1. Do sees the first of them while
// partition 0 has handled fewer than 200 more (about 20 here: what it
// handles while they are produced and fetched). Served behind the backlog
// they waited for partition 0's items already in the scheduler and for a
// wake from the paced list: about 410 more.
func TestFreshPartitionBesideBacklog(t *testing.T) {
	t.Parallel()
	const topic, n0, keys = "fresh", 4000, 50
	b := startBroker(t, topic, 2)
	ctx := context.Background()
	pinned := func(p int32, n int, key func(i int) []byte) {
		t.Helper()
		if err := loadgen.Produce(ctx, b.Addrs(), topic, n, func(i int) loadgen.Record {
			return loadgen.Record{Key: key(i), Value: []byte("v"), Pinned: true, Partition: p}
		}); err != nil {
			t.Fatal(err)
		}
	}
	pinned(0, n0, func(i int) []byte { return fmt.Appendf(nil, "k%d", i%keys) })
	var handled0 atomic.Int64
	var at atomic.Int64 // partition 0's handled count when Do first saw partition 1
	at.Store(-1)
	cfg := fastConfig(t, b.Addrs(), topic, "fresh")
	cfg.Num, cfg.Size = 4, 1
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		time.Sleep(2 * time.Millisecond)
		for _, m := range batch {
			if m.Partition == 1 {
				at.CompareAndSwap(-1, handled0.Load())
			} else {
				handled0.Add(1)
			}
		}
		return nil
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "100 of partition 0's records handled", func() bool { return handled0.Load() >= 100 })
	before := handled0.Load()
	pinned(1, 5, func(i int) []byte { return fmt.Appendf(nil, "z%d", i) })
	waitFor(t, time.Minute, "a record of partition 1 handled", func() bool { return at.Load() >= 0 })
	if more := at.Load() - before; more >= 200 {
		t.Fatalf("partition 0 handled %d more records (of %d left) before the first of partition 1's, want fewer than 200", more, n0-before)
	} else {
		t.Logf("partition 0 handled %d more records before the first of partition 1's", more)
	}
	waitFor(t, time.Minute, "everything committed", func() bool { return b.CaughtUp("fresh", topic) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
