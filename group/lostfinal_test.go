package group

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/commit"
)

// A member whose session ends while the coordinator refuses its commits
// loses its final commits (OnLost); it joins again and is given the same
// partitions, and starts them from what it finished rather than from the
// older offset the coordinator holds: nothing is handled twice. The
// oracle checks every commit the broker received and what Do saw.
func TestLostFinalCommitResumedBySameMember(t *testing.T) {
	const partitions, n, keys = 2, 3000, 60
	r, o := oracleRig(t, "lost final commit, same member", "lost-final", partitions, n, keys)
	produced := r.produceAtRate(2000)
	cfg := r.config("lost-final")
	cfg.Size, cfg.Num = 4, 2
	var lost atomic.Int64
	cfg.OnLost = func(_ string, parts []int32, _ int32) { lost.Add(int64(len(parts))) }
	m := &member{tag: "m", o: o, delay: time.Millisecond}
	stop := m.start(t, cfg)
	waitFor(t, 30*time.Second, "the first commits", func() bool { return len(r.b.Committed(cfg.GroupID, r.topic)) == partitions })

	c := r.b.Cluster()
	refuse := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: cfg.GroupID, Err: kerr.CoordinatorLoadInProgress, Count: -1})
	waitFor(t, 30*time.Second, "commits refused", func() bool { return refuse.Hits() >= 3 })
	before := r.b.Committed(cfg.GroupID, r.topic)
	// The session ends: sarama ends it on a heartbeat error it has no
	// case for (a rebalance would not do: under cooperative-sticky the
	// member keeps its claims through it).
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: cfg.GroupID, Err: kerr.UnknownServerError})
	waitFor(t, 30*time.Second, "both final commits lost", func() bool { return lost.Load() >= partitions })
	refuse.Remove()
	produced()
	v := r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := m.g.Load().Stats()
	if st.Resumed == 0 {
		t.Errorf("Stats.Resumed: got 0 after the claims resumed from their own lost frontier, want > 0")
	}
	// Each record was marked once behind the frontier: the messages
	// below the lost frontier count under the lost claim, not again under
	// the claim that skipped them.
	var records int64
	for _, hw := range r.b.HighWatermarks(r.topic) {
		records += hw
	}
	if st.Committed != records {
		t.Errorf("Stats.Committed: got %d, want %d (the topic's records, each committed once; Resumed %d)", st.Committed, records, st.Resumed)
	}
	t.Logf("offsets the coordinator held when the session ended: %v; duplicates %d", before, v.Duplicates)
}

// TestLostFinalReadLateCountedOnce: a member loses its final commit of a
// partition it had finished to the end (its session ends while the
// coordinator refuses commits), joins again and claims it back, but
// cannot read the committed offset when the claim starts; it takes
// messages from the committed offset, the first of them failing, so its
// frontier stays there, until a commit tick reads the offset after all
// (readAgain) and finds its own lost final commit still applies. It
// handles again the messages taken before that, and skips the rest. Each
// record still counts once in Stats.Committed: the lost claim counted
// every one of them when it marked it.
func TestLostFinalReadLateCountedOnce(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	const n, first, keys = 400, 100, 10
	plan := make([]planned, n)
	for i := range plan {
		plan[i] = planned{key: uint32(i % keys), part: -1}
	}
	r := newRigPlan(t, "lost-read-late", 1, plan)
	r.refusedCommits = true // the lost claim's, above what the next claim commits first
	r.produce(0, first)
	cfg := r.config("lost-read-late")
	cfg.Size, cfg.Num = 1, 4
	cfg.MaxInFlight, cfg.Chan = 8, 1 // the claim that reads late takes little before it reads
	cfg.Retry = Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Jitter: -1}
	cfg.Status.ReadBack = -1 // see refuseClaimReads
	cfg.Sarama.Metadata.Retry.Max, cfg.Sarama.Metadata.Retry.Backoff = 1, 50*time.Millisecond
	core, logs := observer.New(zapcore.InfoLevel)
	cfg.Logger = zap.New(core)

	w := r.work(0, 0)
	var held atomic.Int64 // the offset that fails while failing is set
	var failing, refusing atomic.Bool
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if failing.Load() && m.Offset == held.Load() {
				return fmt.Errorf("offset %d: %w", m.Offset, errInjected)
			}
		}
		return w.Do(ctx, batch)
	}
	refuseClaimReads(r, func(int32) bool { return refusing.Load() })
	var lost atomic.Int32
	cfg.OnLost = func(string, []int32, int32) {
		// The claim has read back what the coordinator holds (and kept
		// its lost final commit): from now on the next claim's read fails,
		// and the message there fails.
		held.Store(r.b.Committed(cfg.GroupID, r.topic)[0])
		failing.Store(true)
		refusing.Store(true)
		lost.Add(1)
	}
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	waitFor(t, 30*time.Second, "the first commit", func() bool { return r.b.Committed(cfg.GroupID, r.topic)[0] == first })

	c := r.b.Cluster()
	refuse := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: cfg.GroupID, Err: kerr.CoordinatorLoadInProgress, Count: -1})
	r.produce(first, n)
	waitFor(t, 30*time.Second, "every record handled", func() bool { return g.Stats().Handled >= n })
	waitFor(t, 30*time.Second, "commits refused", func() bool { return refuse.Hits() >= 3 })
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: cfg.GroupID, Err: kerr.UnknownServerError}) // the session ends
	waitFor(t, 30*time.Second, "the final commit lost", func() bool { return lost.Load() == 1 })
	refuse.Remove()
	if got := held.Load(); got != first {
		t.Fatalf("the coordinator's offset at the loss: got %d, want %d", got, first)
	}
	waitFor(t, 30*time.Second, "the next claim to give up its read and fail its first message", func() bool {
		return logs.FilterMessage("reading commit metadata failed; messages finished by the previous owner may be handled again").Len() == 1 &&
			g.Stats().Failures >= 2
	})
	refusing.Store(false)
	readLog := "commit metadata read at last: skipping what the previous owner finished above the messages taken"
	waitFor(t, 10*time.Second, "a commit tick to read the offset", func() bool { return logs.FilterMessage(readLog).Len() == 1 })
	failing.Store(false)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	seen := logs.FilterMessage(readLog).All()[0].ContextMap()["seen"].(int64)
	st := g.Stats()
	if st.Committed != n {
		t.Errorf("Stats.Committed: got %d, want %d (each record once; the claim read its offset late, having taken %d-%d, and handled them again: Handled %d, Resumed %d)",
			st.Committed, n, first, seen, st.Handled, st.Resumed)
	}
	if again := int64(seen - first + 1); st.Handled != n+again || st.Resumed != n-first-again {
		t.Errorf("got Handled %d, Resumed %d; want %d (every record, and the %d taken before the read again) and %d (the rest of the lost frontier)",
			st.Handled, st.Resumed, n+again, again, n-first-again)
	}
	r.check(true) // the messages taken before the read, again
}

// lostFinal.resume applies only while the coordinator holds what it held
// at the loss, within the time a member takes to join again.
func TestLostFinalResume(t *testing.T) {
	at := time.Unix(1000, 0)
	final, _, _ := commit.EncodeWaitingMeta(50, []commit.Waiting{{Offset: 52, Attempt: 2}}, []commit.Range{{Start: 51, End: 52}, {Start: 55, End: 57}}, 512)
	f := lostFinal{start: 10, committed: 10, meta: "x", next: 50, final: final, at: at}
	ttl := 16 * time.Second
	tests := []struct {
		name     string
		off      int64
		meta     string
		after    time.Duration
		ok       bool
		finished int64 // offsets the result skips
	}{
		{"unchanged", 10, "x", time.Second, true, 40 + 1 + 2},
		{"committed since", 20, "x", time.Second, false, 0},
		{"metadata changed", 10, "y", time.Second, false, 0},
		{"too late", 10, "x", ttl + time.Millisecond, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := f.resume(tt.off, tt.meta, at.Add(tt.after), ttl)
			if ok != tt.ok || d.Count() != tt.finished {
				t.Fatalf("got ok %v, %d offsets skipped; want %v, %d", ok, d.Count(), tt.ok, tt.finished)
			}
			if !ok {
				return
			}
			if d.Base != 10 || len(d.Waiting) != 1 || d.Waiting[0].Offset != 52 || d.Waiting[0].Attempt != 2 {
				t.Fatalf("got base %d, waiting %+v; want base 10, offset 52 waiting at attempt 2", d.Base, d.Waiting)
			}
			for _, off := range []int64{10, 49, 51, 55, 56} {
				if !d.Contains(off) {
					t.Errorf("offset %d: got not skipped, want skipped", off)
				}
			}
		})
	}
	t.Run("metadata off", func(t *testing.T) {
		g := f
		g.final = ""
		d, ok := g.resume(10, "x", at, ttl)
		if !ok || d.Count() != 40 || len(d.Waiting) != 0 {
			t.Fatalf("got ok %v, %d skipped, %d waiting; want true, 40, 0", ok, d.Count(), len(d.Waiting))
		}
	})
}

// A claim that took this member's lost final commit of its partition and
// lets go having marked nothing (its session ended before a message came,
// or it could not read the committed offset) puts it back for the
// member's next claim; one that marked does not.
func TestLostFinalPutBack(t *testing.T) {
	noop := func(context.Context, []*Message) error { return nil }
	for _, marked := range []bool{false, true} {
		g := newGroup(t, Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem"}, noop)
		own := lostFinal{start: 0, committed: 0, next: 40, at: time.Now()}
		c := &claimLoop[*Message]{g: g, topic: "mem", part: 0, st: &claimState{claim: &memClaim{p: 0}}, ownLost: &own, marked: marked}
		if err := c.released(0, c.releaseBy(time.Now())); err != nil {
			t.Fatal(err)
		}
		got := g.lost.take(topicPartition{"mem", 0})
		if ok := got != nil; ok != !marked || ok && *got != own {
			t.Errorf("claim that marked %v: got %+v; want kept %v", marked, got, !marked)
		}
	}
}

// A lost final commit is kept only when the coordinator holds an offset
// below the frontier and the lost claim's start is known.
func TestNewLostFinal(t *testing.T) {
	at := time.Unix(1000, 0)
	for _, tt := range []struct {
		name                   string
		start, committed, next int64
		ok                     bool
	}{
		{"committed below the frontier", 10, 10, 50, true},
		{"no committed offset", 0, -1, 50, false},
		{"start unknown", -1, 10, 50, false},
		{"committed at the frontier", 10, 50, 50, false},
		{"committed below the lost claim's start (rewound while it ran: it never handled 5 to 10)", 10, 5, 50, false},
	} {
		f, ok := newLostFinal(tt.start, tt.committed, "m", tt.next, "", at)
		if ok != tt.ok || ok && (f.start != tt.start || f.committed != tt.committed || f.next != tt.next || f.meta != "m" || f.at != at) {
			t.Errorf("%s: got %+v, %v; want kept %v", tt.name, f, ok, tt.ok)
		}
	}
}

// A loss that follows a claim resumed from an earlier loss keeps what the
// earlier claims counted in Stats.Committed: a second claim that stopped
// below the first's frontier must not make the third count the rest of
// the first's messages again.
func TestLostFinalAfterKeepsCounted(t *testing.T) {
	at := time.Unix(1000, 0)
	first, ok := newLostFinal(0, 10, "", 50, "", at)
	if !ok || first.counted != 50 {
		t.Fatalf("first loss: got %+v (ok %v), want counted 50", first, ok)
	}
	tests := []struct {
		name string
		next int64 // the second claim's frontier
		prev *lostFinal
		want int64
	}{
		{"stopped below the first's frontier", 30, &first, 50},
		{"went past it", 70, &first, 70},
		{"no earlier loss", 30, nil, 30},
	}
	for _, tt := range tests {
		second, ok := newLostFinal(10, 10, "", tt.next, "", at)
		if !ok {
			t.Fatalf("%s: no loss kept", tt.name)
		}
		if got := second.after(tt.prev).counted; got != tt.want {
			t.Errorf("%s: counted %d, want %d", tt.name, got, tt.want)
		}
	}
}
