//go:build !unix && !windows

package flock

import (
	"fmt"
	"os"
)

// Lock only opens (creating it with perm) the file at path: this system
// has neither flock nor LockFileEx, so it excludes no one, and two
// writers on one file must be prevented by the caller.
func Lock(path string, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
