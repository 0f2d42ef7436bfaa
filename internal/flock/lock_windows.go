package flock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// Lock opens (creating it with perm) the file at path and takes an
// exclusive lock (LockFileEx) on its first byte without blocking. The
// lock belongs to the open file, so a second Lock in the same process is
// refused too; Windows drops it when its holder exits. A refusal is a
// *HeldError naming path, without the holder's ID; other errors name
// path too.
func Lock(path string, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var ol windows.Overlapped
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if err != nil {
		f.Close()
		if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return nil, &HeldError{Path: path}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
