package localqueue

import (
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// rolledFiles works around go-diskqueue v1.1.0 (and its master) setting
// aside a data file it has read whole. When its reader has caught up with
// the writer at the end of a data file and the writer then starts the
// next one, the reader tries one more record in the old file, meets its
// end (io.EOF), takes that for damage, renames the file to .bad and moves
// on. Nothing is lost (every record in it was read), but the file, up to
// MaxBytesPerFile, stays on disk for good, once per file for a queue whose
// consumers keep up, and the error would count in Stats.BackendErrors as
// damage (which ends the journal's stale-copy check).
//
// logf recognises the pair of lines (a read at exactly the end of the
// file, failing with io.EOF, then the rename of that file): neither is
// counted or logged above debug, and the .bad file is removed once the
// rename is done: after the next record read or write, or at Close or
// Delete (or the file itself, if the rename failed).
type rolledFiles struct {
	last    string // data file the last read past its end was in (ioLoop only)
	mu      sync.Mutex
	bad     []string // renamed files to remove
	pending atomic.Bool
}

// note takes a log line of go-diskqueue's and reports whether it was one
// of the pair (logf then says nothing more of it).
func (r *rolledFiles) note(log *zap.Logger, f string, args []any) bool {
	switch {
	case strings.HasPrefix(f, "DISKQUEUE(%s) reading at %d of %s - ") && len(args) == 4:
		pos, _ := args[1].(int64)
		file, _ := args[2].(string)
		err, _ := args[3].(error)
		if !errors.Is(err, io.EOF) || !endOf(file, pos) {
			return false
		}
		r.last = file
		log.Debug("go-diskqueue read past the end of a data file it had read whole", zap.String("file", file), zap.Int64("size", pos))
		return true
	case strings.HasPrefix(f, "DISKQUEUE(%s) jump to next file and saving bad file as ") && len(args) == 2:
		bad, _ := args[1].(string)
		if r.last == "" || bad != r.last+".bad" {
			return false
		}
		r.last = ""
		r.mu.Lock()
		r.bad = append(r.bad, bad)
		r.mu.Unlock()
		r.pending.Store(true)
		log.Debug("removing the data file go-diskqueue set aside though it had read it whole", zap.String("file", bad))
		return true
	case strings.HasPrefix(f, "DISKQUEUE(%s) failed to rename bad diskqueue file ") && len(args) == 3:
		// The rename after the pair failed: the file read whole keeps its
		// name, and go-diskqueue has moved past it.
		file, _ := args[1].(string)
		bad, _ := args[2].(string)
		r.mu.Lock()
		defer r.mu.Unlock()
		if i := slices.Index(r.bad, bad); i >= 0 {
			r.bad = slices.Delete(r.bad, i, i+1)
			r.pending.Store(len(r.bad) > 0)
			os.Remove(file)
			return true
		}
	}
	return false
}

// endOf reports whether file is pos bytes long.
func endOf(file string, pos int64) bool {
	fi, err := os.Stat(file)
	return err == nil && fi.Size() == pos
}

// remove removes the renamed files noted so far, once go-diskqueue has
// renamed them (not yet: kept for the next call).
func (r *rolledFiles) remove() {
	if !r.pending.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.bad[:0]
	for _, f := range r.bad {
		if err := os.Remove(f); err == nil || !errors.Is(err, os.ErrNotExist) {
			continue
		}
		// Not there: not renamed yet (the data file is), or renamed
		// since the Remove (then it is there now).
		if _, err := os.Stat(strings.TrimSuffix(f, ".bad")); err == nil {
			kept = append(kept, f)
		} else {
			os.Remove(f)
		}
	}
	r.bad = kept
	r.pending.Store(len(kept) > 0)
}
