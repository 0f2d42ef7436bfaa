//go:build linux

package flock

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// TestLockOnRemovedFile: a holder (its recorded process gone, so that
// Lock waits for it) removes the lock file and lets go, as localqueue's
// Close of a deleted queue does, while many Locks poll. One that opened
// the old file and locks it once it is let go must not keep that lock: a
// later Lock creates a new file at the path and takes its lock too. At
// most one of them may hold it. Two did, in about one trial of a dozen,
// while a file gone from the path was taken for one still there (a
// review's reproducer).
func TestLockOnRemovedFile(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for trial := range 100 {
		path := filepath.Join(t.TempDir(), "x.lock")
		h, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(h.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt([]byte(strconv.Itoa(gone.Process.Pid)+"\n"), 0); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var held []*os.File
		start := make(chan struct{})
		for range 64 {
			wg.Go(func() {
				<-start
				if f, err := Lock(path, 0o600); err == nil {
					mu.Lock()
					held = append(held, f)
					mu.Unlock()
				}
			})
		}
		close(start)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		h.Close()
		wg.Wait()
		for _, f := range held {
			f.Close()
		}
		if len(held) > 1 {
			t.Fatalf("trial %d: %d Locks of %s held at once, want at most 1", trial, len(held), path)
		}
	}
}
