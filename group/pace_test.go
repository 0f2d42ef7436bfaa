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

// TestPacedIntake: while the workers have a ready backlog (backlog(cfg))
// the claim loop turns no more messages into items, though its in-flight
// share has room: it reads on, leaving them undispatched, and dispatches
// them, each lane in order, as the workers take the backlog. Without
// pacing the 200 messages would all be items at once.
//
// Held messages stay within the share's bytes: with 1 KiB values and a 20
// KiB share of MaxInFlightBytes, the loop pauses fetching once what it
// holds passes what the share has room for.
func TestPacedIntake(t *testing.T) {
	tests := []struct {
		name      string
		maxBytes  int64
		value     int
		wantPause bool
	}{
		{"count", 0, 0, false},
		{"bytes", 20 << 10, 1 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testPacedIntake(t, tt.maxBytes, tt.value, tt.wantPause) })
	}
}

func testPacedIntake(t *testing.T, maxBytes int64, value int, wantPause bool) {
	const sent, keys = 200, 10
	var (
		mu      sync.Mutex
		seen    = map[string][]int64{}
		release = make(chan struct{})
	)
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem",
		Size: 1, Num: 2, Ticker: -1, MaxInFlight: 10_000, MaxInFlightBytes: maxBytes, Chan: 4}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		<-release
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			seen[string(m.Key)] = append(seen[string(m.Key)], m.Offset)
		}
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &pausingClaim{memClaim: &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, sent)}}
	for off := range int64(sent) {
		claim.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: fmt.Appendf(nil, "k%d", off%keys), Value: make([]byte, value)}
	}
	unblock := consumeClaims(t, g, sess, []*pausingClaim{claim}, release)
	if wantPause {
		waitFor(t, 5*time.Second, "fetching to pause", func() bool { return claim.pauses.Load() > 0 })
		unblock()
		waitFor(t, 10*time.Second, "every message to be marked", func() bool { return sess.markedAt(0) == sent })
		if st := g.Stats(); st.Fetched != sent {
			t.Errorf("fetched: got %d, want %d", st.Fetched, sent)
		}
		checkLaneOrder(t, &mu, seen, sent, keys)
		return
	}
	waitFor(t, 5*time.Second, "every message to be read", func() bool { return len(claim.msgs) == 0 })
	// Num calls running, the backlog ready, and at most one burst (Chan)
	// dispatched before the backlog was seen.
	limit := int64(cfg.Num + backlog(cfg) + cfg.Chan)
	st := g.Stats()
	if st.InFlight > limit {
		t.Errorf("items in flight with the workers' backlog full: got %d, want at most %d (Num %d + backlog %d + Chan %d)",
			st.InFlight, limit, cfg.Num, backlog(cfg), cfg.Chan)
	}
	var undispatched int64
	for _, p := range st.PartitionStats {
		undispatched += p.Undispatched
	}
	if undispatched+st.InFlight != sent {
		t.Errorf("undispatched %d + in flight %d: got %d, want every message read (%d)", undispatched, st.InFlight, undispatched+st.InFlight, sent)
	}
	if claim.pauses.Load() != 0 {
		t.Errorf("Pause calls: got %d, want 0 (paced, the share still had room)", claim.pauses.Load())
	}
	unblock()
	waitFor(t, 10*time.Second, "every message to be marked", func() bool { return sess.markedAt(0) == sent })
	checkLaneOrder(t, &mu, seen, sent, keys)
}

// TestPacedClaimResumesFetchingWhileHolding: a paced claim that paused
// fetching at its hold limit (its share: MaxInFlight 40, one partition)
// resumes it once half of that is left, so that the next fetch is under
// way before what it holds runs out: some Resume call comes while it still
// holds messages. (The claim here reads on whatever Pause says: a
// memClaim's channel is filled in advance.)
func TestPacedClaimResumesFetchingWhileHolding(t *testing.T) {
	const sent = 200
	release := make(chan struct{})
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem",
		Size: 1, Num: 2, Ticker: -1, MaxInFlight: 40, Chan: 4}
	g := newGroup(t, cfg, func(context.Context, []*Message) error {
		<-release
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &pausingClaim{memClaim: &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, sent)}}
	for off := range int64(sent) {
		claim.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: fmt.Appendf(nil, "k%d", off%50)}
	}
	var resumedHolding atomic.Int32 // Resume calls made with messages still held
	claim.onResume = func() {
		if ps, _ := partitionStats(g, 0); ps.Undispatched > 0 {
			resumedHolding.Add(1)
		}
	}
	unblock := consumeClaims(t, g, sess, []*pausingClaim{claim}, release)
	waitFor(t, 5*time.Second, "fetching to pause", func() bool { return claim.pauses.Load() > 0 })
	unblock()
	waitFor(t, 10*time.Second, "every message to be marked", func() bool { return sess.markedAt(0) == sent })
	if got := resumedHolding.Load(); got == 0 {
		t.Errorf("Resume calls with messages still held: got 0 (of %d Resume calls), want some", claim.resumes.Load())
	}
}

