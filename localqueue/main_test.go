package localqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is an injected clock that moves only when a test says so.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// idleScanner is a scanner that never ticks during a test: tests with a
// fake clock drive Queue.scan themselves.
func idleScanner(t *testing.T) *Scanner {
	t.Helper()
	s, err := NewScanner(ScannerOptions{ScanInterval: time.Hour})
	if err != nil {
		t.Fatalf("NewScanner: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openQueue opens a queue with test defaults (name "q", an idle scanner)
// and closes it at cleanup unless the test did.
func openQueue(t *testing.T, o Options) *Queue {
	t.Helper()
	if o.Name == "" {
		o.Name = "q"
	}
	if o.Scanner == nil {
		o.Scanner = idleScanner(t)
	}
	q, err := Open(o)
	if err != nil {
		t.Fatalf("Open(%+v): %v", o, err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close at cleanup: %v", err)
		}
	})
	return q
}

// mustGet returns the next message, failing after a generous 10s.
func mustGet(t *testing.T, q *Queue) *Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := q.Get(ctx)
	if err != nil {
		t.Fatalf("Get: got error %v, want a message", err)
	}
	return m
}

// tryGet returns a message if one arrives within wait, else nil.
func tryGet(t *testing.T, q *Queue, wait time.Duration) *Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m, err := q.Get(ctx)
	switch {
	case err == nil:
		return m
	case errors.Is(err, context.DeadlineExceeded):
		return nil
	default:
		t.Fatalf("Get: got error %v, want a message or a timeout", err)
		return nil
	}
}

// drain gets every ready message: until a short Get finds nothing and the
// queue reports no unread depth (records on disk that turn out to be
// deferred leave the depth as Get reads them). It gives up after 10s.
func drain(t *testing.T, q *Queue) []*Message {
	t.Helper()
	var out []*Message
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := tryGet(t, q, 50*time.Millisecond); m != nil {
			out = append(out, m)
			continue
		}
		if q.Depth() == 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("drain: depth %d but no message for 10s", q.Depth())
		}
	}
}

func mustPut(t *testing.T, q *Queue, body string) ID {
	t.Helper()
	id, err := q.Put([]byte(body))
	if err != nil {
		t.Fatalf("Put(%q): %v", body, err)
	}
	return id
}

func mustFinish(t *testing.T, q *Queue, id ID) {
	t.Helper()
	if err := q.Finish(id); err != nil {
		t.Fatalf("Finish(%s): %v", id, err)
	}
}

// eventually polls cond every few milliseconds until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still false after 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
