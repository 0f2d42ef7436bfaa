package flock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// pfExiting is the kernel's PF_EXITING task flag: the task is in exit.
const pfExiting = 0x4

// Exiting reports whether process pid is exiting or gone: no such
// process, a zombie or dead task (state Z or X), a task in exit
// (PF_EXITING), or one a SIGKILL is pending for (a kill -9 it has not
// acted on yet). Such a process still holds its flocks until the kernel
// has torn it down; it will not hold them long.
func Exiting(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	fields, err := StatFields(pid)
	if err != nil {
		return gone(err)
	}
	if len(fields) > 6 {
		switch fields[0] {
		case "Z", "X", "x":
			return true
		}
		if flags, err := strconv.ParseUint(fields[6], 10, 64); err == nil && flags&pfExiting != 0 {
			return true
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return gone(err)
	}
	for line := range strings.Lines(string(status)) {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

// gone reports whether a read of the process's /proc files failed because
// the process is gone (reaped meanwhile).
func gone(err error) bool { return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) }
