package group

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/cputime"
)

// memSession and memClaim stand in for sarama's session and claim so that
// the in-memory pipeline (dispatch + merge + commit) can be measured, and
// its commit marks watched, without a broker. Kafka-facing tests use the
// real thing over kfake. Marks follow sarama's partition offset manager:
// MarkOffset only moves forward, ResetOffset only back (or in place).
type memSession struct {
	ctx    context.Context
	mu     sync.Mutex
	marked map[int32]int64
	meta   map[int32]string
	marks  int // MarkOffset and ResetOffset calls that changed something
}

// markedAt is the offset marked for partition p.
func (s *memSession) markedAt(p int32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marked[p]
}

func (s *memSession) Claims() map[string][]int32 { return nil }
func (s *memSession) MemberID() string           { return "mem" }
func (s *memSession) GenerationID() int32        { return 1 }
func (s *memSession) MarkOffset(_ string, p int32, off int64, md string) {
	s.mu.Lock()
	if off > s.marked[p] {
		s.set(p, off, md)
	}
	s.mu.Unlock()
}
func (s *memSession) ResetOffset(_ string, p int32, off int64, md string) {
	s.mu.Lock()
	if off <= s.marked[p] {
		s.set(p, off, md)
	}
	s.mu.Unlock()
}
func (s *memSession) set(p int32, off int64, md string) {
	s.marked[p] = off
	if s.meta == nil {
		s.meta = map[int32]string{}
	}
	s.meta[p] = md
	s.marks++
}
func (s *memSession) Commit() {}
func (s *memSession) MarkMessage(m *sarama.ConsumerMessage, md string) {
	s.MarkOffset(m.Topic, m.Partition, m.Offset+1, md)
}
func (s *memSession) Context() context.Context { return s.ctx }

type memClaim struct {
	p    int32
	msgs chan *sarama.ConsumerMessage
}

func (c *memClaim) Topic() string                            { return "mem" }
func (c *memClaim) Partition() int32                         { return c.p }
func (c *memClaim) InitialOffset() int64                     { return 0 }
func (c *memClaim) HighWaterMarkOffset() int64               { return 0 }
func (c *memClaim) Messages() <-chan *sarama.ConsumerMessage { return c.msgs }

var (
	_ sarama.ConsumerGroupSession = (*memSession)(nil)
	_ sarama.ConsumerGroupClaim   = (*memClaim)(nil)
)

// runMemPipeline pushes n messages over parts partitions and keys keys
// through a group's pipeline, returns once all are committed, and then
// revokes the claims and stops the workers. started is called once the
// pipeline is up (benchmarks reset their timer there); the returned
// duration runs from then until the last commit.
func runMemPipeline(tb testing.TB, cfg Config, do func(context.Context, []*Message) error, n, parts, keys int, started func()) *Group[*Message] {
	tb.Helper()
	cfg.Brokers, cfg.Topics, cfg.GroupID = []string{"mem:0"}, []string{"mem"}, "mem"
	g := newGroup(tb, cfg, do)
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	stop := startWorkers(tb, g)
	keyBytes := make([][]byte, keys)
	for i := range keyBytes {
		keyBytes[i] = fmt.Appendf(nil, "key-%d", i)
	}
	var claims, feeders sync.WaitGroup
	per := n / parts
	chans := make([]chan *sarama.ConsumerMessage, parts)
	for p := range parts {
		chans[p] = make(chan *sarama.ConsumerMessage, g.cfg.Chan)
		c := &memClaim{p: int32(p), msgs: chans[p]}
		claims.Go(func() { _ = g.consume(sess, c) })
	}
	if started != nil {
		started()
	}
	for p := range parts {
		feeders.Go(func() {
			feed(chans[p], p, per, parts, g.cfg.MaxInFlight/parts+2*g.cfg.Chan+64, keyBytes)
		})
	}
	feeders.Wait()
	// Done when every message is behind its partition's frontier (marks
	// for commit come only at commit ticks).
	for g.releasedNow() < int64(per*parts) {
		time.Sleep(20 * time.Microsecond)
	}
	if b, ok := tb.(*testing.B); ok {
		b.StopTimer()
	}
	for _, c := range chans {
		close(c)
	}
	claims.Wait()
	stop()
	return g
}

