// Package flock takes the exclusive file locks with which the broker,
// localqueue and the dead-letter store hold their files, one writer at a
// time, and names the holder of a lock it is refused.
//
// On unix the lock is an advisory flock, and Lock writes the holder's
// process ID into the lock file so that a refused Lock can name it. The
// kernel drops a flock when its holder dies, but only once it has torn
// the process down: right after a kill -9 the lock is still held, for a
// few milliseconds or more (a large address space takes longer to free).
// So that a process restarted at once after kill -9 does not find its
// own dead predecessor in the way, Lock waits, for up to Wait, for a
// holder that is exiting or gone; a live holder is refused at once.
//
// On Windows the lock is LockFileEx's, refused at once, without the
// holder's ID (a range Windows locks cannot be read by others); this is
// built there, not tested. Elsewhere Lock only opens the file: it
// excludes no one.
package flock

import (
	"errors"
	"fmt"
	"time"
)

// ErrHeld matches Lock's error when another open file holds the lock (a
// *HeldError).
var ErrHeld = errors.New("lock held")

// HeldError is Lock's error when another open file holds the lock, in
// this process or another. It matches ErrHeld.
type HeldError struct {
	Path string // the lock file
	PID  int    // the holder's process ID, 0 if unknown
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s holds the lock %s", e.Holder(), e.Path)
}

// Holder names the holder: "process <pid>", or "another process" when
// its ID is unknown.
func (e *HeldError) Holder() string {
	if e.PID > 0 {
		return fmt.Sprintf("process %d", e.PID)
	}
	return "another process"
}

func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Wait bounds how long Lock waits for a holder that is exiting or gone
// to let go.
const Wait = 2 * time.Second
