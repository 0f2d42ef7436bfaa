//go:build unix

package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDir takes an exclusive advisory lock (flock) on <dir>/deadletters.lock
// and writes this process's ID into it, so that a refused Open can say
// who holds it. The kernel drops the lock when its holder dies, so a
// crash never leaves it behind. flock locks belong to the open file, so a
// second Open in the same process is refused too.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("deadletter: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			locked := &LockedError{Dir: dir, Lock: path}
			if b, rerr := os.ReadFile(path); rerr == nil {
				locked.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			return nil, locked
		}
		return nil, fmt.Errorf("deadletter: lock %s: %w", path, err)
	}
	// Best effort: the lock is what counts, the ID only informs.
	if f.Truncate(0) == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
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
