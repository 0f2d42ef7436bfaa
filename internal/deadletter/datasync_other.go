//go:build !linux

package deadletter

import (
	"fmt"
	"os"
)

// datasync is fsync(2) (on macOS, os.File.Sync is F_FULLFSYNC).
func datasync(f *os.File) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	return nil
}