// releasedNow is how many messages are behind their claims' frontiers,
// marked for commit or not (Stats.Committed waits for a commit tick), read
// without Stats' other work (its scheduler lock would perturb the
// measurement when polled).
func (g *Group[T]) releasedNow() int64 {
	g.claimsMu.Lock()
	defer g.claimsMu.Unlock()
	var n int64
	for c := range g.claims {
		n += c.released.Load()
	}
	return n
}

// feed sends n messages of partition p from a ring of preallocated
// messages: the feeder plays sarama's part without allocating, so only the
// pipeline is measured. The pipeline copies what it needs out of a
// *sarama.ConsumerMessage when it dispatches it, and a claim may hold
// messages undispatched (out of share, or paced by the workers' backlog)
// as far as its share, Chan more out of share, and the channel (Chan): a
// slot may be reused only after those have passed it. The feeder's own
// cache misses on a ring that large are part of the measured time (a ring
// of MaxInFlight made the feeder half of it before pacing).
func feed(c chan<- *sarama.ConsumerMessage, p, n, parts, ringSize int, keys [][]byte) {
	ring := make([]sarama.ConsumerMessage, ringSize)
	for i := range ring {
		ring[i] = sarama.ConsumerMessage{Topic: "mem", Partition: int32(p)}
	}
	for i := range n {
		m := &ring[i%len(ring)]
		m.Offset, m.Key = int64(i), keys[(i*parts+p)%len(keys)]
		c <- m
	}
}

