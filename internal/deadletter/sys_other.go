//go:build !unix && !windows

package deadletter

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir only opens the lock file on systems without flock: two writers
// on one directory must be prevented by the caller.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("deadletter: lock %s: %w", path, err)
	}
	return f, nil
}

func syncDir(string) error { return nil }
