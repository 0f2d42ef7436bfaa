package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestBackends(t *testing.T) {
	tests := []struct {
		name string
		open func(t *testing.T) backend
	}{
		{"disk", func(t *testing.T) backend {
			o := Options{Name: "b", DataPath: t.TempDir(), MaxBytesPerFile: 4096}.withDefaults()
			o.MaxMsgSize = 100
			b, err := newDiskBackend(&o, zap.NewNop(), nil)
			if err != nil {
				t.Fatalf("newDiskBackend: %v", err)
			}
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.open(t)
			if d := b.Depth(); d != 0 {
				t.Fatalf("Depth of a new backend: got %d, want 0", d)
			}
			const n = 2500
			rec := func(i int) []byte { return []byte(fmt.Sprintf("%-50d", i)) }
			next := 0
			read := func(k int) {
				t.Helper()
				for range k {
					select {
					case got := <-b.ReadChan():
						if want := rec(next); string(got) != string(want) {
							t.Fatalf("record %d: got %q, want %q", next, got, want)
						}
						next++
					case <-time.After(10 * time.Second):
						t.Fatalf("record %d: nothing after 10s", next)
					}
				}
			}
			buf := make([]byte, 0, 64)
			for i := range n {
				buf = append(buf[:0], rec(i)...)
				if err := b.Put(buf); err != nil {
					t.Fatalf("Put: %v", err)
				}
				clear(buf[:cap(buf)]) // the backend must not keep our slice
				if i%3 == 2 {
					read(1)
				}
			}
			if got, want := b.Depth(), int64(n-next); got != want {
				t.Fatalf("Depth: got %d, want %d", got, want)
			}
			read(n - next)
			if err := b.Put(rec(0)); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if err := b.Empty(); err != nil {
				t.Fatalf("Empty: %v", err)
			}
			if d := b.Depth(); d != 0 {
				t.Fatalf("Depth after Empty: got %d, want 0", d)
			}
			if err := b.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := b.Put(rec(0)); err == nil {
				t.Fatalf("Put after Close: got nil error, want one")
			}
		})
	}
}

// TestMemFIFO runs the memory-only overflow through the same pattern as
// TestBackends (pushes with a pop after every third, past several ring
// growths and wrap-arounds, then the rest), and checks its wake-up tokens.
func TestMemFIFO(t *testing.T) {
	f := newMemFIFO()
	if r := f.pop(); r != nil || f.len() != 0 {
		t.Fatalf("new FIFO: got pop %v, len %d, want nil, 0", r, f.len())
	}
	const n = 2500
	next := 0
	read := func(k int) {
		t.Helper()
		for range k {
			r := f.pop()
			if r == nil || r.m.Attempts != next {
				t.Fatalf("record %d: got %+v, want the one pushed %d-th", next, r, next)
			}
			next++
		}
	}
	for i := range n {
		if err := f.push(newRecord(Message{Attempts: i})); err != nil {
			t.Fatalf("push: %v", err)
		}
		select {
		case <-f.ready:
		default:
			t.Fatalf("after push %d: got no wake-up token, want one", i)
		}
		if i%3 == 2 {
			read(1)
		}
	}
	if got, want := f.len(), int64(n-next); got != want {
		t.Fatalf("len: got %d, want %d", got, want)
	}
	read(1)
	select {
	case <-f.ready: // records remain: the next waiting Get must wake
	default:
		t.Fatalf("after a pop that left records: got no wake-up token, want one")
	}
	read(n - next)
	if r := f.pop(); r != nil || f.len() != 0 {
		t.Fatalf("drained FIFO: got pop %v, len %d, want nil, 0", r, f.len())
	}
	if err := f.push(newRecord(Message{})); err != nil {
		t.Fatalf("push: %v", err)
	}
	f.empty(false)
	if r := f.pop(); r != nil || f.len() != 0 {
		t.Fatalf("after empty: got pop %v, len %d, want nil, 0", r, f.len())
	}
	f.empty(true)
	if err := f.push(newRecord(Message{})); !errors.Is(err, ErrClosed) {
		t.Fatalf("push after close: got %v, want ErrClosed", err)
	}
}

