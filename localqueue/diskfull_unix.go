//go:build unix

package localqueue

import (
	"errors"
	"syscall"
)

// isDiskFull reports whether err says the file system has no room left
// for this writer: out of space, or over its quota.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
