package localqueue

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTimeoutRedelivery(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			tt.opts.now, tt.opts.MsgTimeout = clock.Now, 10*time.Second
			q := openQueue(t, tt.opts)
			id := mustPut(t, q, "x")
			first := mustGet(t, q)

			clock.Add(9 * time.Second)
			if dirty, _ := q.scan(); dirty {
				t.Fatalf("scan before the deadline: got dirty, want nothing due")
			}
			if got := q.Stats().InFlight; got != 1 {
				t.Fatalf("InFlight before the deadline: got %d, want 1", got)
			}
			clock.Add(time.Second)
			if dirty, idle := q.scan(); !dirty || !idle {
				t.Fatalf("scan at the deadline: got dirty %v idle %v, want true, true", dirty, idle)
			}
			second := mustGet(t, q)
			if second.ID != id || second.Attempts != 2 || string(second.Body) != "x" {
				t.Fatalf("redelivery: got %s attempts %d %q, want %s attempts 2 %q", second.ID, second.Attempts, second.Body, id, "x")
			}
			if first.Attempts != 1 {
				t.Fatalf("first delivery changed after redelivery: got attempts %d, want 1", first.Attempts)
			}
			if st := q.Stats(); st.TimedOut != 1 || st.Delivered != 2 {
				t.Fatalf("Stats: got timed out %d delivered %d, want 1 and 2", st.TimedOut, st.Delivered)
			}
			mustFinish(t, q, id)
		})
	}
}

func TestLateFinishRejected(t *testing.T) {
	clock := newFakeClock()
	q := openQueue(t, Options{MemQueueSize: 10, MsgTimeout: time.Second, now: clock.Now})
	id := mustPut(t, q, "x")
	mustGet(t, q)
	clock.Add(time.Second)

	// Deadline passed, scanner not yet run: rejected as timed out.
	for name, op := range map[string]func() error{
		"Finish":  func() error { return q.Finish(id) },
		"Touch":   func() error { return q.Touch(id) },
		"Requeue": func() error { return q.Requeue(id, 0) },
	} {
		if err := op(); !errors.Is(err, ErrTimedOut) || !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("%s after the deadline: got %v, want ErrTimedOut (wrapping ErrNotInFlight)", name, err)
		}
	}
	q.scan()
	// Timed out and handed back: not in flight.
	if err := q.Finish(id); !errors.Is(err, ErrNotInFlight) || errors.Is(err, ErrTimedOut) {
		t.Fatalf("Finish after the timeout was processed: got %v, want ErrNotInFlight", err)
	}
	if m := mustGet(t, q); m.ID != id || m.Attempts != 2 {
		t.Fatalf("redelivery after a rejected late Finish: got %s attempts %d, want %s attempts 2", m.ID, m.Attempts, id)
	}
	mustFinish(t, q, id)
}

func TestDeferredOrder(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			tt.opts.now = clock.Now
			q := openQueue(t, tt.opts)
			start := clock.Now()
			delays := []int{5, 1, 4, 2, 3, 2}
			for i, d := range delays {
				if _, err := q.PutDeferred(fmt.Appendf(nil, "%d-%d", d, i), time.Duration(d)*time.Second); err != nil {
					t.Fatalf("PutDeferred: %v", err)
				}
			}
			if st := q.Stats(); st.Deferred != len(delays) || st.Depth != 0 {
				t.Fatalf("Stats after PutDeferred: got deferred %d depth %d, want %d and 0", st.Deferred, st.Depth, len(delays))
			}
			if m := tryGet(t, q, 20*time.Millisecond); m != nil {
				t.Fatalf("Get before any due time: got %q, want nothing", m.Body)
			}
			var got []int
			for sec := 1; sec <= 5; sec++ {
				clock.Add(time.Second)
				q.scan()
				for _, m := range drain(t, q) {
					var d, i int
					fmt.Sscanf(string(m.Body), "%d-%d", &d, &i)
					if d != sec {
						t.Fatalf("at +%ds: got %q, want only messages due at %ds", sec, m.Body, sec)
					}
					if want := start.Add(time.Duration(d) * time.Second); !m.Due.Equal(want) {
						t.Fatalf("Due of %q: got %v, want %v", m.Body, m.Due, want)
					}
					got = append(got, d)
					mustFinish(t, q, m.ID)
				}
			}
			want := slices.Clone(delays)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("delivery order by due time: got %v, want %v", got, want)
			}
		})
	}
}

