package localqueue

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOnDeadCallsQueue: OnDead runs without the queue's locks, so it can
// call the queue's methods, also while a Close waits for those locks
// (a read lock taken again behind a waiting writer would deadlock), on
// both paths to a dead letter: Requeue and the scanner's timeout.
func TestOnDeadCallsQueue(t *testing.T) {
	for _, timeout := range []bool{false, true} {
		for _, closing := range []bool{false, true} {
			name := fmt.Sprintf("timeout=%v/Close waiting=%v", timeout, closing)
			t.Run(name, func(t *testing.T) { testOnDeadCallsQueue(t, timeout, closing) })
		}
	}
}

func testOnDeadCallsQueue(t *testing.T, timeout, closing bool) {
	clock := newFakeClock()
	dir := t.TempDir()
	dlq := openQueue(t, Options{Name: "dead", DataPath: dir, now: clock.Now})
	var q *Queue
	closed := make(chan error, 1)
	type call struct {
		id     ID
		dead   uint64 // Stats.Dead seen by OnDead
		putErr error
	}
	calls := make(chan call, 10)
	onDead := func(m *Message) {
		if closing {
			go func() { closed <- q.Close() }()
			waitForClose(closed)
		}
		st := q.Stats()
		_, err := q.Put([]byte("from OnDead"))
		calls <- call{m.ID, st.Dead, err}
	}
	q = openQueue(t, Options{DataPath: dir, MsgTimeout: time.Second, MaxAttempts: 1, DeadLetter: dlq, OnDead: onDead, now: clock.Now})
	id := mustPut(t, q, "poison")
	mustGet(t, q)

	done := make(chan error, 1)
	go func() {
		if timeout {
			clock.Add(time.Second)
			q.scan()
			done <- nil
		} else {
			done <- q.Requeue(id, 0)
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("dead-lettering with an OnDead that calls the queue: still blocked after 10s, want it done")
	}
	c := <-calls
	if c.id != id || c.dead != 1 {
		t.Fatalf("OnDead: got %s with Stats.Dead %d, want %s with 1", c.id, c.dead, id)
	}
	if closing {
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		if c.putErr != nil && !errors.Is(c.putErr, ErrClosed) {
			t.Fatalf("Put from OnDead during Close: got %v, want nil or ErrClosed", c.putErr)
		}
	} else {
		if c.putErr != nil {
			t.Fatalf("Put from OnDead: %v", c.putErr)
		}
		if m := mustGet(t, q); string(m.Body) != "from OnDead" {
			t.Fatalf("Get after OnDead: got %q, want %q", m.Body, "from OnDead")
		}
	}
	if m := mustGet(t, dlq); m.ID != id {
		t.Fatalf("dead-letter queue: got %s %q, want %s", m.ID, m.Body, id)
	}
	select {
	case c := <-calls:
		t.Fatalf("OnDead: got a second call with %s, want one", c.id)
	default:
	}
}

// waitForClose returns once Close has returned (its result is put back on
// closed) or is blocked waiting for the queue's locks. It runs inside
// OnDead, so it cannot fail the test; after 10s it gives up.
func waitForClose(closed chan error) {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		select {
		case err := <-closed:
			closed <- err
			return
		default:
		}
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "localqueue.(*Queue).shutdown") && strings.Contains(g, "sync.(*RWMutex).Lock") {
				return
			}
		}
	}
}

// TestOnDeadOrder: messages that die in one scan reach the dead-letter
// queue and OnDead in the order they timed out, each once.
func TestOnDeadOrder(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	dlq := openQueue(t, Options{Name: "dead", DataPath: dir, now: clock.Now})
	var mu sync.Mutex
	var order []string
	q := openQueue(t, Options{
		DataPath: dir, MsgTimeout: time.Second, MaxAttempts: 1, DeadLetter: dlq, now: clock.Now,
		OnDead: func(m *Message) { mu.Lock(); order = append(order, string(m.Body)); mu.Unlock() },
	})
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("m%d", i))
		mustPut(t, q, want[i])
	}
	for range 5 {
		mustGet(t, q)
		clock.Add(time.Millisecond) // deadlines 1ms apart
	}
	clock.Add(time.Second)
	q.scan()
	mu.Lock()
	got := order
	mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("OnDead order: got %v, want %v", got, want)
	}
	var inDLQ []string
	for _, m := range drain(t, dlq) {
		inDLQ = append(inDLQ, string(m.Body))
	}
	if !slices.Equal(inDLQ, want) {
		t.Fatalf("dead-letter queue order: got %v, want %v", inDLQ, want)
	}
}

