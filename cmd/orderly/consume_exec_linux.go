package main

import (
	"runtime"
	"syscall"
)

// setDeathSignal makes the kernel SIGKILL the command when the thread
// that started it ends: with lockThread, when consume does.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// lockThread keeps the calling goroutine on its thread until the returned
// func is called.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// selfExecutable is this process's executable, even if the file was
// replaced or removed since it started.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }
