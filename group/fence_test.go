package group

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/commit"
)

// TestLateCompletionIsNotCommitted: a batch still inside Do when its
// partition's DrainTimeout runs out is let go; the claim commits the
// frontier below it (with the finished offsets above as metadata) and
// returns, and when the batch finally finishes nothing more is marked for
// that claim (invariant 5: completions after the revoke are never
// committed), and it is not counted handled: not in Stats.Handled, nor in
// the partition's Outcomes.Handled, as the next claim of the partition
// shows them.
func TestLateCompletionIsNotCommitted(t *testing.T) {
	const stuckAt = 2
	g, stuck, unstick := stuckGroup(t, Config{Size: 1, Num: 2, DrainTimeout: 100 * time.Millisecond},
		func(m *Message) bool { return m.Offset == stuckAt })
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, 16)}
	consumed := make(chan error, 1)
	go func() { consumed <- g.consume(sess, claim) }()
	for off := range int64(10) { // ten lanes: nothing waits behind the stuck one
		claim.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: fmt.Appendf(nil, "k%d", off)}
	}
	<-stuck
	waitFor(t, 5*time.Second, "offsets 0 and 1 to be marked", func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		return sess.marked[0] == stuckAt
	})
	waitFor(t, 5*time.Second, "offsets 0, 1 and 3..9 to finish", func() bool { return g.Stats().Handled == 9 })
	close(claim.msgs) // revoke
	select {
	case <-consumed:
	case <-time.After(10 * time.Second):
		t.Fatal("the claim did not let go after DrainTimeout")
	}
	sess.mu.Lock()
	atRevoke, marksAtRevoke, meta := sess.marked[0], sess.marks, sess.meta[0]
	sess.mu.Unlock()
	if atRevoke != stuckAt {
		t.Fatalf("committed at revoke: got %d, want %d (the stuck message)", atRevoke, stuckAt)
	}
	done, err := commit.DecodeMeta(meta)
	if err != nil || done.Base != stuckAt || !slices.Equal(done.Ranges, []commit.Range{{Start: stuckAt + 1, End: 10}}) {
		t.Fatalf("metadata at revoke: got %+v (%v), want base %d and [%d, 10) finished", done, err, stuckAt, stuckAt+1)
	}

	unstick() // the late completion
	waitFor(t, 5*time.Second, "the stuck batch to return", func() bool { return g.Stats().Batches == 10 })
	time.Sleep(2 * wakeDelay) // let any (wrong) wake reach the old claim
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.marked[0] != atRevoke || sess.marks != marksAtRevoke {
		t.Fatalf("after the late completion: marked %d in %d calls, want %d in %d (nothing more for a revoked claim)",
			sess.marked[0], sess.marks, atRevoke, marksAtRevoke)
	}
	if st := g.Stats(); st.Abandoned != 1 || st.Handled != 9 {
		t.Fatalf("Stats: got Abandoned %d, Handled %d; want 1 (the batch left running at the timeout) and 9 (not it)", st.Abandoned, st.Handled)
	}
	next := &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage)}
	consumed = make(chan error, 1)
	go func() { consumed <- g.consume(sess, next) }()
	var outcomes Outcomes
	waitFor(t, 5*time.Second, "the partition's next claim", func() bool {
		st := g.Stats()
		if len(st.PartitionStats) == 1 {
			outcomes = st.PartitionStats[0].Outcomes
		}
		return len(st.PartitionStats) == 1
	})
	close(next.msgs)
	<-consumed
	if outcomes.Handled != 9 {
		t.Errorf("Outcomes.Handled of the partition, its first claim ended: got %d, want 9", outcomes.Handled)
	}
}

// TestSlowPartitionDoesNotHoldBackOthers (invariant 3): while a message of
// one partition is stuck in Do, every other partition's messages finish and
// are marked for commit. Size is 1 so the stuck batch holds only that one
// message: a larger batch may pick up other partitions' messages alongside
// it, and those are unfinished until the batch returns (and so are the later
// messages of their lanes), which is batching, not head-of-line blocking.
func TestSlowPartitionDoesNotHoldBackOthers(t *testing.T) {
	g, stuck, unstick := stuckGroup(t, Config{Size: 1, Num: 4},
		func(m *Message) bool { return m.Partition == 0 && m.Offset == 0 })
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	const parts, per = 4, 200
	claims := make([]*memClaim, parts)
	var loops sync.WaitGroup
	for p := range parts {
		claims[p] = &memClaim{p: int32(p), msgs: make(chan *sarama.ConsumerMessage, per)}
		loops.Go(func() { _ = g.consume(sess, claims[p]) })
	}
	for off := range int64(per) { // interleaved, so batches would mix partitions
		for p := range parts {
			claims[p].msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: int32(p), Offset: off, Key: fmt.Appendf(nil, "k%d", off%7)}
		}
	}
	<-stuck
	waitFor(t, 10*time.Second, "partitions 1-3 to be marked to their end while partition 0 is stuck", func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		for p := int32(1); p < parts; p++ {
			if sess.marked[p] != per {
				return false
			}
		}
		return true
	})
	sess.mu.Lock()
	stuckMark := sess.marked[0]
	sess.mu.Unlock()
	if stuckMark != 0 {
		t.Fatalf("partition 0 marked %d while its offset 0 is unfinished, want 0", stuckMark)
	}
	unstick()
	waitFor(t, 10*time.Second, "partition 0 to be marked to its end", func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		return sess.marked[0] == per
	})
	for _, c := range claims {
		close(c.msgs)
	}
	loops.Wait()
}

// stuckGroup is a group on the in-memory session whose Do blocks on the
// first message for which isStuck is true: stuck is closed when it does,
// and unstick lets it return. Its workers run until the test ends
// (unstick first, so a failing test does not hang on them).
func stuckGroup(t *testing.T, cfg Config, isStuck func(*Message) bool) (g *Group[*Message], stuck <-chan struct{}, unstick func()) {
	t.Helper()
	release, stuckCh := make(chan struct{}), make(chan struct{})
	var stuckOnce, releaseOnce sync.Once
	cfg.Brokers, cfg.Topics, cfg.GroupID, cfg.Ticker = []string{"mem:0"}, []string{"mem"}, "mem", -1
	g = newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		for _, m := range batch {
			if isStuck(m) {
				stuckOnce.Do(func() { close(stuckCh) })
				<-release
			}
		}
		return nil
	})
	stopWorkers := startWorkers(t, g)
	unstick = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(stopWorkers)
	t.Cleanup(unstick) // cleanups run last-in first-out: this one first
	return g, stuckCh, unstick
}
