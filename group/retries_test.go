package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestRetriesCountLaneMates: Do names all 3 messages of one key failed on
// their first attempt; each is handed out again once, at attempt 2, and
// Stats.Retries counts 3. Only the lane's first was counted (1): the later
// ones go back charged behind it, where the hook that counted never sees
// them.
func TestRetriesCountLaneMates(t *testing.T) {
	t.Parallel()
	const n = 3 // one key
	r := newRig(t, "retries-mates", 1, n, 1)
	w := r.work(0, 0)
	var mu sync.Mutex
	attempts := map[int64][]int{}
	cfg := r.config("retries-mates")
	cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Minute // one batch of all three
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		var ok []*Message
		mu.Lock()
		for i, m := range batch {
			attempts[m.Offset] = append(attempts[m.Offset], m.Attempt)
			if m.Attempt == 1 {
				failed.Fail(i, errors.New("fails once"))
			} else {
				ok = append(ok, m)
			}
		}
		mu.Unlock()
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return failed.Err()
	})
	r.runToEnd(g, cfg.GroupID)
	r.check(false)
	mu.Lock()
	defer mu.Unlock()
	for off := range int64(n) {
		if got := attempts[off]; !slices.Equal(got, []int{1, 2}) {
			t.Errorf("offset %d: Do saw attempts %v, want [1 2]", off, got)
		}
	}
	if st := g.Stats(); st.Retries != n {
		t.Errorf("Stats.Retries: got %d, want %d (each message handed out again once)", st.Retries, n)
	}
}

// TestRetriesCountParked: under Unordered with a DataPath a failed message
// is parked (ParkAfter 0: every retry is) and comes back from the local
// queue showing its attempt; each is counted once in Stats.Retries. They
// were counted nowhere while retries were counted where an item was
// handed out above the attempt it showed (found in review).
func TestRetriesCountParked(t *testing.T) {
	t.Parallel()
	const n, every = 40, 5
	r := newRig(t, "retries-parked", 1, n, n)
	w := r.work(0, 0)
	var mu sync.Mutex
	seen := map[int64][]int{}
	cfg := r.config("retries-parked")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 4, 2, Unordered, t.TempDir()
	cfg.Retry = Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Jitter: -1}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		var be BatchError
		var ok []*Message
		mu.Lock()
		for i, m := range batch {
			seen[m.Offset] = append(seen[m.Offset], m.Attempt)
			if m.Offset%every == 0 && m.Attempt == 1 {
				r.markSettled(m.Partition, m.Offset) // the frontier passes a parked message
				be.Fail(i, errors.New("first attempt fails"))
			} else {
				ok = append(ok, m)
			}
		}
		mu.Unlock()
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return be.Err()
	})
	stop := run(t, g)
	waitFor(t, 20*time.Second, "every failed message handled at attempt 2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for off, a := range seen {
			if off%every == 0 && slices.Equal(a, []int{1, 2}) {
				c++
			}
		}
		return c == n/every
	})
	st := g.Stats()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st.Retries != n/every {
		t.Errorf("Stats.Retries: got %d, want %d (each failed message handed out again once, from the parked queue)", st.Retries, n/every)
	}
}

