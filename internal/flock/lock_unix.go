//go:build unix

package flock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// poll is how often Lock tries again meanwhile.
const poll = 10 * time.Millisecond

// Lock opens (creating it with perm) the file at path, takes an
// exclusive flock on it without blocking and writes this process's ID
// into it. flock locks belong to the open file, so a second Lock in the
// same process is refused too.
//
// If another open file holds the lock, Lock reads the holder's ID from
// the file. A holder that is exiting or gone (see Exiting) is waited for,
// trying again every 10 ms for up to Wait; any other holder (alive, or
// unknown: no ID in the file) is refused at once, with a *HeldError
// naming path and the holder. Other errors name path too.
func Lock(path string, perm os.FileMode) (*os.File, error) {
	deadline := time.Now().Add(Wait)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			// The holder may have removed the file before letting go
			// (localqueue's Close of a deleted queue does): a lock on
			// a file no longer at path, replaced or gone, excludes no
			// one.
			if fi, serr := f.Stat(); serr == nil {
				if pi, perr := os.Stat(path); errors.Is(perr, fs.ErrNotExist) || perr == nil && !os.SameFile(fi, pi) {
					f.Close()
					if time.Now().After(deadline) {
						return nil, fmt.Errorf("lock %s: the file was replaced under every lock taken for %v", path, Wait)
					}
					continue
				}
			}
			writePID(f)
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		holder := readPID(f)
		f.Close()
		if holder <= 0 || !Exiting(holder) || time.Now().After(deadline) {
			return nil, &HeldError{Path: path, PID: holder}
		}
		time.Sleep(poll)
	}
}

// writePID writes this process's ID into f, in place of what was there.
// Best effort: the lock is what counts, the ID only informs. The ID is
// written over the old one before the rest is cut off, so a reader never
// finds the file empty.
func writePID(f *os.File) {
	id := strconv.Itoa(os.Getpid()) + "\n"
	if _, err := f.WriteAt([]byte(id), 0); err == nil {
		f.Truncate(int64(len(id)))
	}
}

// readPID reads the holder's ID from f's first line, 0 if there is none.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}