// checkLaneOrder checks that each of keys lanes (key k%d, every keys-th
// offset) saw its sent/keys messages in offset order.
func checkLaneOrder(t *testing.T, mu *sync.Mutex, seen map[string][]int64, sent, keys int) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		offs := seen[key]
		if len(offs) != sent/keys {
			t.Errorf("lane %s: got %d messages, want %d", key, len(offs), sent/keys)
		}
		for i, off := range offs {
			if want := int64(k + i*keys); off != want {
				t.Fatalf("lane %s: got offset %d at position %d, want %d (offset order)", key, off, i, want)
			}
		}
	}
}

// TestPacedClaimWokenByTheBacklogDraining: a claim paced by another
// partition's backlog dispatches what it read once the workers drain that
// backlog, before any of its own items finishes (their completions would
// wake it otherwise). Partition 1's first message (a) waits in Do until
// its third (b), held back while partition 0's backlog stood, has reached
// Do too: without the wake from the draining backlog, b would wait for a
// and a for b. Its second (a again, queued behind the first) gives it its
// share of the backlog in flight (4 over 2 partitions): a partition under
// it is not paced, and b would go in at once.
func TestPacedClaimWokenByTheBacklogDraining(t *testing.T) {
	const busy = 40
	release, bStarted := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	handled := map[int32]int{}
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem",
		Size: 1, Num: 2, Ticker: -1, MaxInFlight: 10_000, Chan: 4}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		switch m := batch[0]; {
		case m.Partition == 0:
			<-release
		case string(m.Key) == "a":
			if m.Offset != 0 {
				break // the second a: after the first returned
			}
			select {
			case <-bStarted:
			case <-time.After(10 * time.Second):
				return nil // the test fails on its own wait
			}
		default:
			close(bStarted)
		}
		mu.Lock()
		defer mu.Unlock()
		handled[batch[0].Partition] += len(batch)
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claims := []*pausingClaim{
		{memClaim: &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, busy)}},
		{memClaim: &memClaim{p: 1, msgs: make(chan *sarama.ConsumerMessage, 3)}},
	}
	unblock := consumeClaims(t, g, sess, claims, release)
	for off := range int64(busy) {
		claims[0].msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: 0, Offset: off, Key: fmt.Appendf(nil, "k%d", off)}
	}
	waitFor(t, 5*time.Second, "partition 0's messages to be read", func() bool { return len(claims[0].msgs) == 0 })
	// a may go in on a decision partition 1's loop made before the
	// backlog formed; b, read after, is held back.
	for off := range int64(2) {
		claims[1].msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: 1, Offset: off, Key: []byte("a")}
	}
	waitFor(t, 5*time.Second, "both a to be dispatched", func() bool { ps, _ := partitionStats(g, 1); return ps.InFlight == 2 })
	claims[1].msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: 1, Offset: 2, Key: []byte("b")}
	waitFor(t, 5*time.Second, "b to be held back, undispatched", func() bool {
		ps, _ := partitionStats(g, 1)
		return ps.Undispatched == 1 && ps.InFlight == 2
	})
	unblock()
	waitFor(t, 10*time.Second, "partition 1's messages to be handled and marked", func() bool { return sess.markedAt(1) == 3 })
	mu.Lock()
	defer mu.Unlock()
	if handled[0] != busy || handled[1] != 3 {
		t.Errorf("handled: got %d of partition 0 and %d of partition 1, want %d and 3", handled[0], handled[1], busy)
	}
}

