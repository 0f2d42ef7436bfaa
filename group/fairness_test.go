package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

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

// TestFairShareAmongBusyPartitions: partitions that all have a backlog
// take turns with the workers call by call; none waits for another's
// backlog. Four partitions hold 2,000 messages each over 50 keys (Num 2,
// Size 1, Chan 1,024: consume's defaults but Num), all read at once. The
// claim loops push a burst of up to Chan each, far past their shares of
// the pacing backlog (1,024 over 4: 256). From a partition's first call to
// its last, at most 64 calls of the others come between two of its own
// (start-time fair queuing interleaves the four one call in four, to
// within the ready queue's 16-stamp buckets: 48 seen). Served in arrival
// order past their shares, each partition's burst ran whole before the
// next one's, and a partition waited for the other three's: 1,700 to
// 3,300 calls.
func TestFairShareAmongBusyPartitions(t *testing.T) {
	const parts, per, keys, maxGap = 4, 2000, 50, 64
	var (
		mu    sync.Mutex
		calls []int32 // the partition of each call, in the order the calls began
	)
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem",
		Size: 1, Num: 2, Ticker: -1, Chan: 1024}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		mu.Lock()
		calls = append(calls, batch[0].Partition)
		mu.Unlock()
		// Not a no-op: the claim loops, told of finished items up to
		// wakeDelay late, refill their partitions long before the ready
		// items run out, so the calls follow the ready queue's order.
		time.Sleep(50 * time.Microsecond)
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claims := make([]*pausingClaim, parts)
	for p := range claims {
		claims[p] = &pausingClaim{memClaim: &memClaim{p: int32(p), msgs: make(chan *sarama.ConsumerMessage, per)}}
		for off := range int64(per) {
			claims[p].msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: int32(p), Offset: off, Key: fmt.Appendf(nil, "k%d", off%keys)}
		}
	}
	consumeClaims(t, g, sess, claims, make(chan struct{}))
	waitFor(t, time.Minute, "every message to be marked", func() bool {
		for p := range parts {
			if sess.markedAt(int32(p)) != per {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for p := range int32(parts) {
		first, last := -1, -1
		for i, cp := range calls {
			if cp != p {
				continue
			}
			if first < 0 {
				first = i
			}
			last = i
		}
		if first < 0 {
			t.Errorf("partition %d: got no calls, want %d", p, per)
			continue
		}
		gap, worst, at := 0, 0, 0
		for i := first; i <= last; i++ {
			if calls[i] == p {
				gap = 0
				continue
			}
			if gap++; gap > worst {
				worst, at = gap, i
			}
		}
		if worst > maxGap {
			t.Errorf("partition %d: got %d calls of other partitions in a row (ending at call %d of %d) between its first and last, want at most %d", p, worst, at, len(calls), maxGap)
		} else {
			t.Logf("partition %d: at most %d calls of other partitions in a row", p, worst)
		}
	}
}
