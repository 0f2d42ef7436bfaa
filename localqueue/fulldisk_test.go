package localqueue

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/tmpfs"
)

// numbered is message i of the full-disk test: 1 KiB that says which
// message it is.
func numbered(i int) []byte {
	b := make([]byte, 1<<10)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

// TestJournalOnNearlyFullDisk: with 64 KiB left on the disk, the journal
// still takes deferred messages of 1 KiB (it reserves ahead a megabyte
// at a time, and only the pages a record needs when that fails), and
// refuses the one that does not fit with ENOSPC naming the journal.
func TestJournalOnNearlyFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 2<<20)
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10})
	leave(t, dir, 64<<10)
	n := 0
	for ; n < 1000; n++ {
		if _, err := q.PutDeferred(numbered(n), time.Hour); err != nil {
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, "q.journal")) {
				t.Fatalf("PutDeferred %d: got %v, want ENOSPC naming the journal", n, err)
			}
			break
		}
	}
	if n < 32 || n == 1000 {
		t.Fatalf("deferred messages of 1 KiB taken with 64 KiB free: got %d, want 32 to 64", n)
	}
	if got := q.Stats().Deferred; got != n {
		t.Fatalf("Deferred: got %d, want %d", got, n)
	}
}

// leave fills the file system of dir with a file until free bytes are
// left, and returns the file's path. The file goes when the test ends,
// before the queue closes (Close writes go-diskqueue's metadata).
func leave(t *testing.T, dir string, free int64) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	avail := int64(fs.Bavail) * fs.Bsize
	if avail < free {
		t.Fatalf("%s has %d bytes free, want more than %d", dir, avail, free)
	}
	f := filler(t, dir)
	defer f.Close()
	if _, err := f.Write(make([]byte, avail-free)); err != nil {
		t.Fatalf("fill %s to %d bytes free: %v", dir, free, err)
	}
	return f.Name()
}

// filler creates a file in dir that is removed when the test ends.
func filler(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler")
	if err != nil {
		t.Fatalf("create a filler file: %v", err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	return f
}
