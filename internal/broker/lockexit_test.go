//go:build linux

package broker

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/orderly-go/orderly/internal/flock"
	"github.com/orderly-go/orderly/internal/proctest"
)

// TestLockChild is the lock holder of the lock tests (proctest.HoldLock):
// run as their child, it starts a broker on its directory and waits to be
// killed.
func TestLockChild(t *testing.T) {
	if !proctest.HoldLock(func(dir string) (any, error) { return Start(Config{DataDir: dir}) }) {
		t.Skip("the lock holder of TestLockAfterKill and TestLockLiveHolder")
	}
}

// closer makes a Broker an io.Closer.
type closer struct{ b *Broker }

func (c closer) Close() error { c.b.Close(); return nil }

// TestLockAfterKill: a broker started right after the one before on the
// same DataDir was SIGKILLed gets the lock (it waits for the kernel to
// finish tearing the killed one down instead of refusing), round after
// round.
func TestLockAfterKill(t *testing.T) {
	dir := t.TempDir()
	proctest.OpenAfterKills(t, "TestLockChild", dir, 10, func() (io.Closer, error) {
		b, err := Start(Config{DataDir: dir})
		if err != nil {
			return nil, err
		}
		return closer{b}, nil
	})
}

// TestLockLiveHolder: a broker beside a live one on the same DataDir is
// refused at once, with an error naming the directory, the lock file and
// the holder's ID; so is a second one in the same process, and one after
// Close is not.
func TestLockLiveHolder(t *testing.T) {
	dir := t.TempDir()
	proctest.RefusedBesideHolder(t, "TestLockChild", dir, func() error { _, err := Start(Config{DataDir: dir}); return err },
		dir, filepath.Join(dir, LockFile))

	// In this process: a second broker is refused until the first closes.
	other := filepath.Join(t.TempDir(), "new") // created by Start
	b, err := Start(Config{DataDir: other})
	if err != nil {
		t.Fatal(err)
	}
	var held *flock.HeldError
	if _, err := Start(Config{DataDir: other}); !errors.As(err, &held) || held.PID != os.Getpid() {
		t.Errorf("a second Start in the same process: got %v, want a *flock.HeldError with PID %d", err, os.Getpid())
	}
	b.Close()
	b, err = Start(Config{DataDir: other})
	if err != nil {
		t.Fatalf("Start after Close: %v", err)
	}
	b.Close()
}
