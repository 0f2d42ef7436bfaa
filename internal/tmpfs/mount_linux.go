package tmpfs

import (
	"fmt"
	"syscall"
)

func mount(dir string, size int64) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		return fmt.Errorf("mount a tmpfs of %d bytes on %s: %w", size, dir, err)
	}
	return nil
}

func unmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the tmpfs on %s: %w", dir, err)
	}
	return nil
}

// available is the space left to an unprivileged writer on dir's file
// system.
func available(dir string) (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(fs.Bavail) * fs.Bsize, nil
}