// TestRetriesCountedAcrossHandoff: a message fails under member A, which
// stops while it waits out its backoff; B, resuming from the commit
// metadata, runs it at attempt 2. The retry counts once over the two
// members (with A, which decided it). It was counted by neither while
// retries were counted where an item was handed out above the attempt it
// showed (found in review).
func TestRetriesCountedAcrossHandoff(t *testing.T) {
	t.Parallel() // mostly waits on the backoff and the broker
	const n = 3
	r := newRig(t, "retries-handoff", 1, n, n)
	var mu sync.Mutex
	seen := map[int64][]int{}
	do := func(ctx context.Context, batch []*Message) error {
		var failed BatchError
		mu.Lock()
		defer mu.Unlock()
		for i, m := range batch {
			seen[m.Offset] = append(seen[m.Offset], m.Attempt)
			if m.Offset == 0 && m.Attempt == 1 {
				failed.Fail(i, errors.New("fails once"))
			}
		}
		return failed.Err()
	}
	cfg := r.config("retries-handoff")
	cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Minute
	cfg.Retry = Retry{Backoff: 2 * time.Second, MaxBackoff: 2 * time.Second, Jitter: -1}
	a := newGroup(t, cfg, do)
	stopA := run(t, a)
	waitFor(t, time.Minute, "the failure", func() bool { return a.Stats().Retrying >= 1 })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	cfg.Ticker = 10 * time.Millisecond
	b := newGroup(t, cfg, do)
	stopB := run(t, b)
	waitFor(t, time.Minute, "offset 0 run again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen[0]) == 2
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if got := a.Stats().Retries + b.Stats().Retries; got != 1 {
		t.Errorf("offset 0 ran again at attempt 2; Stats.Retries over both members: got %d, want 1", got)
	}
}

// TestRetriesCountedWhenHandedOver: a retry that member A charges and
// hands over in its final commit, never handing it out itself, counts
// once over A and B, which resumes it at its attempt from the metadata:
// a failure returned during A's drain (its Do still running when A
// stops), and a second named item of the same lane, charged behind the
// first while it waits out its backoff. Neither counted before (the group
// prober's finding, 3 of 3 runs; the lane mate, a review's).
func TestRetriesCountedWhenHandedOver(t *testing.T) {
	for _, tt := range []struct {
		name    string
		topic   string
		inDrain bool // offset 0's first call returns its failure during A's drain
		want    int64
		seen1   []int // the attempts offset 1 runs at (offset 0: 1, then 2)
	}{
		{"failure in the drain", "retries-drain", true, 1, []int{1}},
		{"charged lane mate", "retries-lane-mate", false, 2, []int{1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // mostly waits on the broker and the backoff
			const n = 3
			r := newRig(t, tt.topic, 1, n, 1) // one key: one lane
			var mu sync.Mutex
			seen := map[int64][]int{}
			entered := make(chan struct{})
			var once sync.Once
			var a *Group[*Message]
			do := func(ctx context.Context, batch []*Message) error {
				var failed BatchError
				mu.Lock()
				for i, m := range batch {
					seen[m.Offset] = append(seen[m.Offset], m.Attempt)
					if m.Attempt == 1 && (m.Offset == 0 || m.Offset == 1 && !tt.inDrain) {
						failed.Fail(i, errors.New("fails once"))
					}
				}
				mu.Unlock()
				if tt.inDrain && batch[0].Offset == 0 && batch[0].Attempt == 1 {
					once.Do(func() { close(entered) })
					returnInDrain(a)
				}
				return failed.Err()
			}
			cfg := r.config(tt.topic)
			cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Minute
			if tt.inDrain {
				cfg.Size = 1
			}
			cfg.DrainTimeout = 5 * time.Second
			cfg.Retry = Retry{Backoff: 2 * time.Second, MaxBackoff: 2 * time.Second, Jitter: -1}
			a = newGroup(t, cfg, do)
			stopA := run(t, a)
			if tt.inDrain {
				<-entered // Do returns its failure once A's stop has revoked the partition
			} else {
				waitFor(t, time.Minute, "the failure", func() bool { return a.Stats().Retrying >= 1 })
			}
			if err := stopA(); err != nil {
				t.Fatal(err)
			}
			cfg.Ticker = 10 * time.Millisecond
			b := newGroup(t, cfg, do)
			stopB := run(t, b)
			waitFor(t, time.Minute, "offsets 0 and 1 run again", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seen[0]) == 2 && len(seen[1]) == len(tt.seen1)
			})
			if err := stopB(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(seen[0], []int{1, 2}) || !slices.Equal(seen[1], tt.seen1) {
				t.Errorf("offsets 0 and 1 ran at attempts %v and %v, want [1 2] and %v", seen[0], seen[1], tt.seen1)
			}
			if got := a.Stats().Retries + b.Stats().Retries; got != tt.want {
				t.Errorf("Stats.Retries over both members: got %d (A %d, B %d), want %d; attempts seen %v",
					got, a.Stats().Retries, b.Stats().Retries, tt.want, seen)
			}
		})
	}
}

