//go:build unix

package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderly-go/orderly/internal/flock"
)

// lockFile takes an exclusive advisory lock on <dir>/<name>.lock so that
// two Queues never run go-diskqueue on the same files, in this process or
// another, and writes this process's ID into it so that a refused Open
// can name the holder. The kernel drops the lock when the process dies,
// so a crash never leaves it behind; a holder that is exiting (right
// after a kill -9) is waited for, up to flock.Wait, so that a process
// restarted at once gets the lock its dead predecessor held.
func lockFile(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name+".lock")
	f, holder, err := flock.Lock(path, 0o600)
	if errors.Is(err, flock.ErrHeld) {
		if holder > 0 {
			return nil, fmt.Errorf("%w: process %d holds its lock %s", ErrLocked, holder, path)
		}
		return nil, fmt.Errorf("%w: another process holds its lock %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("localqueue: %w", err)
	}
	return f, nil
}
