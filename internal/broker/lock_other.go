//go:build !unix

package broker

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockData only opens the lock file on systems without flock: two
// brokers on one data directory must be prevented by the caller.
func lockData(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: lock %s: %w", path, err)
	}
	return f, nil
}
