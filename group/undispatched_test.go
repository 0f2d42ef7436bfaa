package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// pausingClaim is a memClaim that can pause fetching, as sarama's claims
// can, and counts the calls; onResume, if set, runs at each Resume.
type pausingClaim struct {
	*memClaim
	pauses, resumes atomic.Int32
	onResume        func()
}

func (c *pausingClaim) Pause() { c.pauses.Add(1) }
func (c *pausingClaim) Resume() {
	c.resumes.Add(1)
	if c.onResume != nil {
		c.onResume()
	}
}

var _ fetchPauser = (*pausingClaim)(nil)

// TestRevokeSeenWhileBudgetExhausted: a claim loop whose partition has used
// up MaxInFlight pauses fetching and reads on, so that a revoke (Messages
// closing behind buffered messages) ends its claim within DrainTimeout. A
// loop that stopped reading would hold ConsumeClaim until credit returned,
// here never, and sarama would give up on the member after
// Rebalance.Timeout.
func TestRevokeSeenWhileBudgetExhausted(t *testing.T) {
	const maxInFlight, sent = 4, 12
	g, stuck, unstick := stuckGroup(t, Config{Size: 1, Num: 2, MaxInFlight: maxInFlight, Chan: 4, DrainTimeout: 100 * time.Millisecond},
		func(*Message) bool { return true }) // every call blocks
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &pausingClaim{memClaim: &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, sent)}}
	for off := range int64(sent) {
		claim.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: fmt.Appendf(nil, "k%d", off)}
	}
	consumed := make(chan error, 1)
	go func() { consumed <- g.consume(sess, claim) }()
	var revoke sync.Once
	t.Cleanup(func() { // on failure, let the claim end before the workers stop
		unstick()
		revoke.Do(func() { close(claim.msgs) })
		<-consumed
	})
	<-stuck
	waitFor(t, 5*time.Second, "every message to be read (the rest held)", func() bool { return len(claim.msgs) == 0 })
	revoke.Do(func() { close(claim.msgs) })
	select {
	case err := <-consumed:
		consumed <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("the claim did not end after its revoke while the in-flight budget was exhausted")
	}
	if got := claim.pauses.Load(); got != 1 {
		t.Errorf("Pause calls: got %d, want 1", got)
	}
	st := g.Stats()
	if st.Fetched != sent || st.Dropped+st.Abandoned != sent || st.Abandoned < 1 || st.Abandoned > 2 {
		t.Errorf("stats: got fetched %d, dropped %d, abandoned %d; want %d fetched, 1 or 2 abandoned (the blocked calls), the rest dropped",
			st.Fetched, st.Dropped, st.Abandoned, sent)
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.marked[0] != 0 {
		t.Errorf("committed: got %d, want 0 (nothing finished)", sess.marked[0])
	}
}

