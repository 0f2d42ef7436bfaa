//go:build !unix

package localqueue

import (
	"errors"
	"syscall"
)

// isDiskFull reports whether err says the file system has no room left
// for this writer.
func isDiskFull(err error) bool {
	const errorHandleDiskFull, errorDiskFull = syscall.Errno(39), syscall.Errno(112) // Windows
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, errorDiskFull) || errors.Is(err, errorHandleDiskFull)
}
