package localqueue

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

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

// startScanner starts a scanner with o and closes it at cleanup (after
// the queues opened later, whose cleanups run first).
func startScanner(t testing.TB, o ScannerOptions) *Scanner {
	t.Helper()
	s, err := NewScanner(o)
	if err != nil {
		t.Fatalf("NewScanner: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// idleScanner is a scanner that never ticks during a test: tests with a
// fake clock drive Queue.scan themselves.
func idleScanner(t testing.TB) *Scanner {
	t.Helper()
	return startScanner(t, ScannerOptions{ScanInterval: time.Hour})
}

// openQueue opens a queue with test defaults (name "q", an idle scanner)
// and closes it at cleanup unless the test did.
func openQueue(t testing.TB, o Options) *Queue {
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
func mustGet(t testing.TB, q *Queue) *Message {
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

func mustPut(t testing.TB, q *Queue, body string) ID {
	t.Helper()
	id, err := q.Put([]byte(body))
	if err != nil {
		t.Fatalf("Put(%q): %v", body, err)
	}
	return id
}

func mustFinish(t testing.TB, q *Queue, id ID) {
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

// waitForGoroutine waits until one goroutine's stack, as runtime.Stack
// prints it, contains every one of parts: a goroutine blocked at a known
// place, which a test cannot observe otherwise.
func waitForGoroutine(t *testing.T, what string, parts ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	eventually(t, what, func() bool {
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		for _, g := range strings.Split(string(buf), "\n\n") {
			found := true
			for _, p := range parts {
				found = found && strings.Contains(g, p)
			}
			if found {
				return true
			}
		}
		buf = buf[:cap(buf)]
		return false
	})
}
