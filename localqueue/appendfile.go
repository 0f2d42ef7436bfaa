package localqueue

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// appendFile is the journal file opened for appending records. On Linux
// it appends through a shared memory mapping of the file (see
// appendfile_linux.go): the copy into the mapping is in the kernel's page
// cache the moment it completes, so a record survives the death of the
// process (kill -9, a panic, the OOM killer) exactly as a write(2) would,
// without a system call per record. The space behind the mapping is
// reserved ahead by writing zeros, so a full disk is an error from append,
// never a SIGBUS. Elsewhere, or when the file cannot be mapped, it appends
// with one pwrite(2) per record.
//
// The file's length can run ahead of size (reserved, zero-filled space);
// replay stops at a zero-filled tail, and close cuts it off.
type appendFile struct {
	f     *os.File
	size  int64  // where the next record goes
	m     []byte // the mapping (len is the reserved length), nil if none
	noMap bool   // append with pwrite(2)
	// frozen: the spare was given to a compaction (see freeSpare);
	// appends fail until thaw.
	frozen bool
	// leanUntil: below this need, grow reserves only the pages needed
	// (a reservation ahead failed; see grow).
	leanUntil int64
}

// spareBytes is the end of the mapped space that appends leave alone:
// when the disk is full, the journal's own dead records may be what fills
// it, and compacting them needs room for the rewrite. freeSpare gives it
// (and the rest of the reserve) back to the file system for that.
const spareBytes = 64 << 10

// errJournalFrozen: an append while a compaction on a full disk has the
// journal's spare room.
var errJournalFrozen = fmt.Errorf("%w: the journal's spare room is kept for its compaction", syscall.ENOSPC)

// errNoMap reports that the file cannot be mapped; append falls back to
// pwrite(2).
var errNoMap = errors.New("journal file cannot be memory-mapped")

func newAppendFile(f *os.File, size int64, noMap bool) *appendFile {
	return &appendFile{f: f, size: size, noMap: noMap || !canMap}
}

// append adds rec at the end. When it returns nil, rec survives a crash of
// the process (not of the machine: see sync).
func (a *appendFile) append(rec []byte) error {
	if a.frozen {
		return errJournalFrozen
	}
	end := a.size + int64(len(rec))
	if !a.noMap && end+spareBytes > int64(len(a.m)) {
		if err := a.grow(end + spareBytes); err != nil && !errors.Is(err, errNoMap) {
			return err
		}
	}
	if !a.noMap {
		copy(a.m[a.size:end], rec)
		a.size = end
		return nil
	}
	if _, err := a.f.WriteAt(rec, a.size); err != nil {
		a.f.Truncate(a.size) // no partial record for a crash to leave behind
		return err
	}
	a.size = end
	return nil
}

// close unmaps the file, cuts off the reserved tail, fsyncs and closes it.
// (sync, per platform, makes the records appended so far survive power
// loss; on Linux it is fdatasync, which writes back the pages dirtied
// through the mapping too.)
func (a *appendFile) close() error {
	err := a.unmap()
	if terr := a.f.Truncate(a.size); terr != nil {
		err = errors.Join(err, fmt.Errorf("truncate %s: %w", a.f.Name(), terr))
	}
	if serr := a.f.Sync(); serr != nil {
		err = errors.Join(err, fmt.Errorf("fsync %s: %w", a.f.Name(), serr))
	}
	return errors.Join(err, a.f.Close())
}

// freeSpare unmaps the file and cuts off its reserved tail, spare
// included, so that a compaction on a full disk has room for its rewrite,
// and freezes it: appends fail until thaw (they would take that room).
func (a *appendFile) freeSpare() error {
	a.frozen = true
	if err := a.unmap(); err != nil {
		return err
	}
	if err := a.f.Truncate(a.size); err != nil {
		return fmt.Errorf("cut the reserved tail of %s: %w", a.f.Name(), err)
	}
	return nil
}

// thaw lets appends go on after a compaction that freeSpare made room
// for has failed: the next one reserves again.
func (a *appendFile) thaw() { a.frozen = false }

// discard unmaps and closes a file that was replaced (renamed over).
func (a *appendFile) discard() {
	a.unmap()
	a.f.Close()
}
