package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
)

// The measurements behind docs/SCALING.md's fleet estimates: what one
// member sends the coordinator per commit, what a lane costs in memory,
// and how long a rebalance takes (2 members at 512 partitions, 50 at
// 500), on the kfake broker.
//
//	ORDERLY_BENCH=1 go test ./internal/bench -run TestFleet -v -timeout 30m

func fleetGate(t *testing.T) {
	if os.Getenv("ORDERLY_BENCH") == "" {
		t.Skip("set ORDERLY_BENCH=1: minutes")
	}
}

// commitLog records the OffsetCommit requests the broker receives for one
// group.
type commitLog struct {
	mu   sync.Mutex
	reqs []commitReq
}

type commitReq struct {
	at         time.Time
	partitions int
	metadata   []int // bytes of metadata per partition
	bytes      int   // the request's encoded size
}

func (c *commitLog) observe(groupID string) func(*kmsg.OffsetCommitRequest) {
	return func(r *kmsg.OffsetCommitRequest) {
		if r.Group != groupID {
			return
		}
		q := commitReq{at: time.Now(), bytes: len(r.AppendTo(nil))}
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				q.partitions++
				md := 0
				if p.Metadata != nil {
					md = len(*p.Metadata)
				}
				q.metadata = append(q.metadata, md)
			}
		}
		c.mu.Lock()
		c.reqs = append(c.reqs, q)
		c.mu.Unlock()
	}
}

// summary is the commit load between the first commit and the last.
func (c *commitLog) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) < 2 {
		return fmt.Sprintf("%d commit requests", len(c.reqs))
	}
	span := c.reqs[len(c.reqs)-1].at.Sub(c.reqs[0].at).Seconds()
	var parts, bytes int
	var md []int
	for _, q := range c.reqs {
		parts += q.partitions
		bytes += q.bytes
		md = append(md, q.metadata...)
	}
	slices.Sort(md)
	sum := 0
	nonEmpty := 0
	for _, m := range md {
		sum += m
		if m > 0 {
			nonEmpty++
		}
	}
	pct := func(p float64) int { return md[min(len(md)-1, int(p*float64(len(md))))] }
	return fmt.Sprintf("%d requests over %.1fs (%.2f/s), %.0f partitions per request, %.0f request bytes on average (%.0f B/s); "+
		"metadata per partition commit: mean %.0f B, median %d, p90 %d, p99 %d, max %d; %d of %d partition commits carry metadata",
		len(c.reqs), span, float64(len(c.reqs)-1)/span, float64(parts)/float64(len(c.reqs)), float64(bytes)/float64(len(c.reqs)),
		float64(bytes)/span, float64(sum)/float64(len(md)), pct(0.5), pct(0.9), pct(0.99), md[len(md)-1], nonEmpty, len(md))
}

// detail is one line per request: when (from the first), partitions,
// bytes, partitions with metadata and the longest metadata.
func (c *commitLog) detail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b []byte
	for _, q := range c.reqs {
		n, longest := 0, 0
		for _, m := range q.metadata {
			if m > 0 {
				n++
			}
			longest = max(longest, m)
		}
		b = fmt.Appendf(b, "\n  +%.2fs: %d partitions, %d B, %d with metadata (longest %d B)",
			q.at.Sub(c.reqs[0].at).Seconds(), q.partitions, q.bytes, n, longest)
	}
	return string(b)
}

// TestFleetCommits: the commits one member sends at 512 partitions, 1 ms
// of I/O per message, Num 64, Size 1, against raw sarama's on the same
// data; and orderly with 1% of calls failing (a failed message holds its
// lane and the frontier for its 1-10 ms backoff while the others finish:
// the commits carry the finished set as metadata).
func TestFleetCommits(t *testing.T) {
	fleetGate(t)
	b, ds := testData(t, dataSpec{Messages: 200_000, Partitions: 512, Keys: 10_000})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	io := Work{PerCall: time.Millisecond}
	failing := io
	failing.FailRate = 0.01
	for _, c := range []struct {
		name string
		con  Contender
		work Work
	}{{"orderly", &Orderly{}, io}, {"raw", Raw{}, io}, {"orderly-1pct-failing", &Orderly{}, failing}} {
		spec := RunSpec{Addrs: b.Addrs(), Topic: ds.Topic, GroupID: "fleet-commits-" + c.name, Expected: ds.Messages,
			Num: 64, Size: 1, Chan: DefaultChan, Ticker: -1, Work: c.work}
		log := &commitLog{}
		b.ObserveCommits(log.observe(spec.GroupID))
		r, err := c.con.Run(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d msgs in %v (%s msg/s, %d failed calls); commits: %s%s", c.name, r.Handled, r.Elapsed.Round(time.Millisecond),
			FormatCount(r.Rate()), r.Failed, log.summary(), log.detail())
	}
}

