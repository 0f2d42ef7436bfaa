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

// compactLocked rewrites the live records (and, while dedup is on, the
// generation and its history; and the FINs of recent backend reads) to
// <path>.tmp, fsyncs it and renames it over the journal; the directory is
// fsynced with the next fsync of the journal (see afterWriteLocked). A
// crash before the rename leaves the old journal, after it the new one:
// each holds every live record, so a crash at any step loses nothing and
// brings nothing back that a crash without compaction would not. (A power
// loss that undoes the rename leaves the old journal without the records
// appended to the new one since: what SyncEvery allows to be lost.)
func (j *journal) compactLocked() error {
	nf, size, live, err := j.rewrite(j.out.f, j.live, j.gen, j.hist, j.unsyncedFinsLocked())
	if err != nil {
		return err
	}
	if err := os.Rename(nf.Name(), j.path); err != nil {
		nf.Close()
		os.Remove(nf.Name())
		return fmt.Errorf("rename: %w", err)
	}
	j.dirDirty = true
	before := j.out.size
	if j.syncing == j.out {
		j.retired = j.out // the syncer closes it when its fsync returns
	} else {
		j.out.discard()
	}
	j.out, j.live = newAppendFile(nf, size, j.noMap), live
	j.liveBytes = size - journalHeaderSize - j.histBytes()
	j.counters.compactions.Add(1)
	j.log.Debug("journal compacted", zap.String("file", j.path), zap.Int64("before", before), zap.Int64("after", size), zap.Int("live", len(live)))
	return nil
}

func (j *journal) histBytes() int64 {
	if j.gen == 0 {
		return 0
	}
	return int64(recordHeaderSize+genSize) + int64(len(j.hist))*int64(recordHeaderSize+histSize)
}

// rewrite writes a fresh journal to <path>.tmp: header, GEN and HIST
// records when gen is set, FIN records of fins, and the PARK of every live
// entry (read back from old, in file order, with its current state). It
// returns the new file (fsynced), its size and the live map with the new
// offsets. The caller renames it into place.
func (j *journal) rewrite(old *os.File, live map[ID]jentry, gen uint64, hist map[ID]struct{}, fins []ID) (*os.File, int64, map[ID]jentry, error) {
	tmp := j.path + ".tmp"
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	fail := func(err error) (*os.File, int64, map[ID]jentry, error) {
		nf.Close()
		os.Remove(tmp)
		return nil, 0, nil, err
	}
	w := bufio.NewWriterSize(nf, 1<<20)
	size := int64(0)
	put := func(b []byte) error {
		n, err := w.Write(b)
		size += int64(n)
		return err
	}
	rec := append(j.buf[:0], journalHeader()...)
	if gen != 0 {
		rec = appendGen(rec, gen)
		for id := range hist {
			rec = appendHist(rec, id)
		}
	}
	for _, id := range fins {
		rec = appendFin(rec, id)
	}
	if err := put(rec); err != nil {
		return fail(fmt.Errorf("write %s: %w", tmp, err))
	}
	order := sortedLive(live)
	moved := make(map[ID]jentry, len(live))
	for _, re := range order {
		m, err := j.readPark(old, re.e)
		if err != nil {
			return fail(fmt.Errorf("read back %s: %w", re.id, err))
		}
		m.Attempts, m.Due = int(re.e.attempts), time.Unix(0, re.e.due)
		rec = appendPark(rec[:0], re.e.state, &m)
		e := re.e
		e.off, e.size = size, int32(len(rec))
		if err := put(rec); err != nil {
			return fail(fmt.Errorf("write %s: %w", tmp, err))
		}
		moved[re.id] = e
	}
	if cap(rec) <= 1<<20 { // keep the encode buffer, unless a large history grew it
		j.buf = rec
	}
	if err := w.Flush(); err != nil {
		return fail(fmt.Errorf("write %s: %w", tmp, err))
	}
	if err := nf.Sync(); err != nil {
		return fail(fmt.Errorf("fsync %s: %w", tmp, err))
	}
	return nf, size, moved, nil
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

// readPark reads the PARK record at e back from f. Message.Body aliases
// j.scratch, which the next readPark reuses. The caller holds mu or owns j.
func (j *journal) readPark(f *os.File, e jentry) (Message, error) {
	if cap(j.scratch) < int(e.size) {
		j.scratch = make([]byte, e.size)
	}
	b := j.scratch[:e.size]
	if _, err := f.ReadAt(b, e.off); err != nil {
		return Message{}, fmt.Errorf("%s at %d: %w", f.Name(), e.off, err)
	}
	var r jrec
	if _, err := decodeJournalRecord(b, &r); err != nil {
		return Message{}, fmt.Errorf("%s at %d: %w", f.Name(), e.off, err)
	}
	if r.kind != kindPark {
		return Message{}, fmt.Errorf("%w: %s at %d: kind %d, want PARK", ErrCorruptJournal, f.Name(), e.off, r.kind)
	}
	return r.m, nil
}