// TestPacedWakeNotSpentOnIdleClaims: claims that hold nothing to dispatch
// are not listed for the backlog's wake, so the first wake the draining
// backlog hands out (Chan 4, Backlog 4: one per take until it empties)
// reaches the claim that holds a message. Partition 0 builds the backlog:
// a call in Do on each of the two workers and 3 ready. Sixteen idle claims
// look at it (a commit tick, sent by hand, makes each loop go round; the
// commit loop's own interval is an hour). The last partition's first
// message makes 4 ready and gives it its share of the backlog in flight
// (a partition with less is not paced); its second is read while the
// backlog stands. Releasing one call of partition 0 makes one take: the
// late claim must dispatch then, with 3 items still ready. Were the idle claims listed ahead
// of it, that wake would go to one of them, and the late message would
// wait for the backlog to empty (or, without the wake at an empty
// backlog, for ever).
func TestPacedWakeNotSpentOnIdleClaims(t *testing.T) {
	const busy, idle = 5, 16
	release, first := make(chan struct{}), make(chan struct{})
	var lateHandled atomic.Bool
	sc := DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = time.Hour // the test sends the ticks
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Sarama: sc,
		Size: 1, Num: 2, Ticker: -1, MaxInFlight: 10_000, Chan: 4}
	if got := backlog(cfg); got != 4 {
		t.Fatalf("backlog: got %d, want 4 (the test counts wakes on it)", got)
	}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		switch {
		case batch[0].Partition == 0:
			<-release
		case string(batch[0].Key) == "first":
			<-first
		case string(batch[0].Key) == "late":
			lateHandled.Store(true)
		}
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	var claims []*pausingClaim
	for p := range int32(idle + 2) {
		claims = append(claims, &pausingClaim{memClaim: &memClaim{p: p, msgs: make(chan *sarama.ConsumerMessage, busy)}})
	}
	unblock := consumeClaims(t, g, sess, claims, release)
	waitFor(t, 5*time.Second, "every claim to start", func() bool { return len(g.Stats().PartitionStats) == len(claims) })
	for off := range int64(busy) {
		claims[0].msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: 0, Offset: off, Key: fmt.Appendf(nil, "k%d", off)}
	}
	waitFor(t, 5*time.Second, "partition 0's backlog: two calls, 3 ready", func() bool {
		ps, _ := partitionStats(g, 0)
		return ps.InFlight == busy
	})
	for range 2 { // the second tick is taken once the loops went round after the first
		g.tickClaims()
		waitFor(t, 5*time.Second, "every claim loop to take its tick", func() bool {
			g.claimsMu.Lock()
			defer g.claimsMu.Unlock()
			for c := range g.claims {
				if len(c.tick) > 0 {
					return false
				}
			}
			return true
		})
	}
	late := claims[idle+1]
	late.msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: late.p, Offset: 0, Key: []byte("first")}
	waitFor(t, 5*time.Second, "the late partition's first message, ready", func() bool {
		ps, _ := partitionStats(g, late.p)
		return ps.InFlight == 1 && g.Stats().InFlight == busy+1
	})
	late.msgs <- &sarama.ConsumerMessage{Topic: "mem", Partition: late.p, Offset: 1, Key: []byte("late")}
	waitFor(t, 5*time.Second, "the late message to be held back", func() bool {
		ps, _ := partitionStats(g, late.p)
		return ps.Undispatched == 1
	})
	release <- struct{}{} // one call ends: one take, 3 of partition 0's left ready
	waitFor(t, 5*time.Second, "the late message to be dispatched after one take", func() bool {
		ps, _ := partitionStats(g, late.p)
		return ps.Undispatched == 0 && ps.InFlight == 2
	})
	close(first)
	unblock()
	waitFor(t, 5*time.Second, "the late message to be handled", lateHandled.Load)
}

// consumeClaims runs g's claim loop on each claim until the test ends,
// then closes release (if not yet) and every claim's messages (the
// helper's to close: a test must not) and waits for the loops. The
// returned func closes release, once.
func consumeClaims(t *testing.T, g *Group[*Message], sess *memSession, claims []*pausingClaim, release chan struct{}) (unblock func()) {
	t.Helper()
	consumed := make(chan error, len(claims))
	for _, c := range claims {
		go func() { consumed <- g.consume(sess, c) }()
	}
	var once sync.Once
	unblock = func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() {
		unblock()
		for _, c := range claims {
			close(c.msgs)
		}
		for range claims {
			<-consumed
		}
	})
	return unblock
}

