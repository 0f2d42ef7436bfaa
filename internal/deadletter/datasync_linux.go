package deadletter

import (
	"fmt"
	"os"
	"syscall"
)

// datasync is fdatasync(2): the data and the file's new length reach the
// disk, without a journal commit for the modification time.
func datasync(f *os.File) error {
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
	}
	return nil
}