// TestOnDeadBeforeFin: without a DeadLetter queue, OnDead is where a dead
// message goes, so the queue lets go of it (its FIN) only after OnDead
// returned: a crash while OnDead runs brings the message back, and Open
// dead-letters it again.
func TestOnDeadBeforeFin(t *testing.T) {
	clock := newFakeClock()
	var q *Queue
	var crashed string
	o := Options{
		DataPath: t.TempDir(), MaxAttempts: 1, now: clock.Now,
		OnDead: func(m *Message) {
			if crashed == "" {
				crashed = crashCopy(t, q)
			}
		},
	}
	q = openQueue(t, o)
	id := mustPut(t, q, "poison")
	mustGet(t, q)
	if err := q.Requeue(id, 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}

	var again []ID
	o.DataPath = crashed
	o.OnDead = func(m *Message) { again = append(again, m.ID) }
	q2 := openQueue(t, o)
	if len(again) != 1 || again[0] != id {
		t.Fatalf("OnDead at Open after a crash during OnDead: got %v, want [%s]", again, id)
	}
	if st := q2.Stats(); st.Journaled != 0 {
		t.Fatalf("Journaled after OnDead at Open: got %d, want 0", st.Journaled)
	}
}

// TestMaxAttemptsAcrossRestart: Attempts counts every delivery, and a
// delivery cut short by Close or a crash counts, whatever MemQueueSize:
// with MaxAttempts 3, a message stopped in flight on its third delivery is
// dead-lettered by the next Open, and one stopped on its second gets its
// third and last delivery after it. Each message fails its deliveries by
// Requeue, at once or for later (which journals it with a memory chan
// too); a crash loses what is memory-only (a message put into the memory
// chan and requeued at once, in flight from there), so that case is left
// out of the crash rows.
func TestMaxAttemptsAcrossRestart(t *testing.T) {
	type row struct {
		memQueueSize int
		crash        bool
		later        bool // Requeue for a second rather than at once
	}
	var rows []row
	for _, size := range []int{0, 10} {
		for _, crash := range []bool{false, true} {
			for _, later := range []bool{false, true} {
				if size > 0 && crash && !later {
					continue // memory-only: lost by a crash (see Durability)
				}
				rows = append(rows, row{size, crash, later})
			}
		}
	}
	for _, tt := range rows {
		t.Run(fmt.Sprintf("MemQueueSize=%d/crash=%v/later=%v", tt.memQueueSize, tt.crash, tt.later), func(t *testing.T) {
			clock := newFakeClock()
			var dead []Message
			o := Options{
				DataPath: t.TempDir(), MemQueueSize: tt.memQueueSize, MaxAttempts: 3, now: clock.Now,
				OnDead: func(m *Message) { dead = append(dead, *m) },
			}
			q := openQueue(t, o)
			// deliver gets id's next delivery, which must be attempt n.
			deliver := func(id ID, n int) {
				t.Helper()
				if m := mustGet(t, q); m.ID != id || m.Attempts != n {
					t.Fatalf("Get: got %s %q attempts %d, want %s attempts %d", m.ID, m.Body, m.Attempts, id, n)
				}
			}
			fail := func(id ID) {
				t.Helper()
				delay := time.Duration(0)
				if tt.later {
					delay = time.Second
				}
				if err := q.Requeue(id, delay); err != nil {
					t.Fatalf("Requeue: %v", err)
				}
				if tt.later {
					clock.Add(delay)
					q.scan()
				}
			}
			spent := mustPut(t, q, "spent")
			for n := 1; n <= 3; n++ {
				deliver(spent, n)
				if n < 3 {
					fail(spent)
				}
			}
			midway := mustPut(t, q, "midway")
			deliver(midway, 1)
			fail(midway)
			deliver(midway, 2)

			if tt.crash {
				o.DataPath = crashCopy(t, q)
			} else if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			q = openQueue(t, o)
			if len(dead) != 1 || dead[0].ID != spent || dead[0].Attempts != 3 {
				t.Fatalf("OnDead at Open: got %d calls %+v, want one with %s (spent), attempts 3", len(dead), dead, spent)
			}
			deliver(midway, 3)
			if err := q.Requeue(midway, 0); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			if len(dead) != 2 || dead[1].ID != midway || dead[1].Attempts != 3 {
				t.Fatalf("OnDead after the last delivery: got %d calls %+v, want a second with %s (midway), attempts 3", len(dead), dead, midway)
			}
			if m := tryGet(t, q, 50*time.Millisecond); m != nil {
				t.Fatalf("Get after both died: got %q attempts %d, want nothing", m.Body, m.Attempts)
			}
		})
	}
}