// TestRetriesNotCountedPastMaxAttempts: with MaxAttempts 1 no message is
// ever handed out again, so Stats.Retries stays 0. A lane mate charged
// past MaxAttempts (named failed behind a failed or deferred first item)
// is dead-lettered in its turn without running; handed over at a revoke,
// the next owner dead-letters it too. Counting it at the handover counted
// a retry that never happens (a review of the handover count).
func TestRetriesNotCountedPastMaxAttempts(t *testing.T) {
	for _, tt := range []struct {
		name    string
		topic   string
		inDrain bool
	}{
		{"failure in the drain", "retries-exhausted-drain", true},
		{"behind a deferral at the revoke", "retries-exhausted-defer", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const n = 2
			r := newRig(t, tt.topic, 1, n, 1) // one key: one lane
			var mu sync.Mutex
			seen := map[int64][]int{}
			entered := make(chan struct{})
			var once sync.Once
			var a *Group[*Message]
			first := true
			do := func(ctx context.Context, batch []*Message) error {
				var be BatchError
				mu.Lock()
				isFirst := first
				first = false
				for i, m := range batch {
					seen[m.Offset] = append(seen[m.Offset], m.Attempt)
					if !isFirst {
						continue
					}
					switch {
					case m.Offset == 0 && tt.inDrain:
						be.Fail(i, errors.New("fails"))
					case m.Offset == 0:
						be.Defer(i, 3*time.Second)
					case m.Offset == 1:
						be.Fail(i, errors.New("fails"))
					}
				}
				mu.Unlock()
				if isFirst && tt.inDrain {
					once.Do(func() { close(entered) })
					returnInDrain(a)
				}
				return be.Err()
			}
			cfg := r.config(tt.topic)
			cfg.Size, cfg.Num, cfg.Ticker = n, 1, time.Minute
			cfg.DataPath = t.TempDir() // dead letters go to the local store
			cfg.DrainTimeout = 5 * time.Second
			cfg.Retry = Retry{Backoff: 2 * time.Second, MaxBackoff: 2 * time.Second, Jitter: -1, MaxAttempts: 1}
			a = newGroup(t, cfg, do)
			stopA := run(t, a)
			if tt.inDrain {
				<-entered // Do returns its failure once A's stop has revoked the partition
			} else {
				waitFor(t, time.Minute, "the deferral", func() bool { return a.Stats().Deferred >= 1 })
			}
			if err := stopA(); err != nil {
				t.Fatal(err)
			}
			cfg.Ticker = 10 * time.Millisecond
			cfg.DataPath = t.TempDir()
			b := newGroup(t, cfg, do)
			stopB := run(t, b)
			waitFor(t, 30*time.Second, "B to dead-letter offset 1", func() bool {
				st := b.Stats()
				return st.DeadLettered.MaxAttempts >= 1
			})
			time.Sleep(500 * time.Millisecond)
			if err := stopB(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen[1]) != 1 {
				t.Errorf("offset 1 ran %v times, want once", seen[1])
			}
			if got := a.Stats().Retries + b.Stats().Retries; got != 0 {
				t.Errorf("Stats.Retries over both members: got %d (A %d, B %d), want 0: offset 1 never ran again",
					got, a.Stats().Retries, b.Stats().Retries)
			}
		})
	}
}

// returnInDrain, called by Do on a's only worker (Num 1), returns once
// the partition of the call's items has been revoked: the call's outcome
// then settles in a's drain.
func returnInDrain(a *Group[*Message]) {
	for !a.workers[0].items[0].Revoked() {
		time.Sleep(time.Millisecond)
	}
}
