//go:build !unix

package localqueue

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockFile on systems without flock only keeps the file open; two Queues on
// the same files must be prevented by the caller.
func lockFile(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localqueue: lock %s: %w", path, err)
	}
	return f, nil
}
