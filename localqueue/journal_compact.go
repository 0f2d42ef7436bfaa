package localqueue

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Compaction. When the journal has grown past compactMin and more than half
// of it is dead (wantCompactLocked), the record that crossed the line
// signals the journal's background goroutine (journal_sync.go), which
// compacts it without holding mu for the bulk of the work, so that no
// journaled operation (and no caller's lock: Finish, Get) waits for it:
//
//  1. Under mu: snapshot the live entries (where their COPYs are, their
//     state now), the dedup history, the FINs to keep (see recent) and
//     where the file ends.
//  2. Without mu: write <path>.tmp: the header, a HIST record per ID of
//     the history, those FINs, and a COPY of each snapshot entry, read
//     back from the journal, in its state at the snapshot; fsync it. The
//     journal goes on taking records meanwhile.
//  3. Under mu: append what the journal took since the snapshot (the tail)
//     to <path>.tmp, fsync it, rename it over the journal and point the
//     live entries at their new places.
//
// Replaying the new file is replaying the old one: its first part is the
// state at the snapshot, and the tail replays what happened since, exactly
// as it did in the old file. A crash before the rename leaves the old
// journal, after it the new one; each holds every live record, so a crash
// at any step loses nothing and brings nothing back that a crash without
// compaction would not. The tail is fsynced before the rename, so a power
// loss that keeps the rename cannot lose a record the old file had
// fsynced; one that undoes it leaves the old journal without the records
// appended to the new one since, which is what SyncEvery allows to be
// lost. The directory is fsynced with the next fsync of the journal (see
// afterWriteLocked).
//
// Empty and Close compact in place, under mu (compactLocked). compactMu
// keeps them and the background compaction apart: they share <path>.tmp.

// wantCompactLocked reports whether the journal is due for compaction:
// more than twice what a rewrite would write (the live COPYs and what the
// last rewrite wrote besides them: header, history, kept FINs), and at
// least compactMin (and noCompact) bytes, or whatever its size once an
// append met a full disk (diskFull), which the dead records may be
// filling (a compaction that begins clears it; see fullRetry).
func (j *journal) wantCompactLocked() bool {
	size := j.out.size
	return size > 2*(j.liveBytes+j.keepBytes) && (j.diskFull || size >= j.compactMin && size >= j.noCompact)
}

// snapshot is what a rewrite starts from.
type snapshot struct {
	live []restoreEntry  // the live entries
	hist map[ID]struct{} // the dedup history (read only), nil when dedup is off
	fins []ID            // FINs to keep: recent backend reads not yet persisted
	end  int64           // where the journal ended
}

func (j *journal) snapshotLocked() *snapshot {
	s := &snapshot{live: make([]restoreEntry, 0, len(j.live)), fins: j.unsyncedFinsLocked(), end: j.out.size}
	if j.gen != 0 {
		s.hist = j.hist // replaced, never changed, by endDedup
	}
	for id, e := range j.live {
		s.live = append(s.live, restoreEntry{id, e})
	}
	return s
}

// compactBackground is the background goroutine's compaction (see above).
func (j *journal) compactBackground() {
	j.compactMu.Lock()
	defer j.compactMu.Unlock()
	j.mu.Lock()
	if j.out == nil || !j.wantCompactLocked() {
		j.mu.Unlock()
		return
	}
	old, full := j.out, j.diskFull
	j.diskFull = false
	if full {
		// The rewrite needs room the journal may be holding: its
		// reserve. Appends wait for the outcome (they fail meanwhile).
		if err := old.freeSpare(); err != nil {
			j.log.Warn("journal: giving its reserved space to the compaction failed", zap.String("file", j.path), zap.Error(err))
		}
	}
	s := j.snapshotLocked()
	j.mu.Unlock()

	rw, err := j.rewrite(old.f, s)

	j.mu.Lock()
	defer j.mu.Unlock()
	// compactMu: nothing else replaced or closed old meanwhile (Close
	// waits for this goroutine before it touches the file).
	if err == nil {
		err = j.installLocked(old, rw, s.end)
	}
	if err != nil {
		j.counters.errors.Add(1)
		if full {
			old.thaw()
			j.fullRetry = time.Now().Add(fullRetryAfter)
			j.diskFull = false // asked for meanwhile: held off until fullRetry
		}
		j.noCompact = 2 * j.out.size
		j.compactErrLog.Error(j.log, "journal compaction failed; appending to the old file", zap.String("file", j.path), zap.Error(err))
	}
}

// compactLocked compacts the journal under mu (Empty, Close), which the
// caller holds with compactMu or after the background goroutine stopped.
func (j *journal) compactLocked() error {
	s := j.snapshotLocked()
	rw, err := j.rewrite(j.out.f, s)
	if err != nil {
		return err
	}
	return j.installLocked(j.out, rw, s.end)
}

// rewritten is a fresh journal written to <path>.tmp by rewrite.
type rewritten struct {
	f         *os.File
	size      int64
	moved     map[ID]jentry // the snapshot's live entries at their new offsets
	copyBytes int64         // the COPY records' bytes
	keepBytes int64         // the other bytes: header, HIST and FIN records
}

// discard removes a rewrite that will not be installed.
func (rw *rewritten) discard() {
	rw.f.Close()
	os.Remove(rw.f.Name())
}

// rewrite writes a fresh journal of s to <path>.tmp: the header, HIST
// records of s.hist, FIN records of s.fins, and the COPY of every live
// entry (read back from old, in file order, with its state in s), and
// fsyncs it. The caller installs it (or renames it into place) or
// discards it. It does not touch the journal's state, so it runs without
// mu.
func (j *journal) rewrite(old *os.File, s *snapshot) (*rewritten, error) {
	tmp := j.path + ".tmp"
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	rw := &rewritten{f: nf, moved: make(map[ID]jentry, len(s.live))}
	if err := rw.write(old, s); err != nil {
		rw.discard()
		return nil, fmt.Errorf("%s: %w", tmp, err)
	}
	return rw, nil
}

