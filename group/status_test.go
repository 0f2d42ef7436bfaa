package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest/observer"
)

// frontier is the first offset of part that no Do call has finished.
func (r *rig) frontier(part int32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fin := r.finished[part]; fin != nil {
		return fin.prefix
	}
	return 0
}

// statusConfig is the rig's config with statuses evaluated over 5 commit
// intervals of 100ms, read back every 200ms.
func statusConfig(r *rig, groupID string) Config {
	cfg := r.config(groupID)
	cfg.Status = StatusConfig{Window: 5, StuckHead: 300 * time.Millisecond, ReadBack: 200 * time.Millisecond}
	return cfg
}

// partitionStats returns g's stats of partition part, if claimed.
func partitionStats[T any](g *Group[T], part int32) (PartitionStats, bool) {
	for _, ps := range g.Stats().PartitionStats {
		if ps.Partition == part {
			return ps, true
		}
	}
	return PartitionStats{}, false
}

// waitStatus waits until partition part shows code, and returns its stats.
func waitStatus[T any](t *testing.T, g *Group[T], part int32, code Status, timeout time.Duration) PartitionStats {
	t.Helper()
	return waitStatusReason(t, g, part, code, "", timeout)
}

// waitStatusReason waits until partition part shows code with a reason
// that contains reason, and returns its stats.
func waitStatusReason[T any](t *testing.T, g *Group[T], part int32, code Status, reason string, timeout time.Duration) PartitionStats {
	t.Helper()
	var last PartitionStats
	deadline := time.Now().Add(timeout)
	for {
		ps, ok := partitionStats(g, part)
		if ok && ps.Status.Code == code && strings.Contains(ps.Status.Reason, reason) {
			return ps
		}
		last = ps
		if time.Now().After(deadline) {
			t.Fatalf("partition %d status: got %v (%s), want %v naming %q within %v", part, last.Status.Code, last.Status.Reason, code, reason, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// commitWatch counts the OffsetCommit requests the broker receives for
// one partition, by offset.
type commitWatch struct {
	mu      sync.Mutex
	offsets []int64
}

func watchCommits(r *rig, part int32) *commitWatch {
	w := &commitWatch{}
	r.b.ObserveCommits(func(req *kmsg.OffsetCommitRequest) {
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				if t.Topic == r.topic && p.Partition == part {
					w.mu.Lock()
					w.offsets = append(w.offsets, p.Offset)
					w.mu.Unlock()
				}
			}
		}
	})
	return w
}

func (w *commitWatch) since(n int) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int64(nil), w.offsets[min(n, len(w.offsets)):]...)
}

func (w *commitWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.offsets)
}