// fetchingClaim is a memClaim that fetches as sarama's claims do: fetch
// messages at a time, each fetch handed over whole through the channel,
// and no fetch begun while fetching is paused. It counts what it handed
// over.
type fetchingClaim struct {
	*memClaim
	fetch     int
	paused    atomic.Bool
	resumed   chan struct{} // cap 1: a Resume since the fetcher last looked
	delivered atomic.Int64
}

func (c *fetchingClaim) Pause() { c.paused.Store(true) }

func (c *fetchingClaim) Resume() {
	c.paused.Store(false)
	select {
	case c.resumed <- struct{}{}:
	default:
	}
}

// fetchAll hands over n messages over keys keys, a fetch at a time while
// fetching is not paused, and calls sent after each message. It returns
// early, false, once stop is closed.
func (c *fetchingClaim) fetchAll(n, keys int, sent func(), stop <-chan struct{}) bool {
	for off := 0; off < n; {
		for c.paused.Load() {
			select {
			case <-c.resumed:
			case <-stop:
				return false
			}
		}
		for end := min(off+c.fetch, n); off < end; off++ {
			m := &sarama.ConsumerMessage{Topic: "mem", Offset: int64(off), Key: fmt.Appendf(nil, "k%d", off%keys)}
			select {
			case c.msgs <- m:
			case <-stop:
				return false
			}
			c.delivered.Add(1)
			sent()
		}
	}
	return true
}

var _ fetchPauser = (*fetchingClaim)(nil)

// TestPacedClaimHoldsWithinItsShare: with slow handlers the workers' backlog
// paces the claim, which reads on into what it holds undispatched as far
// as its share has room, then pauses fetching. So at no moment do the
// messages fetched and not yet finished exceed the share (MaxInFlight,
// one partition) by more than what is read or dispatched past a limit
// before it is seen (a burst read into held before the pause, the
// channel's buffer, a burst dispatched before the backlog formed: 4 x
// Chan leaves one to spare) and the fetches under way when fetching
// paused (2). A claim loop that never paused would hold every message the
// fetcher has (here all 6,000 but the few finished).
func TestPacedClaimHoldsWithinItsShare(t *testing.T) {
	const n, keys, maxInFlight, chanSize, fetch = 6000, 64, 1000, 16, 128
	var finished atomic.Int64
	cfg := Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem",
		Size: 1, Num: 16, Ticker: -1, MaxInFlight: maxInFlight, Chan: chanSize}
	g := newGroup(t, cfg, func(context.Context, []*Message) error {
		time.Sleep(time.Millisecond)
		finished.Add(1)
		return nil
	})
	t.Cleanup(startWorkers(t, g))
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	claim := &fetchingClaim{memClaim: &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, chanSize)}, fetch: fetch, resumed: make(chan struct{}, 1)}
	consumed := make(chan error, 1)
	go func() { consumed <- g.consume(sess, claim) }()
	var peak int64 // fetched and not finished, at its highest (it grows only when a message is handed over)
	stop, fetched := make(chan struct{}), make(chan bool, 1)
	go func() {
		fetched <- claim.fetchAll(n, keys, func() { peak = max(peak, claim.delivered.Load()-finished.Load()) }, stop)
	}()
	t.Cleanup(func() { // also when a wait below fails: the fetcher and the claim end before the workers stop
		close(stop)
		<-fetched
		close(claim.msgs)
		if err := <-consumed; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
	select {
	case <-fetched:
		fetched <- true // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("fetching: got %d of %d messages handed over in 30s, want all (paused: %v)", claim.delivered.Load(), n, claim.paused.Load())
	}
	waitFor(t, 30*time.Second, "every message to be marked", func() bool { return sess.markedAt(0) == n })
	if limit := int64(maxInFlight + 4*chanSize + 2*fetch); peak > limit {
		t.Errorf("messages fetched and not finished: got a peak of %d, want at most %d (MaxInFlight %d + 4 x Chan %d + 2 fetches of %d)",
			peak, limit, maxInFlight, chanSize, fetch)
	}
	t.Logf("peak fetched and not finished: %d", peak)
}