func TestRequeue(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
	}{
		{"now", 0},
		{"deferred", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			q := openQueue(t, Options{DataPath: t.TempDir(), now: clock.Now})
			id := mustPut(t, q, "x")
			m := mustGet(t, q)
			if err := q.Requeue(m.ID, tt.delay); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			if tt.delay > 0 {
				if m := tryGet(t, q, 20*time.Millisecond); m != nil {
					t.Fatalf("Get before the requeue delay: got %s, want nothing", m.ID)
				}
				clock.Add(tt.delay)
				q.scan()
			}
			again := mustGet(t, q)
			if again.ID != id || again.Attempts != 2 || !again.Due.Equal(m.Deadline.Add(-DefaultMsgTimeout).Add(tt.delay)) {
				t.Fatalf("after Requeue: got %s attempts %d due %v, want %s attempts 2 due %v", again.ID, again.Attempts, again.Due, id, m.Deadline.Add(-DefaultMsgTimeout).Add(tt.delay))
			}
			if err := q.Finish(m.ID); err != nil {
				t.Fatalf("Finish of the new delivery: %v", err)
			}
			if st := q.Stats(); st.Requeued != 1 || st.Finished != 1 {
				t.Fatalf("Stats: got requeued %d finished %d, want 1, 1", st.Requeued, st.Finished)
			}
		})
	}
}

func TestTouch(t *testing.T) {
	clock := newFakeClock()
	q := openQueue(t, Options{MemQueueSize: 10, MsgTimeout: 10 * time.Second, MaxMsgTimeout: 25 * time.Second, now: clock.Now})
	id := mustPut(t, q, "x")
	mustGet(t, q) // delivered at t0, deadline t0+10s

	steps := []struct {
		advance   time.Duration // from the previous step
		touch     bool
		wantAlive bool // still in flight after a scan
	}{
		{8 * time.Second, true, true},   // t0+8: deadline becomes t0+18
		{9 * time.Second, true, true},   // t0+17: deadline would be t0+27, capped at t0+25
		{7 * time.Second, true, true},   // t0+24: at the cap, stays t0+25
		{1 * time.Second, false, false}, // t0+25: timed out
	}
	for i, s := range steps {
		clock.Add(s.advance)
		if s.touch {
			if err := q.Touch(id); err != nil {
				t.Fatalf("step %d: Touch: %v", i, err)
			}
		}
		q.scan()
		if alive := q.Stats().InFlight == 1; alive != s.wantAlive {
			t.Fatalf("step %d: in flight: got %v, want %v", i, alive, s.wantAlive)
		}
	}
	if m := mustGet(t, q); m.ID != id || m.Attempts != 2 {
		t.Fatalf("after the touched delivery timed out: got %s attempts %d, want %s attempts 2", m.ID, m.Attempts, id)
	}
	if got := q.Stats().Touched; got != 3 {
		t.Fatalf("Touched: got %d, want 3", got)
	}
}

func TestMaxAttempts(t *testing.T) {
	tests := []struct {
		name    string
		requeue bool // fail by Requeue instead of a timeout
		dlq     bool // dead-letter into a queue as well as OnDead
	}{
		{"timeout, OnDead", false, false},
		{"requeue, OnDead", true, false},
		{"timeout, dead-letter queue", false, true},
		{"requeue, dead-letter queue", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			var mu sync.Mutex
			var dead []Message
			o := Options{
				DataPath: t.TempDir(), MsgTimeout: time.Second, MaxAttempts: 3, now: clock.Now,
				OnDead: func(m *Message) { mu.Lock(); dead = append(dead, *m); mu.Unlock() },
			}
			var dlq *Queue
			if tt.dlq {
				dlq = openQueue(t, Options{Name: "dead", DataPath: o.DataPath, now: clock.Now})
				o.DeadLetter = dlq
			}
			q := openQueue(t, o)
			id := mustPut(t, q, "poison")
			for attempt := 1; attempt <= 3; attempt++ {
				m := mustGet(t, q)
				if m.ID != id || m.Attempts != attempt {
					t.Fatalf("delivery %d: got %s attempts %d, want %s attempts %d", attempt, m.ID, m.Attempts, id, attempt)
				}
				if tt.requeue {
					if err := q.Requeue(m.ID, 0); err != nil {
						t.Fatalf("Requeue: %v", err)
					}
				} else {
					clock.Add(time.Second)
					q.scan()
				}
			}
			if m := tryGet(t, q, 50*time.Millisecond); m != nil {
				t.Fatalf("Get after MaxAttempts: got %s attempts %d, want nothing", m.ID, m.Attempts)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(dead) != 1 || dead[0].ID != id || dead[0].Attempts != 3 || string(dead[0].Body) != "poison" {
				t.Fatalf("OnDead: got %+v, want one call with %s, 3 attempts", dead, id)
			}
			if st := q.Stats(); st.Dead != 1 || st.InFlight != 0 || st.Depth != 0 {
				t.Fatalf("Stats: got dead %d in flight %d depth %d, want 1, 0, 0", st.Dead, st.InFlight, st.Depth)
			}
			if dlq != nil {
				m := mustGet(t, dlq)
				if m.ID != id || string(m.Body) != "poison" || m.Attempts != 4 {
					t.Fatalf("dead-letter queue: got %s %q attempts %d, want %s %q attempts 4 (3 before + this delivery)", m.ID, m.Body, m.Attempts, id, "poison")
				}
			}
		})
	}
}