// TestFleetLaneMemory: the heap a lane costs, from two runs of the same
// message count over 8 partitions, one with as many keys as messages
// (every lane used once, then idle) and one with a hundredth of that: the
// heap held once every message is done and a commit interval or two has
// passed (the lane sweep), the group still running, over the difference
// in keys. Two figures: what Orderly's dispatch package holds (lanes, lane
// tables, items), from the runtime's memory profile at a sampling rate of
// one (every allocation), and the whole heap, which also holds the
// in-process broker's log segments (those differ between the two data
// sets: distinct keys compress less, so they dominate the whole-heap
// difference).
func TestFleetLaneMemory(t *testing.T) {
	fleetGate(t)
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	t.Cleanup(func() { runtime.MemProfileRate = rate })
	const n = 400_000
	heap, dispatch := map[int]uint64{}, map[int]uint64{}
	for _, keys := range []int{n / 100, n} {
		b, ds := testData(t, dataSpec{Messages: n, Partitions: 8, Keys: keys})
		heap[keys], dispatch[keys] = heapWhenDone(t, b, ds)
		t.Logf("%d keys: %.1f MiB of heap with every message done, %.2f MiB of it held by orderly/dispatch", keys,
			float64(heap[keys])/(1<<20), float64(dispatch[keys])/(1<<20))
		b.Close()
	}
	per := func(m map[int]uint64) float64 { return (float64(m[n]) - float64(m[n/100])) / float64(n-n/100) }
	t.Logf("lanes: %.1f B per key held by orderly/dispatch; %.0f B per key of the whole heap (the broker's segments included) (%d keys - %d keys, over %d keys)",
		per(dispatch), per(heap), n, n/100, n-n/100)
}

// heldBy is the heap in use, as of the last completed GC, by objects
// allocated in a function of package pkg (an import path): the first
// frame of the allocation's stack outside the runtime is pkg's, from the
// runtime's memory profile, exact only when every allocation is sampled
// (runtime.MemProfileRate 1).
func heldBy(pkg string) uint64 {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	var total uint64
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, "runtime.") && more {
				continue
			}
			if strings.HasPrefix(f.Function, pkg+".") {
				total += uint64(r.InUseBytes())
			}
			break
		}
	}
	return total
}