func (rw *rewritten) write(old *os.File, s *snapshot) error {
	w := bufio.NewWriterSize(rw.f, 1<<20)
	put := func(rec []byte) error {
		_, err := w.Write(rec)
		rw.size += int64(len(rec))
		return err
	}
	rec := journalHeader()
	if err := put(rec); err != nil {
		return err
	}
	for id := range s.hist {
		if err := put(appendHist(rec[:0], id)); err != nil {
			return err
		}
	}
	for _, id := range s.fins {
		if err := put(appendFin(rec[:0], id)); err != nil {
			return err
		}
	}
	rw.keepBytes = rw.size
	slices.SortFunc(s.live, func(a, b restoreEntry) int { return cmp.Compare(a.e.off, b.e.off) })
	var scratch []byte
	for _, re := range s.live {
		var m Message
		var err error
		if m, scratch, err = readCopy(old, re.e, scratch); err != nil {
			return fmt.Errorf("read back %s: %w", re.id, err)
		}
		m.Attempts, m.Due = int(re.e.attempts), time.Unix(0, re.e.due)
		rec = appendCopy(rec[:0], re.e.state, &m)
		e := re.e
		e.off, e.size = rw.size, int32(len(rec))
		if err := put(rec); err != nil {
			return err
		}
		rw.moved[re.id] = e
	}
	rw.copyBytes = rw.size - rw.keepBytes
	if err := w.Flush(); err != nil {
		return err
	}
	return rw.f.Sync()
}

// installLocked completes a compaction that began when old ended at end:
// it appends old's tail (the records since) to rw and fsyncs it, renames
// it over the journal, and points the live entries at their new places.
// On an error nothing changed and rw is discarded. The caller holds mu.
func (j *journal) installLocked(old *appendFile, rw *rewritten, end int64) error {
	live := make(map[ID]jentry, len(j.live))
	var copyBytes int64
	shift := rw.size - end
	for id, e := range j.live {
		if e.off >= end { // journaled since the snapshot: in the tail
			e.off += shift
		} else if m, ok := rw.moved[id]; ok {
			e.off, e.size = m.off, m.size // its state is the one MOVEs set since
		} else {
			rw.discard()
			return fmt.Errorf("%w: %s: %s is live at %d but not in the snapshot", ErrCorruptJournal, j.path, id, e.off)
		}
		live[id] = e
		copyBytes += int64(e.size)
	}
	tail := old.size - end
	if tail > 0 {
		b := make([]byte, tail)
		if _, err := old.f.ReadAt(b, end); err != nil {
			rw.discard()
			return fmt.Errorf("read the tail of %s: %w", j.path, err)
		}
		if _, err := rw.f.WriteAt(b, rw.size); err != nil {
			rw.discard()
			return fmt.Errorf("write the tail to %s: %w", rw.f.Name(), err)
		}
		if err := rw.f.Sync(); err != nil {
			rw.discard()
			return fmt.Errorf("fsync %s: %w", rw.f.Name(), err)
		}
	}
	if err := os.Rename(rw.f.Name(), j.path); err != nil {
		rw.discard()
		return fmt.Errorf("rename: %w", err)
	}
	j.dirDirty = true
	before := old.size
	if j.syncing == old {
		j.retired = old // the syncer closes it when its fsync returns
	} else {
		old.discard()
	}
	j.out = newAppendFile(rw.f, rw.size+tail, j.noMap)
	j.live, j.liveBytes, j.keepBytes = live, copyBytes, rw.keepBytes
	j.counters.compactions.Add(1)
	j.log.Debug("journal compacted", zap.String("file", j.path), zap.Int64("before", before), zap.Int64("after", j.out.size),
		zap.Int64("tail", tail), zap.Int("live", len(live)))
	return nil
}

// histBytes is what the HIST records take in a rewrite.
func (j *journal) histBytes() int64 {
	if j.gen == 0 {
		return 0
	}
	return int64(len(j.hist)) * int64(recordHeaderSize+histSize)
}

// sortedLive lists live entries in file order.
func sortedLive(live map[ID]jentry) []restoreEntry {
	order := make([]restoreEntry, 0, len(live))
	for id, e := range live {
		order = append(order, restoreEntry{id, e})
	}
	slices.SortFunc(order, func(a, b restoreEntry) int { return cmp.Compare(a.e.off, b.e.off) })
	return order
}

// readCopy reads the COPY (or SWAP) record at e back from f, into buf (grown as
// needed and returned). Message.Body aliases buf.
func readCopy(f *os.File, e jentry, buf []byte) (Message, []byte, error) {
	if cap(buf) < int(e.size) {
		buf = make([]byte, e.size)
	}
	b := buf[:e.size]
	if _, err := f.ReadAt(b, e.off); err != nil {
		return Message{}, buf, fmt.Errorf("%s at %d: %w", f.Name(), e.off, err)
	}
	var r jrec
	if _, err := decodeJournalRecord(b, &r); err != nil {
		return Message{}, buf, fmt.Errorf("%s at %d: %w", f.Name(), e.off, err)
	}
	if r.kind != kindCopy && r.kind != kindSwap {
		return Message{}, buf, fmt.Errorf("%w: %s at %d: kind %d, want COPY or SWAP", ErrCorruptJournal, f.Name(), e.off, r.kind)
	}
	return r.m, buf, nil
}