// TestSyncEveryOnePutWaitsForSync: with SyncEvery 1, go-diskqueue's
// metadata already counts the message when Put returns.
func TestSyncEveryOnePutWaitsForSync(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, SyncTimeout: time.Hour})
	for i := 1; i <= 3; i++ {
		mustPut(t, q, "x")
		meta, err := os.ReadFile(filepath.Join(dir, "q.diskqueue.meta.dat"))
		if err != nil {
			t.Fatalf("read metadata: %v", err)
		}
		want := fmt.Sprintf("%d\n0,0\n0,%d\n", i, i*(4+envelopeSize(1)))
		if string(meta) != want {
			t.Fatalf("metadata after Put %d: got %q, want %q", i, meta, want)
		}
	}
}

// TestSyncEveryOneSyncFailure: with SyncEvery 1, a Put whose fsync fails
// (here go-diskqueue's metadata rename, onto a directory put in the
// metadata file's place) returns ErrNotSynced with the message's ID,
// naming the data path; the message is stored all the same, and once the
// fsync works again it and the next are delivered, once each.
func TestSyncEveryOneSyncFailure(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, SyncTimeout: time.Hour})
	mustPut(t, q, "before")
	meta := filepath.Join(dir, "q.diskqueue.meta.dat")
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := q.Put([]byte("unsynced"))
	if !errors.Is(err, ErrNotSynced) || id == (ID{}) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("Put while the fsync fails: got id %v, error %v; want its ID and ErrNotSynced naming %s and the ID", id, err, dir)
	}
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "after")
	var got []string
	for range 3 {
		m := mustGet(t, q)
		got = append(got, string(m.Body))
		mustFinish(t, q, m.ID)
	}
	if want := []string{"before", "unsynced", "after"}; !slices.Equal(got, want) {
		t.Fatalf("delivered: got %q, want %q", got, want)
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("depth after delivering all: got %d, want 0", d)
	}
}

// TestDeadLetterSyncFailure: a dead letter whose fsync fails in a
// dead-letter queue with SyncEvery 1 is written all the same, so the
// source finishes it rather than redelivering it: it is in the dead-letter
// queue once, and the source is empty.
func TestDeadLetterSyncFailure(t *testing.T) {
	dir := t.TempDir()
	dlq := openQueue(t, Options{Name: "dead", DataPath: dir, SyncEvery: 1, SyncTimeout: time.Hour})
	q := openQueue(t, Options{DataPath: dir, MaxAttempts: 1, DeadLetter: dlq})
	id := mustPut(t, q, "poison")
	if m := mustGet(t, q); m.ID != id {
		t.Fatalf("Get: got %v, want %v", m.ID, id)
	}
	meta := filepath.Join(dir, "dead.diskqueue.meta.dat")
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(id, 0); err != nil { // its last attempt failed: dead
		t.Fatalf("Requeue: %v", err)
	}
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Dead != 1 || q.Depth() != 0 || st.InFlight != 0 {
		t.Fatalf("source after the dead letter: got dead %d, depth %d, in flight %d; want 1, 0, 0", st.Dead, q.Depth(), st.InFlight)
	}
	m := mustGet(t, dlq)
	if m.ID != id || string(m.Body) != "poison" {
		t.Fatalf("dead letter: got %v %q, want %v \"poison\"", m.ID, m.Body, id)
	}
	mustFinish(t, dlq, m.ID)
	if d := dlq.Depth(); d != 0 {
		t.Fatalf("dead-letter queue depth after its one message: got %d, want 0", d)
	}
}

func TestDiskBackendWhere(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir})
	if got := q.backend.where(); !strings.HasSuffix(got, "q.diskqueue.*.dat") {
		t.Fatalf("where before any read: got %q, want the data file pattern", got)
	}
	mustPut(t, q, "x")
	mustGet(t, q)
	if got, want := q.backend.where(), filepath.Join(dir, "q.diskqueue.000000.dat"); got != want {
		t.Fatalf("where after a read: got %q, want %q", got, want)
	}
}