// BenchmarkPipelineBaseline is the same feed read by one plain loop per
// partition (what a raw sarama consumer does before its handler): the
// pipeline's own cost is BenchmarkPipeline minus this.
func BenchmarkPipelineBaseline(b *testing.B) {
	const parts = 8
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i)
	}
	b.ReportAllocs()
	n := max(b.N, parts)
	var wg sync.WaitGroup
	var sink atomic.Int64
	for p := range parts {
		c := make(chan *sarama.ConsumerMessage, DefaultSize)
		wg.Go(func() {
			var last int64
			for m := range c {
				last = m.Offset
			}
			sink.Add(last)
		})
		wg.Go(func() {
			feed(c, p, n/parts, parts, 2*DefaultSize+64, keys)
			close(c)
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
}

func BenchmarkPipeline(b *testing.B) {
	for _, num := range []int{1, 8, 64} {
		for _, size := range []int{1, 128, 1024} {
			b.Run(fmt.Sprintf("Num=%d/Size=%d", num, size), func(b *testing.B) {
				benchPipeline(b, Config{Num: num, Size: size, Ticker: time.Millisecond})
			})
		}
	}
}

// benchPipeline feeds b.N messages (8 partitions, 10k keys) through the
// in-memory pipeline with cfg and a no-op Do, and reports wall and process
// CPU time per message.
func benchPipeline(b *testing.B, cfg Config) {
	noop := func(context.Context, []*Message) error { return nil }
	b.ReportAllocs()
	n := max(b.N, 8)
	var cpu0 time.Duration
	runMemPipeline(b, cfg, noop, n, 8, 10000, func() {
		b.ResetTimer()
		cpu0, _ = cputime.Process()
	})
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
	// Process CPU from the start to the workers' stop (a little past the
	// timed window): steadier than wall time on a shared machine.
	b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(n), "cpu-ns/msg")
}

// BenchmarkPipelineMaxAttempts is BenchmarkPipeline at Num 8 with
// Retry.MaxAttempts set (and a DataPath for its dead letters), which makes
// the pool look for items charged past it in every batch that may hold
// one.
func BenchmarkPipelineMaxAttempts(b *testing.B) {
	for _, size := range []int{1, 1024} {
		b.Run(fmt.Sprintf("Num=8/Size=%d", size), func(b *testing.B) {
			benchPipeline(b, Config{Num: 8, Size: size, Ticker: time.Millisecond, DataPath: b.TempDir(), Retry: Retry{MaxAttempts: 3}})
		})
	}
}

// finishedAboveStuckHead pushes n messages through the in-memory pipeline
// behind one message stuck in Do, waits until all of them have finished
// and the pipeline has trimmed what it no longer needs (two commit ticks),
// and returns the heap the pipeline holds then, above what it held before
// the feed.
func finishedAboveStuckHead(tb testing.TB, n int) (heap uint64) {
	tb.Helper()
	release := make(chan struct{})
	sc := DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 20 * time.Millisecond
	g := newGroup(tb, Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Sarama: sc, Num: 8, Size: 1024, Ticker: time.Millisecond},
		func(ctx context.Context, batch []*Message) error {
			for _, m := range batch {
				if string(m.Key) == "stuck" {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
			}
			return nil
		})
	stop := startWorkers(tb, g)
	defer stop()
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	c := &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, g.cfg.Chan)}
	var claim sync.WaitGroup
	claim.Go(func() { _ = g.consume(sess, c) })
	defer func() { // unstick, then revoke: the drain then has nothing to wait for
		close(release)
		close(c.msgs)
		claim.Wait()
	}()
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i)
	}
	c.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: 0, Key: []byte("stuck")}
	waitFor(tb, 10*time.Second, "the stuck message to be in Do", func() bool { return g.sched.InFlight() == 1 })
	// Messages are reused round a ring, made before the baseline: a slot
	// comes round again only after every message the claim loop can still
	// hold has gone (its share, its undispatched FIFO and the channel).
	ring := make([]sarama.ConsumerMessage, g.cfg.MaxInFlight+2*g.cfg.Chan+64)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		m := &ring[i%len(ring)]
		*m = sarama.ConsumerMessage{Topic: "mem", Offset: int64(i + 1), Key: keys[i%len(keys)], Value: m.Value[:0]}
		c.msgs <- m
	}
	st := claimOf(g, "mem", 0)
	waitFor(tb, time.Minute, "every message above the stuck one to finish", func() bool {
		return st.fetched.Load() == int64(n+1) && st.unfinished.Load() == 1
	})
	time.Sleep(3 * sc.Consumer.Offsets.AutoCommit.Interval) // Trim keeps what the last tick's interval needed
	waitFor(tb, 10*time.Second, "the commit tick to count them", func() bool { return st.finishedAbove.Load() == int64(n) })
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ring) // in both measurements, not freed between them
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// TestFinishedAboveStuckHeadHeap: 1M finished messages above one stuck
// head cost at most 16 MiB of heap, tracker included (before, each kept
// its item and the tracker a ring slot until the head finished).
func TestFinishedAboveStuckHeadHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("1M messages")
	}
	const n = 1_000_000
	heap := finishedAboveStuckHead(t, n)
	if heap > 16<<20 {
		t.Fatalf("heap held for %d finished messages above a stuck head: got %.1f MiB, want at most 16 MiB", n, float64(heap)/(1<<20))
	}
	t.Logf("%d finished above a stuck head: %.2f MiB of heap, %.2f B/msg", n, float64(heap)/(1<<20), float64(heap)/n)
}

func BenchmarkFinishedAboveStuckHead(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		heap := finishedAboveStuckHead(b, n)
		b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(heap)/n, "heap-B/msg")
	}
}

// TestItemSize: group's pipeline item fills whole cache lines, so that
// neighbouring items (one with the claim loop, the next with a worker) do
// not share one; 256 bytes is also an allocator size class.
func TestItemSize(t *testing.T) {
	if got := unsafe.Sizeof(dispatch.Item[Message, *Message]{}); got != 256 {
		t.Fatalf("unsafe.Sizeof(dispatch.Item[Message, *Message]): got %d, want 256", got)
	}
}
