package localqueue

import (
	"testing"
	"time"
)

// TestSync: with a SyncEvery that would wait for thousands of records and
// a SyncTimeout of an hour, deferred messages' journal records are
// unsynced until Sync, which fsyncs them at once; memory mode has nothing
// to sync.
func TestSync(t *testing.T) {
	q := openQueue(t, Options{Name: "sync", DataPath: t.TempDir(), SyncEvery: 1 << 20, SyncTimeout: time.Hour, Scanner: idleScanner(t)})
	for range 3 {
		if _, err := q.PutDeferred([]byte("later"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	unsynced := func() int64 {
		q.journal.mu.Lock()
		defer q.journal.mu.Unlock()
		return q.journal.unsynced
	}
	if got := unsynced(); got != 3 {
		t.Fatalf("unsynced journal records before Sync: got %d, want 3", got)
	}
	if err := q.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got := unsynced(); got != 0 {
		t.Fatalf("unsynced journal records after Sync: got %d, want 0", got)
	}
	mem := openQueue(t, Options{Name: "mem", Scanner: idleScanner(t)})
	if err := mem.Sync(); err != nil {
		t.Fatalf("Sync in memory mode: %v", err)
	}
}
