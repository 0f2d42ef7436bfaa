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