func TestDeadLetterRefusedRedelivers(t *testing.T) {
	clock := newFakeClock()
	dlq := openQueue(t, Options{Name: "dead", now: clock.Now})
	if err := dlq.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	q := openQueue(t, Options{MemQueueSize: 10, MaxAttempts: 1, DeadLetter: dlq, now: clock.Now})
	id := mustPut(t, q, "x")
	m := mustGet(t, q)
	if err := q.Requeue(m.ID, 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if again := mustGet(t, q); again.ID != id {
		t.Fatalf("after the dead-letter queue refused: got %s, want %s redelivered", again.ID, id)
	}
	if got := q.Stats().Dead; got != 0 {
		t.Fatalf("Dead: got %d, want 0", got)
	}
}

func TestScannerRedeliversForReal(t *testing.T) {
	s := startScanner(t, ScannerOptions{ScanInterval: 5 * time.Millisecond})
	q := openQueue(t, Options{MemQueueSize: 10, MsgTimeout: 20 * time.Millisecond, Scanner: s})
	id := mustPut(t, q, "x")
	if _, err := q.PutDeferred([]byte("d"), 30*time.Millisecond); err != nil {
		t.Fatalf("PutDeferred: %v", err)
	}
	if m := mustGet(t, q); m.ID != id { // the only ready one; never finished
		t.Fatalf("first Get: got %s, want %s", m.ID, id)
	}
	seen := map[string]int{}
	for seen["x"] < 2 || seen["d"] < 1 {
		m := mustGet(t, q) // the scanner redelivers x and releases d
		seen[string(m.Body)] = m.Attempts
		mustFinish(t, q, m.ID)
	}
	eventually(t, "queue leaves the active set", func() bool { a, _ := s.counts(); return a == 0 })
}

func TestDuplicateOfInFlightDropped(t *testing.T) {
	q := openQueue(t, Options{DataPath: t.TempDir()})
	id, _ := queueStaleCopyOfLive(t, q, 1)
	mustFinish(t, q, id)
}

// queueStaleCopyOfLive puts "x" and takes it in flight, writes a copy of it
// with attempts to the backend (as go-diskqueue replays after a crash),
// puts "y", and checks that Get drops the copy for "y", counting one
// duplicate. It returns the IDs of "x" and "y".
func queueStaleCopyOfLive(t *testing.T, q *Queue, attempts int) (id, other ID) {
	t.Helper()
	id = mustPut(t, q, "x")
	dup := *mustGet(t, q)
	dup.Attempts, dup.Deadline = attempts, time.Time{}
	if err := q.writeBackend(&dup); err != nil {
		t.Fatalf("writeBackend: %v", err)
	}
	other = mustPut(t, q, "y")
	if got := mustGet(t, q); got.ID != other {
		t.Fatalf("Get with a duplicate of %s queued: got %s, want %s", id, got.ID, other)
	}
	if got := q.Stats().Duplicates; got != 1 {
		t.Fatalf("Duplicates: got %d, want 1", got)
	}
	return id, other
}

// TestBackendWriteFailure: Put reports a failed backend write; a
// redelivery that cannot be written is kept (deferred) instead of lost.
func TestBackendWriteFailure(t *testing.T) {
	clock := newFakeClock()
	q := openQueue(t, Options{MemQueueSize: 0, now: clock.Now})
	mustPut(t, q, "x")
	m := mustGet(t, q)
	q.mem.empty(true) // every later write fails

	if _, err := q.Put([]byte("y")); err == nil || !strings.Contains(err.Error(), "write message") {
		t.Fatalf("Put with a failing backend: got %v, want a write error", err)
	}
	if err := q.Requeue(m.ID, 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	st := q.Stats()
	if st.Deferred != 1 || st.WriteErrors != 2 {
		t.Fatalf("Stats after failed writes: got deferred %d write errors %d, want 1 and 2", st.Deferred, st.WriteErrors)
	}
	q.deferredMu.Lock()
	due := q.deferredPQ.Peek().Deadline
	q.deferredMu.Unlock()
	if want := clock.Now().Add(retryDelay); !due.Equal(want) {
		t.Fatalf("retry of the failed write: got due %v, want %v", due, want)
	}
}