// TestHeldMessagesKeepOrder: messages read while the budget is exhausted
// are dispatched once credit returns, in offset order within their lane,
// and fetching resumes once they are all dispatched.
func TestHeldMessagesKeepOrder(t *testing.T) {
	const maxInFlight, sent = 8, 200
	var (
		mu      sync.Mutex
		seen    []int64
		release = make(chan struct{})
	)
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem",
		Size: 4, Num: 2, Ticker: -1, MaxInFlight: maxInFlight, Chan: 4}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		<-release // closed once every message is buffered: the budget runs out first
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			seen = append(seen, m.Offset)
		}
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &pausingClaim{memClaim: &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, sent)}}
	for off := range int64(sent) {
		claim.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: []byte("one lane")}
	}
	consumed := make(chan error, 1)
	go func() { consumed <- g.consume(sess, claim) }()
	var unblock, revoke sync.Once
	t.Cleanup(func() { // on failure, let the calls and the claim end before the workers stop
		unblock.Do(func() { close(release) })
		revoke.Do(func() { close(claim.msgs) })
		<-consumed
	})
	waitFor(t, 5*time.Second, "every message to be read (the rest held)", func() bool { return len(claim.msgs) == 0 })
	if got := g.Stats().InFlight; got > maxInFlight+1 {
		t.Errorf("in flight with messages held: got %d, want at most MaxInFlight %d + 1", got, maxInFlight)
	}
	unblock.Do(func() { close(release) })
	waitFor(t, 10*time.Second, "every message to be marked", func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		return sess.marked[0] == sent
	})
	mu.Lock()
	for i, off := range seen {
		if off != int64(i) {
			mu.Unlock()
			t.Fatalf("handled order: got offset %d at position %d, want %d (one lane, offset order)", off, i, i)
		}
	}
	n := len(seen)
	mu.Unlock()
	if n != sent {
		t.Fatalf("handled: got %d messages, want %d", n, sent)
	}
	if p, r := claim.pauses.Load(), claim.resumes.Load(); p == 0 || r != p {
		t.Errorf("Pause/Resume calls: got %d/%d, want at least one pause, each resumed", p, r)
	}
	revoke.Do(func() { close(claim.msgs) })
	if err := <-consumed; err != nil {
		t.Fatalf("consume: %v", err)
	}
	consumed <- nil // for the cleanup
}

// TestHeldFIFO: held gives messages back in the order it took them, drop
// counts what was left, and a drained FIFO does not keep a large array.
func TestHeldFIFO(t *testing.T) {
	tests := []struct {
		name      string
		push, pop int
		wantDrop  int
		wantArray bool // the array is kept after the drop
	}{
		{"empty", 0, 0, 0, true},
		{"all popped", 5, 5, 0, true},
		{"some left", 5, 2, 3, true},
		{"large, drained", maxKeptHeld + 1, 0, maxKeptHeld + 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h undispatched
			for off := range int64(tt.push) {
				h.push(&sarama.ConsumerMessage{Offset: off, Value: []byte("abc")})
			}
			for want := range int64(tt.pop) {
				m, size := h.pop()
				if m.Offset != want || size != 3 {
					t.Fatalf("pop: got offset %d size %d, want %d and 3", m.Offset, size, want)
				}
			}
			if want := int64(3 * (tt.push - tt.pop)); h.bytes != want {
				t.Errorf("bytes held: got %d, want %d", h.bytes, want)
			}
			if got := h.drop(); got != tt.wantDrop {
				t.Errorf("drop: got %d, want %d", got, tt.wantDrop)
			}
			if h.len() != 0 || h.bytes != 0 {
				t.Errorf("after drop: got len %d, bytes %d, want 0 and 0", h.len(), h.bytes)
			}
			if kept := h.q != nil; kept != tt.wantArray && tt.push > 0 {
				t.Errorf("array kept after drop: got %v, want %v (cap %d)", kept, tt.wantArray, cap(h.q))
			}
		})
	}
}

// TestHeldFIFONeverEmpty: a FIFO that is pushed and popped for a long time
// without ever emptying (a claim that stays paced: it reads into held as
// fast as it dispatches) keeps an array of about what it holds, not of
// everything that went through it, and keeps the order.
func TestHeldFIFONeverEmpty(t *testing.T) {
	const held, through = 1000, 100_000
	var h undispatched
	next, want := int64(0), int64(0)
	for range held {
		h.push(&sarama.ConsumerMessage{Offset: next})
		next++
	}
	for range through {
		h.push(&sarama.ConsumerMessage{Offset: next})
		next++
		if m, _ := h.pop(); m.Offset != want {
			t.Fatalf("pop: got offset %d, want %d", m.Offset, want)
		}
		want++
	}
	if h.len() != held {
		t.Fatalf("held: got %d, want %d", h.len(), held)
	}
	if got, limit := cap(h.q), 4*held; got > limit {
		t.Fatalf("array after %d messages through %d held: got %d slots, want at most %d", through, held, got, limit)
	}
}
