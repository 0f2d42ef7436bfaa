//go:build linux

package deadletter

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/proctest"
)

// TestLockChild is the lock holder of the lock tests (proctest.HoldLock):
// run as their child, it opens the store on its directory and waits to be
// killed.
func TestLockChild(t *testing.T) {
	if !proctest.HoldLock(func(dir string) (any, error) { return Open(dir, Options{}) }) {
		t.Skip("the lock holder of TestLockAfterKill and TestLockLiveHolder")
	}
}

// startLockHolder starts TestLockChild on dir and returns once it holds
// the lock.
func startLockHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	return proctest.StartLockHolder(t, "TestLockChild", dir)
}

// TestLockAfterKill: an Open right after the holder was SIGKILLed gets
// the lock (it waits for the kernel to finish tearing the holder down
// instead of refusing), round after round.
func TestLockAfterKill(t *testing.T) {
	dir := t.TempDir()
	proctest.OpenAfterKills(t, "TestLockChild", dir, 10, func() (io.Closer, error) { return Open(dir, Options{}) })
}

// TestLockLiveHolder: a holder that lives on is refused at once, with
// an error naming the directory, the lock file and the holder's ID.
func TestLockLiveHolder(t *testing.T) {
	dir := t.TempDir()
	cmd := startLockHolder(t, dir)
	start := time.Now()
	_, err := Open(dir, Options{})
	took := time.Since(start)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.PID != cmd.Process.Pid {
		t.Fatalf("Open beside a live holder: got %v, want a *LockedError naming process %d", err, cmd.Process.Pid)
	}
	for _, want := range []string{dir, LockFile, fmt.Sprintf("process %d", cmd.Process.Pid)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took > 500*time.Millisecond {
		t.Errorf("refused after %v, want at once (a live holder is not waited for)", took)
	}
}
