//go:build unix

package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile takes an exclusive advisory lock on <dir>/<name>.lock so that
// two Queues never run go-diskqueue on the same files, in this process or
// another. The kernel drops the lock when the process dies, so a crash
// never leaves it behind.
func lockFile(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localqueue: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("localqueue: lock %s: %w", path, err)
	}
	return f, nil
}
