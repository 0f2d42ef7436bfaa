//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package main

import "os"

// terminalWidth reports whether f is a terminal (a character device) and,
// if so, its width in columns (0: unknown on this platform).
func terminalWidth(f *os.File) (width int, ok bool) {
	fi, err := f.Stat()
	return 0, err == nil && fi.Mode()&os.ModeCharDevice != 0
}
