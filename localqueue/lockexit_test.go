//go:build linux

package localqueue

import (
	"errors"
	"io"
	"testing"

	"github.com/orderly-go/orderly/internal/proctest"
)

// TestLockChild is the lock holder of the lock tests (proctest.HoldLock):
// run as their child, it opens queue "q" on its directory and waits to be
// killed.
func TestLockChild(t *testing.T) {
	if !proctest.HoldLock(func(dir string) (any, error) { return Open(Options{Name: "q", DataPath: dir}) }) {
		t.Skip("the lock holder of TestLockAfterKill and TestLockLiveHolder")
	}
}

// TestLockAfterKill: an Open right after the holder was SIGKILLed gets
// the lock (it waits for the kernel to finish tearing the holder down
// instead of refusing), round after round.
func TestLockAfterKill(t *testing.T) {
	dir := t.TempDir()
	sc := idleScanner(t)
	proctest.OpenAfterKills(t, "TestLockChild", dir, 10, func() (io.Closer, error) { return Open(Options{Name: "q", DataPath: dir, Scanner: sc}) })
}

// TestLockLiveHolder: a holder that lives on is refused at once, with
// an error naming the lock file and the holder's ID.
func TestLockLiveHolder(t *testing.T) {
	dir := t.TempDir()
	sc := idleScanner(t)
	err := proctest.RefusedBesideHolder(t, "TestLockChild", dir, func() error {
		_, err := Open(Options{Name: "q", DataPath: dir, Scanner: sc})
		return err
	}, dir+"/q.lock")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open beside a live holder: got %v, want ErrLocked", err)
	}
}