// heapWhenDone runs a group over ds with a no-op handler and returns the
// heap in use once every message is done, the group still running, and
// the part of it allocated by orderly/dispatch (see heldBy).
func heapWhenDone(t *testing.T, b *broker.Broker, ds *dataset) (heap, dispatch uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{ds.Topic}, GroupID: "fleet-lanes-" + ds.Topic,
		Sarama: SaramaConfig(DefaultChan), Num: 8, Size: 1024, Ticker: time.Millisecond,
	}, group.Handler[*group.Message]{Do: func(_ context.Context, batch []*group.Message) error {
		if done.Add(int64(len(batch))) == int64(ds.Messages) {
			close(all)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- g.Run(runCtx) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("handled %d of %d", done.Load(), ds.Messages)
	}
	time.Sleep(2 * time.Second) // the last completions taken back, a commit tick or two
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	dispatch = heldBy("github.com/orderly-go/orderly/dispatch")
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return ms.HeapAlloc, dispatch
}

// TestFleetRebalance: how long a rebalance takes at 512 partitions when a
// second member joins a member busy with a backlog (1 ms per message, Num
// 64), from the second member's Run to the moment both hold partitions
// and together all 512, cooperative-sticky (Orderly's default) against
// eager (range); and the first member's own join. Three tries each, in
// alternating order, each with a fresh group.
func TestFleetRebalance(t *testing.T) {
	fleetGate(t)
	const parts = 512
	b, ds := testData(t, dataSpec{Messages: 300_000, Partitions: parts, Keys: 10_000})
	for try := range 6 {
		strategy := []string{"cooperative-sticky", "range (eager)"}[try%2]
		sc := func() *sarama.Config {
			c := SaramaConfig(DefaultChan)
			if strategy != "cooperative-sticky" {
				c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
			}
			return c
		}
		groupID := fmt.Sprintf("fleet-rebalance-%s-%d", strategy[:5], try)
		newMember := func() *group.Group[*group.Message] {
			g, err := group.New(group.Config{
				Brokers: b.Addrs(), Topics: []string{ds.Topic}, GroupID: groupID, Sarama: sc(),
				Num: 64, Size: 1, Ticker: -1,
			}, group.Handler[*group.Message]{Do: func(context.Context, []*group.Message) error {
				time.Sleep(time.Millisecond)
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		start := func(g *group.Group[*group.Message]) {
			wg.Go(func() {
				if err := g.Run(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		until := func(what string, ok func() bool) time.Duration {
			t0 := time.Now()
			for !ok() {
				if time.Since(t0) > 2*time.Minute {
					t.Fatalf("%s: %s: not within 2 min", strategy, what)
				}
				time.Sleep(5 * time.Millisecond)
			}
			return time.Since(t0)
		}
		a := newMember()
		start(a)
		join := until("the first member's join", func() bool {
			return a.Stats().Partitions == parts && a.Stats().Handled > 0
		})
		time.Sleep(2 * time.Second) // busy with the backlog
		m2 := newMember()
		start(m2)
		rebalance := until("the second member's share", func() bool {
			sa, sb := a.Stats(), m2.Stats()
			return sa.Partitions > 0 && sb.Partitions > 0 && sa.Partitions+sb.Partitions == parts && sb.Handled > 0
		})
		t.Logf("%s, %d partitions: first member joined and handling in %v; a second member joining a busy one: both handling, %d + %d partitions, after %v",
			strategy, parts, join.Round(time.Millisecond), a.Stats().Partitions, m2.Stats().Partitions, rebalance.Round(time.Millisecond))
		cancel()
		wg.Wait()
	}
}

// TestFleetRebalance50: 50 in-process members sharing 500 partitions, each
// busy (Num 4, 10 ms per message): how long the group takes to settle
// when all 50 start at once, then when one leaves gracefully, and when it
// comes back, until every live member holds partitions, together all 500,
// and the member that changed handles messages again; cooperative-sticky
// against eager (range).
func TestFleetRebalance50(t *testing.T) {
	fleetGate(t)
	const parts, members = 500, 50
	b, ds := testData(t, dataSpec{Messages: 400_000, Partitions: parts, Keys: 10_000})
	for _, strategy := range []string{"cooperative-sticky", "range (eager)"} {
		groupID := "fleet-rebalance50-" + strategy[:5]
		newMember := func() *group.Group[*group.Message] {
			sc := SaramaConfig(DefaultChan)
			if strategy != "cooperative-sticky" {
				sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
			}
			g, err := group.New(group.Config{
				Brokers: b.Addrs(), Topics: []string{ds.Topic}, GroupID: groupID, Sarama: sc,
				Num: 4, Size: 1, Ticker: -1,
			}, group.Handler[*group.Message]{Do: func(context.Context, []*group.Message) error {
				time.Sleep(10 * time.Millisecond)
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		type member struct {
			g      *group.Group[*group.Message]
			cancel context.CancelFunc
			done   chan struct{}
		}
		start := func() *member {
			ctx, cancel := context.WithCancel(context.Background())
			m := &member{g: newMember(), cancel: cancel, done: make(chan struct{})}
			go func() {
				defer close(m.done)
				if err := m.g.Run(ctx); err != nil {
					t.Error(err)
				}
			}()
			return m
		}
		settled := func(ms []*member) bool {
			var sum int64
			for _, m := range ms {
				p := m.g.Stats().Partitions
				if p == 0 {
					return false
				}
				sum += p
			}
			return sum == parts
		}
		until := func(what string, ok func() bool) time.Duration {
			t0 := time.Now()
			for !ok() {
				if time.Since(t0) > 3*time.Minute {
					t.Fatalf("%s: %s: not within 3 min", strategy, what)
				}
				time.Sleep(10 * time.Millisecond)
			}
			return time.Since(t0)
		}
		ms := make([]*member, members)
		for i := range ms {
			ms[i] = start()
		}
		all := until("50 members starting at once", func() bool { return settled(ms) })
		time.Sleep(2 * time.Second)
		last := ms[members-1]
		t0 := time.Now()
		last.cancel()
		<-last.done
		leftIn := time.Since(t0)
		rest := ms[:members-1]
		leave := until("one member leaving", func() bool { return settled(rest) }) + leftIn
		time.Sleep(2 * time.Second)
		back := start()
		ms[members-1] = back
		join := until("the member coming back", func() bool { return settled(ms) && back.g.Stats().Handled > 0 })
		t.Logf("%s, %d partitions, %d members: all starting at once settled in %v; one leaving (its Run returned in %v): the other %d hold all after %v; it coming back: settled and handling after %v",
			strategy, parts, members, all.Round(time.Millisecond), leftIn.Round(time.Millisecond), members-1, leave.Round(time.Millisecond), join.Round(time.Millisecond))
		for _, m := range ms {
			m.cancel()
		}
		for _, m := range ms {
			<-m.done
		}
	}
}
