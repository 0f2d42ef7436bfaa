package localqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOpenRejectsBadOptions(t *testing.T) {
	memoryOnly := openQueue(t, Options{Name: "dead"})
	tests := []struct {
		name  string
		opts  Options
		field string // the fields the error names, space-separated
	}{
		{"empty name", Options{}, "Name"},
		{"name with slash", Options{Name: "a/b"}, "Name"},
		{"name dotdot", Options{Name: ".."}, "Name"},
		{"name too long", Options{Name: strings.Repeat("x", 65)}, "Name"},
		{"negative MemQueueSize", Options{Name: "q", MemQueueSize: -1}, "MemQueueSize"},
		{"negative SyncEvery", Options{Name: "q", SyncEvery: -1}, "SyncEvery"},
		{"negative SyncTimeout", Options{Name: "q", SyncTimeout: -time.Second}, "SyncTimeout"},
		{"negative MaxMsgSize", Options{Name: "q", MaxMsgSize: -1}, "MaxMsgSize"},
		{"file smaller than a message", Options{Name: "q", MaxMsgSize: 1000, MaxBytesPerFile: 1000}, "MaxBytesPerFile"},
		{"negative MsgTimeout", Options{Name: "q", MsgTimeout: -time.Second}, "MsgTimeout"},
		{"MaxMsgTimeout below MsgTimeout", Options{Name: "q", MsgTimeout: time.Minute, MaxMsgTimeout: time.Second}, "MaxMsgTimeout"},
		{"negative MaxReqTimeout", Options{Name: "q", MaxReqTimeout: -time.Second}, "MaxReqTimeout"},
		{"negative MaxAttempts", Options{Name: "q", MaxAttempts: -1}, "MaxAttempts"},
		{"MaxAttempts without a dead end", Options{Name: "q", MaxAttempts: 3}, "MaxAttempts"},
		{"durable queue, memory-only DeadLetter", Options{Name: "q", DataPath: t.TempDir(), MaxAttempts: 3, DeadLetter: memoryOnly}, "DeadLetter DataPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Open(tt.opts)
			if err == nil {
				q.Close()
				t.Fatalf("Open: got nil error, want one naming %s", tt.field)
			}
			for _, field := range strings.Fields(tt.field) {
				if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), field) {
					t.Fatalf("Open: got %v, want ErrOptions naming %s", err, tt.field)
				}
			}
		})
	}
}

func TestOpenDefaults(t *testing.T) {
	q := openQueue(t, Options{})
	o := q.opts
	tests := []struct {
		name      string
		got, want any
	}{
		{"MaxBytesPerFile", o.MaxBytesPerFile, int64(DefaultMaxBytesPerFile)},
		{"SyncEvery", o.SyncEvery, int64(DefaultSyncEvery)},
		{"SyncTimeout", o.SyncTimeout, DefaultSyncTimeout},
		{"MaxMsgSize", o.MaxMsgSize, DefaultMaxMsgSize},
		{"MsgTimeout", o.MsgTimeout, DefaultMsgTimeout},
		{"MaxMsgTimeout", o.MaxMsgTimeout, DefaultMaxMsgTimeout},
		{"MaxReqTimeout", o.MaxReqTimeout, DefaultMaxReqTimeout},
		{"MemQueueSize", o.MemQueueSize, 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestOpenLocksDataPath(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir})
	if _, err := Open(Options{Name: "q", DataPath: dir, Scanner: idleScanner(t)}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open of the same queue: got %v, want ErrLocked", err)
	}
	other := openQueue(t, Options{Name: "other", DataPath: dir})
	mustPut(t, other, "x")
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	openQueue(t, Options{DataPath: dir}) // the lock went with Close
}

// modes are the storage paths every basic test runs through.
func modes(t *testing.T) []struct {
	name string
	opts Options
	fifo bool
} {
	return []struct {
		name string
		opts Options
		fifo bool
	}{
		{"memory chan", Options{MemQueueSize: 100}, true},
		{"memory backend", Options{MemQueueSize: 0}, true},
		{"memory chan overflowing", Options{MemQueueSize: 3}, false},
		{"disk", Options{DataPath: t.TempDir()}, true},
		{"disk behind memory chan", Options{DataPath: t.TempDir(), MemQueueSize: 3}, false},
	}
}

func TestPutGetFinish(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			tt.opts.now = clock.Now
			q := openQueue(t, tt.opts)
			const n = 20
			putAt := clock.Now()
			ids := map[ID]string{}
			for i := range n {
				body := fmt.Sprintf("m%02d", i)
				ids[mustPut(t, q, body)] = body
			}
			if got := q.Depth(); got != n {
				t.Fatalf("Depth after %d puts: got %d, want %d", n, got, n)
			}
			clock.Add(time.Second)
			var bodies []string
			for range n {
				m := mustGet(t, q)
				if want, ok := ids[m.ID]; !ok || want != string(m.Body) {
					t.Fatalf("Get: got %s %q, want one of the IDs Put returned with its body", m.ID, m.Body)
				}
				delete(ids, m.ID)
				if m.Attempts != 1 {
					t.Errorf("Attempts: got %d, want 1", m.Attempts)
				}
				if !m.Timestamp.Equal(putAt) || !m.Due.Equal(putAt) {
					t.Errorf("Timestamp, Due: got %v, %v, want %v", m.Timestamp, m.Due, putAt)
				}
				if want := clock.Now().Add(DefaultMsgTimeout); !m.Deadline.Equal(want) {
					t.Errorf("Deadline: got %v, want %v", m.Deadline, want)
				}
				bodies = append(bodies, string(m.Body))
				mustFinish(t, q, m.ID)
			}
			if tt.fifo && !slices.IsSorted(bodies) {
				t.Errorf("order: got %v, want FIFO", bodies)
			}
			if m := tryGet(t, q, 20*time.Millisecond); m != nil {
				t.Fatalf("Get on an empty queue: got %q, want nothing", m.Body)
			}
			st := q.Stats()
			if st.Puts != n || st.Delivered != n || st.Finished != n || st.InFlight != 0 || st.Depth != 0 {
				t.Errorf("Stats: got %+v, want %d put, delivered and finished, nothing left", st, n)
			}
		})
	}
}