// TestStatusStall: a stuck head with lag. Orderly commits the unmoved
// frontier at every interval, so the broker keeps receiving commits at the
// same offset (what Burrow calls STALL), and Orderly's own status is STALL
// too, naming the stuck offset once the head has been stuck for
// StuckHead (the committed offset can stand still for the status window
// before the first fetch arrives, and then there is no head to name yet);
// once released the partition catches up and is OK.
func TestStatusStall(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "stall", 1, 2000, 20)
	w := r.work(0, 0)
	watch := watchCommits(r, 0)
	do, stuck, release := stuckDo(func(m *Message) bool { return m.Offset == 0 }, w.Do)
	cfg := statusConfig(r, "stall")
	cfg.Size, cfg.Num = 1, 4
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	defer release()
	<-stuck
	ps := waitStatusReason(t, g, 0, StatusStall, "stuck head at offset 0", 30*time.Second)
	if ps.Frontier != 0 || ps.Lag != 2000 || ps.InFlight == 0 || ps.OldestUnfinished < cfg.Status.StuckHead {
		t.Fatalf("stalled partition: got frontier %d lag %d in flight %d oldest unfinished %v, want 0, 2000, > 0, >= %v",
			ps.Frontier, ps.Lag, ps.InFlight, ps.OldestUnfinished, cfg.Status.StuckHead)
	}
	if s := g.Stats().Status; s.Code != StatusStall || !strings.HasPrefix(s.Reason, "stall/0: ") {
		t.Fatalf("group status: got %v %q, want STALL naming stall/0", s.Code, s.Reason)
	}
	// What the broker sees: commits keep coming, all at offset 0.
	n := watch.count()
	waitFor(t, 10*time.Second, "3 more commits of partition 0", func() bool { return watch.count() >= n+3 })
	for _, off := range watch.since(n) {
		if off != 0 {
			t.Fatalf("commit while stuck: got offset %d, want 0", off)
		}
	}
	waitFor(t, 10*time.Second, "the read-back to see offset 0 committed", func() bool {
		ps, _ := partitionStats(g, 0)
		return ps.Committed == 0 && !ps.CommittedAt.IsZero()
	})
	release()
	r.waitAllCommitted("stall", time.Minute)
	ps = waitStatus(t, g, 0, StatusOK, 10*time.Second)
	waitFor(t, 10*time.Second, "the read-back to see offset 2000 committed", func() bool {
		ps, _ := partitionStats(g, 0)
		return ps.Committed == 2000
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
}

// TestStatusStop: Pause with lag. No commit reaches the broker while
// paused (what Burrow calls STOP) and Orderly's status is STOP; after
// Resume the partition catches up and is OK.
func TestStatusStop(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "stop", 1, 3000, 20)
	w := r.work(0, 0)
	watch := watchCommits(r, 0)
	cfg := statusConfig(r, "stop")
	cfg.Size, cfg.Num = 1, 1
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		time.Sleep(time.Millisecond)
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, 30*time.Second, "some progress", func() bool { return r.b.Committed("stop", r.topic)[0] >= 200 })
	g.Pause()
	ps := waitStatus(t, g, 0, StatusStop, 30*time.Second)
	if !strings.Contains(ps.Status.Reason, "no commit for") || ps.Lag == 0 {
		t.Fatalf("STOP: got reason %q lag %d, want 'no commit for' and lag above 0", ps.Status.Reason, ps.Lag)
	}
	n := watch.count()
	time.Sleep(500 * time.Millisecond)
	if got := watch.since(n); len(got) != 0 {
		t.Fatalf("commits while paused: got %v, want none", got)
	}
	g.Resume()
	r.waitAllCommitted("stop", time.Minute)
	waitStatus(t, g, 0, StatusOK, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
}

