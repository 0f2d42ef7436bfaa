package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// lockDir takes an exclusive lock (LockFileEx) on <dir>/deadletters.lock;
// Windows drops it when its holder exits.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("deadletter: lock %s: %w", path, err)
	}
	var ol windows.Overlapped
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if err != nil {
		f.Close()
		if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return nil, &LockedError{Dir: dir, Lock: path}
		}
		return nil, fmt.Errorf("deadletter: lock %s: %w", path, err)
	}
	return f, nil
}

// syncDir is a no-op: Windows cannot fsync a directory, and NTFS journals
// renames itself.
func syncDir(string) error { return nil }