func TestPutCopiesBody(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			q := openQueue(t, tt.opts)
			body := []byte("original")
			mustPut(t, q, string(body))
			id, err := q.Put(body)
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			copy(body, "CHANGED!")
			for range 2 {
				m := mustGet(t, q)
				if string(m.Body) != "original" {
					t.Fatalf("body of %s after the caller changed its slice: got %q, want %q", id, m.Body, "original")
				}
			}
		})
	}
}

func TestOperationErrors(t *testing.T) {
	clock := newFakeClock()
	q := openQueue(t, Options{MaxMsgSize: 10, MaxReqTimeout: time.Minute, MsgTimeout: time.Second, now: clock.Now})
	mustPut(t, q, "a")
	finished := mustGet(t, q)
	mustFinish(t, q, finished.ID)
	mustPut(t, q, "b")
	live := mustGet(t, q)

	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"Put too large", func() error { _, err := q.Put(make([]byte, 11)); return err }, ErrTooLarge},
		{"PutDeferred too large", func() error { _, err := q.PutDeferred(make([]byte, 11), time.Second); return err }, ErrTooLarge},
		{"PutDeferred negative delay", func() error { _, err := q.PutDeferred([]byte("x"), -time.Second); return err }, ErrInvalidDelay},
		{"PutDeferred delay above MaxReqTimeout", func() error { _, err := q.PutDeferred([]byte("x"), time.Hour); return err }, ErrInvalidDelay},
		{"Finish unknown", func() error { return q.Finish(ID{1}) }, ErrNotInFlight},
		{"Finish twice", func() error { return q.Finish(finished.ID) }, ErrNotInFlight},
		{"Requeue unknown", func() error { return q.Requeue(ID{1}, 0) }, ErrNotInFlight},
		{"Requeue finished", func() error { return q.Requeue(finished.ID, 0) }, ErrNotInFlight},
		{"Requeue negative delay", func() error { return q.Requeue(live.ID, -1) }, ErrInvalidDelay},
		{"Requeue delay above MaxReqTimeout", func() error { return q.Requeue(live.ID, 2*time.Minute) }, ErrInvalidDelay},
		{"Touch unknown", func() error { return q.Touch(ID{1}) }, ErrNotInFlight},
		{"Touch finished", func() error { return q.Touch(finished.ID) }, ErrNotInFlight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.op(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	// The rejected operations left the live delivery alone.
	mustFinish(t, q, live.ID)
}

func TestClosedQueueErrors(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			q := openQueue(t, tt.opts)
			mustPut(t, q, "a")
			m := mustGet(t, q)
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			ops := []struct {
				name string
				op   func() error
			}{
				{"Put", func() error { _, err := q.Put([]byte("x")); return err }},
				{"PutDeferred", func() error { _, err := q.PutDeferred([]byte("x"), time.Second); return err }},
				{"Get", func() error { _, err := q.Get(context.Background()); return err }},
				{"Finish", func() error { return q.Finish(m.ID) }},
				{"Requeue", func() error { return q.Requeue(m.ID, 0) }},
				{"Touch", func() error { return q.Touch(m.ID) }},
				{"Replace", func() error { _, err := q.Replace(m.ID, []byte("x"), 0); return err }},
				{"Sync", q.Sync},
				{"Empty", q.Empty},
				{"Close", q.Close},
				{"Delete", q.Delete},
			}
			for _, op := range ops {
				if err := op.op(); !errors.Is(err, ErrClosed) {
					t.Errorf("%s after Close: got %v, want ErrClosed", op.name, err)
				}
			}
		})
	}
}