// TestStatusWarn: messages produced faster than Do handles them. The
// committed offset moves (the broker's commits grow) but lag grows at
// every interval: WARN.
func TestStatusWarn(t *testing.T) {
	r := newRig(t, "warn", 1, 40_000, 20)
	w := r.work(0, 0)
	cfg := statusConfig(r, "warn")
	cfg.Size, cfg.Num, cfg.MaxInFlight = 1, 1, 1<<20
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		time.Sleep(2 * time.Millisecond)
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	produced := make(chan struct{})
	go func() { // about 4000 a second, against Do's 500
		defer close(produced)
		for i := 0; i < 40_000 && ctx.Err() == nil; i += 40 {
			r.produce(i, i+40)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-produced }()
	ps := waitStatus(t, g, 0, StatusWarn, 30*time.Second)
	if !strings.Contains(ps.Status.Reason, "lag grew") {
		t.Fatalf("WARN reason: got %q, want 'lag grew ...'", ps.Status.Reason)
	}
	a := r.b.Committed("warn", r.topic)[0]
	time.Sleep(300 * time.Millisecond)
	if b := r.b.Committed("warn", r.topic)[0]; b <= a {
		t.Fatalf("broker's committed offset while WARN: got %d then %d, want it moving", a, b)
	}
	cancel()
	<-produced
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestStatusRewind: a group runs to the end of its partition and stops;
// its offsets are reset below (the group being empty, as Kafka requires);
// the same consumer restarted with the same DataPath finds the committed
// offset below the one it saw committed, and shows REWIND until the
// rewind leaves the window.
func TestStatusRewind(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "rewind", 1, 1000, 10)
	w := r.work(0, 0)
	cfg := statusConfig(r, "rewind")
	cfg.DataPath = t.TempDir()
	first := newGroup(t, cfg, w.Do)
	stop := run(t, first)
	r.waitAllCommitted("rewind", time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The committed offset seen is on disk.
	b, err := os.ReadFile(filepath.Join(cfg.DataPath, historyFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec historyRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if got := rec.Offsets["rewind"]["0"]; rec.Group != "rewind" || got != 1000 {
		t.Fatalf("%s: got group %q offset %d, want group rewind offset 1000", historyFile, rec.Group, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.b.ResetCommitted(ctx, "rewind", "rewind", map[int32]int64{0: 100}); err != nil {
		t.Fatal(err)
	}
	if got := r.b.Committed("rewind", r.topic)[0]; got != 100 {
		t.Fatalf("after the reset: got committed %d, want 100", got)
	}
	second := newGroup(t, cfg, r.work(1, 0).Do)
	stop = run(t, second)
	ps := waitStatus(t, second, 0, StatusRewind, 30*time.Second)
	if want := "went back from 1000 (last seen) to 100"; !strings.Contains(ps.Status.Reason, want) {
		t.Fatalf("REWIND reason: got %q, want it to contain %q", ps.Status.Reason, want)
	}
	r.waitAllCommitted("rewind", time.Minute)
	waitStatus(t, second, 0, StatusOK, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestHealth: Ready is false before the join and after Run; Live fails
// while a worker is stuck past MsgTimeout plus its grace, and recovers
// when the call returns.
func TestHealth(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "health", 2, 500, 10)
	w := r.work(0, 0)
	release := make(chan struct{})
	var stuckOnce atomic.Bool
	cfg := r.config("health")
	cfg.Size, cfg.Num, cfg.MsgTimeout = 1, 4, 200*time.Millisecond
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		if batch[0].Offset == 10 && batch[0].Partition == 0 && !stuckOnce.Swap(true) {
			<-release // ignores ctx: stuck past MsgTimeout and grace
		}
		return w.Do(ctx, batch)
	})
	if ready, why := g.Readiness(); ready || why != "not joined yet" {
		t.Fatalf("Readiness before Run: got %v %q, want false, not joined yet", ready, why)
	}
	stop := run(t, g)
	waitFor(t, 30*time.Second, "Ready", g.Ready)
	if ready, why := g.Readiness(); !ready || why != "" {
		t.Fatalf("Readiness once joined: got %v %q, want true, no reason", ready, why)
	}
	waitFor(t, 30*time.Second, "Live to fail on the stuck worker", func() bool { ok, _ := g.Live(); return !ok })
	ok, why := g.Live()
	if ok || !strings.Contains(why, "1 workers stuck in Do") {
		t.Fatalf("Live while stuck: got %v %q, want false naming 1 stuck worker", ok, why)
	}
	stuck := 0
	for _, ws := range g.Stats().Workers {
		if ws.Stuck {
			stuck++
			if !ws.Busy || ws.BatchAge < cfg.MsgTimeout {
				t.Fatalf("stuck worker: got busy %v batch age %v, want busy and at least %v", ws.Busy, ws.BatchAge, cfg.MsgTimeout)
			}
		}
	}
	if stuck != 1 {
		t.Fatalf("stuck workers in Stats: got %d, want 1", stuck)
	}
	close(release)
	waitFor(t, 30*time.Second, "Live to recover", func() bool { ok, _ := g.Live(); return ok })
	r.waitAllCommitted("health", time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ready, why := g.Readiness(); ready || why != "stopped: Run returned" {
		t.Fatalf("Readiness after Run returned: got %v %q, want false, stopped", ready, why)
	}
}

// TestReadyFalseWhileStopping: Ready turns false as soon as Run's ctx
// ends, while a partition's drain still waits on a hung call and Run has
// not returned (a readiness probe should take a member on its way out out
// of service), not only once Run returns.
func TestReadyFalseWhileStopping(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "readystop", 1, 200, 20)
	w := r.work(0, 0)
	do, stuck, release := stuckDo(func(m *Message) bool { return m.Offset == 0 }, w.Do)
	defer release()
	cfg := statusConfig(r, "readystop")
	cfg.Size, cfg.Num, cfg.DrainTimeout = 1, 4, 9*time.Second
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	<-stuck
	waitFor(t, 30*time.Second, "Ready", g.Ready)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, 5*time.Second, "Ready to turn false once Run's ctx ended", func() bool { return !g.Ready() })
	if _, why := g.Readiness(); !strings.HasPrefix(why, "stopping") {
		t.Errorf("Readiness while draining: got %q, want it to say stopping", why)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a call hung: the test needs it still draining", err)
	default:
	}
	release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if g.Ready() {
		t.Fatal("Ready after Run returned: got true, want false")
	}
}

// callbackLog records OnAssigned, OnRevoked and OnLost calls.
type callbackLog struct {
	mu     sync.Mutex
	events []string
	gens   map[string][]int32
}

func (l *callbackLog) install(cfg *Config, also func(kind string, parts []int32, gen int32)) {
	l.gens = map[string][]int32{}
	rec := func(kind string) func(string, []int32, int32) {
		return func(topic string, parts []int32, gen int32) {
			if also != nil {
				also(kind, parts, gen)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, p := range parts {
				l.events = append(l.events, fmt.Sprintf("%s %s/%d", kind, topic, p))
			}
			l.gens[kind] = append(l.gens[kind], gen)
		}
	}
	cfg.OnAssigned, cfg.OnRevoked, cfg.OnLost = rec("assigned"), rec("revoked"), rec("lost")
}

func (l *callbackLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if strings.HasPrefix(e, kind+" ") {
			n++
		}
	}
	return n
}

// TestCallbacksReadBackRetried: the read-back that confirms a claim's
// final commit is refused once when the member stops; it is read again
// (Sarama.Metadata.Retry), and the partition is revoked (OnRevoked), not
// lost.
func TestCallbacksReadBackRetried(t *testing.T) {
	t.Parallel() // waits on the broker mostly
	r := newRig(t, "readback-retry", 1, 200, 10)
	var log callbackLog
	cfg := r.config("readback-retry")
	cfg.Status.ReadBack = -1 // the final read-back is the only read after the claim's start
	cfg.Sarama.Metadata.Retry.Max, cfg.Sarama.Metadata.Retry.Backoff = 2, 50*time.Millisecond
	log.install(&cfg, nil)
	g := newGroup(t, cfg, r.work(0, 0).Do)
	stop := run(t, g)
	r.waitAllCommitted("readback-retry", time.Minute)
	refused := refuseClaimReads(r, func(n int32) bool { return n == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := refused.Load(); got != 1 {
		t.Fatalf("read-backs refused: got %d, want 1", got)
	}
	if rv, lost := log.count("revoked"), log.count("lost"); rv != 1 || lost != 0 {
		t.Fatalf("at the stop: got OnRevoked %d, OnLost %d; want 1 and 0", rv, lost)
	}
	r.check(false)
}

// TestCallbacksGraceful: OnAssigned on joining with the session's
// generation; a second member joining makes the first give up partitions
// gracefully: OnRevoked, by which time the broker holds the final
// frontier (every message below it handled). The second member, which
// gets its partitions in a later round of the cooperative rebalance than
// its join, is told of each.
func TestCallbacksGraceful(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	const parts = 4
	r := newRig(t, "callbacks", parts, 4000, 40)
	w := r.work(0, 0)
	var log callbackLog
	var mismatch atomic.Value
	cfg := r.config("callbacks")
	cfg.Size, cfg.Num = 8, 4
	log.install(&cfg, func(kind string, ps []int32, gen int32) {
		if kind != "revoked" {
			return
		}
		for _, p := range ps {
			committed, frontier := r.b.Committed("callbacks", r.topic)[p], r.frontier(p)
			if committed != frontier {
				mismatch.Store(fmt.Errorf("partition %d: broker committed %d, frontier of handled messages %d", p, committed, frontier))
			}
		}
	})
	first := newGroup(t, cfg, func(ctx context.Context, b []*Message) error {
		time.Sleep(time.Millisecond) // still working when the second joins
		return w.Do(ctx, b)
	})
	stop1 := run(t, first)
	waitFor(t, 30*time.Second, "the first member to be assigned every partition", func() bool { return log.count("assigned") == parts })
	cfg2 := cfg
	var log2 callbackLog
	log2.install(&cfg2, nil)
	second := newGroup(t, cfg2, r.work(1, 0).Do)
	stop2 := run(t, second)
	waitFor(t, 30*time.Second, "the first member to give up partitions", func() bool { return log.count("revoked") > 0 })
	waitFor(t, 30*time.Second, "the second member to be told of what it holds", func() bool {
		held := second.Stats().Partitions
		return held > 0 && int64(log2.count("assigned")) == held
	})
	r.waitAllCommitted("callbacks", time.Minute)
	if err := errors.Join(stop2(), stop1()); err != nil {
		t.Fatal(err)
	}
	if m := mismatch.Load(); m != nil {
		t.Fatalf("at OnRevoked: %v", m)
	}
	if n := log.count("lost"); n != 0 {
		t.Fatalf("OnLost: got %d calls in a graceful handoff, want 0", n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if g := log.gens["assigned"]; g[0] <= 0 {
		t.Fatalf("OnAssigned generation: got %v, want above 0", g)
	}
	r.check(true)
}

// TestCallbacksLost: the member's connection stalls past the session
// timeout (its heartbeats and commits held by the broker), so the
// coordinator evicts it. When the stall ends its commits are refused: the
// partitions are lost, not revoked. OnLost is called while Live (with
// LostAfter tiny) and Ready say so, the broker holds less than the final
// frontier, and the member rejoins with a new generation.
func TestCallbacksLost(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "lost", 2, 8000, 40)
	r.mu.Lock()
	r.refusedCommits = true // the evicted member's
	r.mu.Unlock()
	w := r.work(0, 0)
	var log callbackLog
	type lostState struct {
		ready, live         bool
		why, readyWhy       string
		committed, frontier int64
	}
	var inLost atomic.Pointer[lostState]
	cfg := r.config("lost")
	cfg.Size, cfg.Num = 1, 2
	cfg.Status.LostAfter = time.Nanosecond
	var g *Group[*Message]
	log.install(&cfg, func(kind string, ps []int32, gen int32) {
		if kind != "lost" {
			return
		}
		st := &lostState{}
		st.ready, st.readyWhy = g.Readiness()
		st.live, st.why = g.Live()
		st.committed, st.frontier = r.b.Committed("lost", r.topic)[ps[0]], r.frontier(ps[0])
		inLost.CompareAndSwap(nil, st)
	})
	g = newGroup(t, cfg, func(ctx context.Context, b []*Message) error {
		time.Sleep(time.Millisecond)
		return w.Do(ctx, b)
	})
	stop := run(t, g)
	waitFor(t, 30*time.Second, "both partitions assigned", func() bool { return log.count("assigned") == 2 })
	waitFor(t, 30*time.Second, "some commits", func() bool { return r.b.Committed("lost", r.topic)[0] > 0 })
	stall := make(chan struct{})
	r.b.StallHeartbeat(func() { <-stall })
	time.AfterFunc(cfg.Sarama.Consumer.Group.Session.Timeout+2*time.Second, func() { close(stall) })
	waitFor(t, time.Minute, "OnLost", func() bool { return log.count("lost") > 0 })
	st := inLost.Load()
	if st.ready || st.live || !strings.HasPrefix(st.why, "group session lost") || !strings.HasPrefix(st.readyWhy, "group session lost") {
		t.Fatalf("in OnLost: got ready %v (%q) live %v (%q), want both false, the session lost", st.ready, st.readyWhy, st.live, st.why)
	}
	if st.committed >= st.frontier {
		t.Fatalf("in OnLost: the broker holds %d, the handled frontier is %d: want less (the final commit was refused)", st.committed, st.frontier)
	}
	t.Logf("in OnLost: broker committed %d, handled frontier %d", st.committed, st.frontier)
	waitFor(t, time.Minute, "the member to be assigned again", func() bool { return log.count("assigned") > 2 })
	waitFor(t, 10*time.Second, "Ready again", g.Ready)
	r.waitAllCommitted("lost", 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	gens := log.gens["assigned"]
	log.mu.Unlock()
	if gens[len(gens)-1] <= gens[0] {
		t.Fatalf("generations assigned: got %v, want the last above the first", gens)
	}
	r.check(true)
}

// TestReadyIgnoresStaleSessionErrors: sarama's error channel is read by a
// goroutine of its own, so an old generation's refused commit
// (ILLEGAL_GENERATION) can be read after the member has joined again. It
// must not mark the current session lost: only a claim that ends with its
// final commit refused does (released, before the next session starts).
func TestReadyIgnoresStaleSessionErrors(t *testing.T) {
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, GroupID: "stale"}
	g := newGroup(t, cfg, func(context.Context, []*Message) error { return nil })
	g.joined.Store(true) // as sessionStarted leaves it
	for _, err := range []error{
		&sarama.ConsumerError{Topic: "t", Partition: 0, Err: sarama.ErrIllegalGeneration},
		sarama.ErrUnknownMemberId,
	} {
		if g.consumerError(err); !g.Ready() {
			t.Fatalf("after a consumer error %v read in the new session: got Ready false, want true", err)
		}
	}
}

// TestStatusNamesOnlyItsStuckWorkers: a partition's status reason names
// the stuck workers whose call holds its messages, not every stuck worker
// of the group. Partition 0's call hangs past MsgTimeout; Pause then makes
// both partitions STOP (lag, no commits): only partition 0's reason names
// a stuck worker.
func TestStatusNamesOnlyItsStuckWorkers(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "named", 2, 2000, 10)
	w := r.work(0, 0)
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	var stuckOnce atomic.Bool
	paused := make(chan struct{})
	cfg := statusConfig(r, "named")
	cfg.Size, cfg.Num, cfg.MsgTimeout = 1, 4, 200*time.Millisecond
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		switch {
		case batch[0].Partition == 0 && batch[0].Offset == 10 && !stuckOnce.Swap(true):
			<-release // ignores ctx: stuck past MsgTimeout and grace
		case batch[0].Partition == 1 && batch[0].Offset == 999:
			// Partition 1 keeps lag through the pause, however fast the
			// rest runs: its last message fails (on its ctx, so it is
			// not stuck) until the test has seen its STOP.
			select {
			case <-paused:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return w.Do(ctx, batch)
	})
	stop := run(t, g)
	waitFor(t, 30*time.Second, "a stuck worker", func() bool { return g.Stats().StuckWorkers == 1 })
	g.Pause()
	p0 := waitStatus(t, g, 0, StatusStop, 30*time.Second)
	p1 := waitStatus(t, g, 1, StatusStop, 30*time.Second)
	close(paused)
	if !strings.Contains(p0.Status.Reason, "1 worker stuck on it") {
		t.Fatalf("partition 0 reason: got %q, want it to name its stuck worker", p0.Status.Reason)
	}
	if strings.Contains(p1.Status.Reason, "stuck on it") {
		t.Fatalf("partition 1 reason: got %q, want no stuck worker (the stuck call holds only partition 0's message)", p1.Status.Reason)
	}
	close(release)
	g.Resume()
	r.waitAllCommitted("named", time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptHistoryIgnored: a committed-offsets.json that does not decode
// only costs the REWIND check across that restart: Run goes on (warning,
// counted), consumes everything, and saves a record that decodes.
func TestCorruptHistoryIgnored(t *testing.T) {
	t.Parallel()
	r := newRig(t, "history", 1, 500, 10)
	w := r.work(0, 0)
	cfg := statusConfig(r, "history")
	cfg.DataPath = t.TempDir()
	path := filepath.Join(cfg.DataPath, historyFile)
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs *observer.ObservedLogs
	cfg.Logger, logs = observed()
	g := newGroup(t, cfg, w.Do)
	stop := run(t, g)
	r.waitAllCommitted("history", time.Minute)
	waitFor(t, 10*time.Second, "a record that decodes", func() bool {
		b, err := os.ReadFile(path)
		var rec historyRecord
		return err == nil && json.Unmarshal(b, &rec) == nil && rec.Offsets["history"]["0"] == 500
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: got %v, want nil (a corrupt %s is not fatal)", err, historyFile)
	}
	if logs.FilterMessage("ignoring the committed offsets seen before this start: a rewind across it goes unseen").Len() != 1 {
		t.Fatalf("warnings about %s: got %d, want 1", historyFile, logs.FilterMessage("ignoring the committed offsets seen before this start: a rewind across it goes unseen").Len())
	}
	if st := g.Stats(); st.ErrorsBy.Offsets != 1 {
		t.Fatalf("Stats.ErrorsBy.Offsets: got %d, want 1", st.ErrorsBy.Offsets)
	}
}

// TestStatusStopWithoutAnyCommit: a claim that has never committed (it
// left the previous owner's unread metadata in place) is STOP once
// StopAfter has passed since it started, although no window of samples
// is that long (Window intervals span one interval less than StopAfter's
// default).
func TestStatusStopWithoutAnyCommit(t *testing.T) {
	const window, interval = 10, 100 * time.Millisecond
	var v partitionView
	v.init(window)
	t0 := time.Now()
	for i := range 2 * window {
		at := t0.Add(time.Duration(i) * interval)
		got := v.observe(sample{at: at, offset: 5, lag: 100}, window*interval)
		want := StatusOK
		switch {
		case at.Sub(t0) > window*interval:
			want = StatusStop
		case i >= window-1:
			want = StatusStall // a full window, the offset not moving: no sign yet that nothing commits
		}
		if got.Code != want {
			t.Fatalf("interval %d (%v in): got %v (%s), want %v", i, at.Sub(t0), got.Code, got.Reason, want)
		}
	}
}

// TestStatusDuringDrain: while a partition's drain waits on a hung call
// (here at shutdown, DrainTimeout 9s), its status goes on being worked
// out: STOP (the drain commits nothing) naming the stuck head, not the OK
// it had when the drain began. The status stood still at OK for the whole
// drain.
func TestStatusDuringDrain(t *testing.T) {
	t.Parallel() // waits on timers mostly: runs beside the others
	r := newRig(t, "drainstatus", 1, 200, 20)
	w := r.work(0, 0)
	do, stuck, release := stuckDo(func(m *Message) bool { return m.Offset == 0 }, w.Do)
	defer release()
	cfg := statusConfig(r, "drainstatus")
	cfg.Size, cfg.Num, cfg.DrainTimeout = 1, 4, 9*time.Second
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	<-stuck
	if ps, _ := partitionStats(g, 0); ps.Status.Code != StatusOK {
		t.Fatalf("status as the drain begins: got %v (%s), want OK (the test needs the status to change during the drain)", ps.Status.Code, ps.Status.Reason)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, 8*time.Second, "the draining partition's status to name its stuck head", func() bool {
		ps, ok := partitionStats(g, 0)
		return ok && ps.Status.Code == StatusStop && strings.Contains(ps.Status.Reason, "stuck head at offset 0")
	})
	release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// TestReadinessReasons: Readiness's answer for each state it tells apart,
// set by hand on a group that never runs; Ready agrees with it.
func TestReadinessReasons(t *testing.T) {
	id, failure := "m-1", "kafka: client has run out of available brokers to talk to"
	tests := []struct {
		name   string
		set    func(g *Group[*Message])
		ready  bool
		reason string // its start
	}{
		{"new", func(g *Group[*Message]) {}, false, "not joined yet"},
		{"first join failed", func(g *Group[*Message]) { g.joinFailure.Store(&failure) }, false, "not joined yet: the join failed: " + failure + "; retrying"},
		{"joined", func(g *Group[*Message]) { g.joined.Store(true); g.memberID.Store(&id) }, true, ""},
		{"rejoin failed", func(g *Group[*Message]) { g.memberID.Store(&id); g.joinFailure.Store(&failure) }, false, "out of the group: a rejoin failed: " + failure + "; retrying"},
		{"session lost", func(g *Group[*Message]) {
			g.joined.Store(true)
			g.memberID.Store(&id)
			g.lostAt.Store(time.Now().Add(-2 * time.Second).UnixNano())
		}, false, "group session lost 2s ago"},
		{"stopping", func(g *Group[*Message]) { g.joined.Store(true); g.memberID.Store(&id); close(g.stopping) }, false, "stopping: "},
		{"stopped", func(g *Group[*Message]) { close(g.stopping); g.runDone.Store(true) }, false, "stopped: Run returned"},
		{"stopped before it joined", func(g *Group[*Message]) { g.runDone.Store(true) }, false, "stopped: Run returned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := offlineGroup(t, func(*Config) {})
			tt.set(g)
			ready, why := g.Readiness()
			if ready != tt.ready || !strings.HasPrefix(why, tt.reason) || tt.reason == "" && why != "" {
				t.Fatalf("got %v %q, want %v %q", ready, why, tt.ready, tt.reason)
			}
			if g.Ready() != ready {
				t.Fatalf("Ready: got %v, want %v as Readiness says", g.Ready(), ready)
			}
		})
	}
}
