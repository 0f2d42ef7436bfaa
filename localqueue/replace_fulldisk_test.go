package localqueue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/tmpfs"
)

// TestReplaceOnFullDisk: a Replace whose journal record cannot be written
// (the disk full, the journal's reserve spent) fails with ENOSPC naming
// the journal, and leaves old in flight and nothing added: in the queue
// (its stats, and a Finish of old that succeeds) and on disk (opened
// again, the queue hands old out again, as a delivery cut short, and holds
// no new message).
func TestReplaceOnFullDisk(t *testing.T) {
	// 4 MiB: once the ballast is gone, room for the journal's compaction
	// at the second queue's Close (its live records, about the reserve it
	// had); the first Close, on the full disk, may fail.
	dir := tmpfs.Mount(t, 4<<20)
	opts := Options{DataPath: dir, Name: "q", MaxMsgSize: 64 << 10}
	q := openQueue(t, opts)
	if _, err := q.Put([]byte("old")); err != nil {
		t.Fatal(err)
	}
	old := mustGet(t, q)
	ballast := tmpfs.Fill(t, dir, 0)
	deferred := 0
	for ; ; deferred++ {
		if deferred == 100_000 {
			t.Fatal("100000 PutDeferred of 1 KiB on a full disk: none refused")
		}
		if _, err := q.PutDeferred(numbered(deferred), time.Hour); err != nil {
			break
		}
	}
	journal := filepath.Join(dir, "q.journal")
	_, err := q.Replace(old.ID, numbered(-1), time.Hour)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), journal) || !strings.Contains(err.Error(), old.ID.String()) {
		t.Fatalf("Replace on a full disk: got %v, want ENOSPC naming %s and the message %s", err, journal, old.ID)
	}
	if st := q.Stats(); st.InFlight != 1 || st.Deferred != deferred || st.Depth != 0 {
		t.Fatalf("after the failed Replace: in flight %d, deferred %d, depth %d; want 1, %d, 0 (old still in flight, nothing added)",
			st.InFlight, st.Deferred, st.Depth, deferred)
	}
	if err := q.Close(); err != nil {
		t.Logf("Close on a full disk: %v", err)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}

	q = openQueue(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := q.Get(ctx)
	if err != nil {
		t.Fatalf("Get after opening again: %v, want old handed out again", err)
	}
	if string(m.Body) != "old" || m.ID != old.ID || m.Attempts != 2 {
		t.Fatalf("Get after opening again: got %s %q attempt %d, want %s %q attempt 2", m.ID, m.Body, m.Attempts, old.ID, "old")
	}
	if st := q.Stats(); st.Depth != 0 || st.Deferred != deferred {
		t.Fatalf("opened again: depth %d, deferred %d; want 0 and %d (no replacement)", st.Depth, st.Deferred, deferred)
	}
	if err := q.Finish(m.ID); err != nil {
		t.Fatalf("Finish old after opening again: %v", err)
	}
}
