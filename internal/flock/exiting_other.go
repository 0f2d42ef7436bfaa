//go:build unix && !linux

package flock

import (
	"errors"
	"syscall"
)

// Exiting reports whether process pid is gone. Without Linux's /proc it
// cannot tell a process that is exiting from a live one, so Lock waits
// only for holders that are gone already.
func Exiting(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
