//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// setDeathSignal: no parent-death signal here; the exec guard alone
// kills the commands when consume dies.
func setDeathSignal(*syscall.SysProcAttr) {}

func lockThread() func() { return func() {} }

func selfExecutable() (string, error) { return os.Executable() }