// TestGetWaitsAndStops: a Get ends with its context; one blocked on an
// empty queue takes the message a later Put brings, and one blocked when
// Close begins returns ErrClosed (with a DataPath a missed wake-up would
// also deadlock Close, which waits for getMu).
func TestGetWaitsAndStops(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			q := openQueue(t, tt.opts)
			blocked := func() {
				t.Helper()
				waitForGoroutine(t, "Get blocked", "[select", "localqueue.(*Queue).Get(")
			}

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { _, err := q.Get(ctx); errc <- err }()
			blocked()
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("Get with a cancelled context: got %v, want context.Canceled", err)
			}

			got := make(chan *Message, 1)
			go func() {
				m, err := q.Get(context.Background())
				if err != nil {
					t.Errorf("blocked Get: %v", err)
				}
				got <- m
			}()
			blocked()
			id := mustPut(t, q, "late")
			if m := <-got; m == nil || m.ID != id {
				t.Fatalf("blocked Get: got %v, want the message put after it started", m)
			}

			go func() { _, err := q.Get(context.Background()); errc <- err }()
			blocked()
			closed := make(chan error, 1)
			go func() { closed <- q.Close() }()
			for range 2 {
				select {
				case err := <-errc:
					if !errors.Is(err, ErrClosed) {
						t.Fatalf("Get blocked across Close: got %v, want ErrClosed", err)
					}
					errc = nil
				case err := <-closed:
					if err != nil {
						t.Fatalf("Close: %v", err)
					}
					closed = nil
				case <-time.After(10 * time.Second):
					t.Fatalf("after 10s: Get returned: %v, Close returned: %v; want both (Close must wake a blocked Get)", errc == nil, closed == nil)
				}
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	for _, tt := range modes(t) {
		t.Run(tt.name, func(t *testing.T) {
			q := openQueue(t, tt.opts)
			for i := range 10 {
				mustPut(t, q, fmt.Sprint(i))
			}
			if _, err := q.PutDeferred([]byte("later"), time.Minute); err != nil {
				t.Fatalf("PutDeferred: %v", err)
			}
			inFlight := mustGet(t, q)
			if err := q.Empty(); err != nil {
				t.Fatalf("Empty: %v", err)
			}
			st := q.Stats()
			if st.Depth != 0 || st.InFlight != 0 || st.Deferred != 0 {
				t.Fatalf("Stats after Empty: got depth %d, in flight %d, deferred %d, want all 0", st.Depth, st.InFlight, st.Deferred)
			}
			if err := q.Finish(inFlight.ID); !errors.Is(err, ErrNotInFlight) {
				t.Fatalf("Finish after Empty: got %v, want ErrNotInFlight", err)
			}
			id := mustPut(t, q, "after")
			if m := mustGet(t, q); m.ID != id {
				t.Fatalf("Get after Empty: got %s, want %s", m.ID, id)
			}
		})
	}
}

func TestDeleteRemovesFiles(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir})
	for i := range 10 {
		mustPut(t, q, fmt.Sprint(i))
	}
	if err := q.Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "q.*"))
	if len(left) != 0 {
		t.Fatalf("files after Delete: got %v, want none", left)
	}
	q2 := openQueue(t, Options{DataPath: dir})
	if d := q2.Depth(); d != 0 {
		t.Fatalf("Depth after Delete and Open: got %d, want 0", d)
	}
}

func TestMemoryOnlyTouchesNoDisk(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	q := openQueue(t, Options{MemQueueSize: 0})
	mustPut(t, q, "x")
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("working directory after a memory-only queue: got %v (%v), want empty", entries, err)
	}
}

func TestIDText(t *testing.T) {
	q := openQueue(t, Options{MemQueueSize: 1})
	id := mustPut(t, q, "x")
	text, _ := id.MarshalText()
	if string(text) != id.String() || len(text) != 32 {
		t.Fatalf("MarshalText: got %q, want String() %q (32 hex digits)", text, id.String())
	}
	var back ID
	if err := back.UnmarshalText(text); err != nil || back != id {
		t.Fatalf("UnmarshalText(%q): got %s, %v, want %s", text, back, err, id)
	}
	if err := back.UnmarshalText([]byte("zz")); err == nil {
		t.Fatalf("UnmarshalText(zz): got nil error, want one")
	}
	other := mustPut(t, q, "y")
	if other == id || bytes.Equal(other[:8], make([]byte, 8)) {
		t.Fatalf("IDs: got %s then %s, want distinct IDs with a random prefix", id, other)
	}
}
