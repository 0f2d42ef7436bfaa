//go:build unix

package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockDir takes an exclusive advisory lock (flock) on <dir>/deadletters.lock
// and writes this process's ID into it, so that a refused Open can say
// who holds it. The kernel drops the lock when its holder dies, so a
// crash never leaves it behind; a holder that is exiting (right after a
// kill -9) is waited for, up to flock.Wait, so that a consumer restarted
// at once gets the lock its dead predecessor held. flock locks belong to
// the open file, so a second Open in the same process is refused too.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, holder, err := flock.Lock(path, 0o644)
	if errors.Is(err, flock.ErrHeld) {
		return nil, &LockedError{Dir: dir, Lock: path, PID: holder}
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	return f, nil
}

// syncDir fsyncs a directory, so that a file created or renamed in it
// survives power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
