package localqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"

	"go.uber.org/zap"
)

// openJournal opens (or creates) the journal of o and replays it: it
// returns the journal, ready for appending, and the journaled messages to
// restore, in the order they were journaled.
//
// Replay applies the records in order: COPY adds a message, MOVE changes
// its state, FIN removes it; HIST records carry the dedup history of an
// earlier Open. A record that fails its checks is counted, logged with the
// path and skipped: replay resumes at the next offset where a whole record
// with a valid checksum starts, so the good records after the damage are
// restored too (a record lost to the damage is lost: a COPY's message, or
// a FIN's, which then comes back).
//
// Dedup: a message the journal holds or finished may also have copies in
// the backend that go-diskqueue hands out again after a crash (it persists
// its read position only every SyncEvery operations), or that were written
// there by a requeue while the journal kept it. Open therefore rewrites
// the journal with the history of those IDs (HIST records), draws a new
// generation nonce (kept in memory only) and writes a marker with it to
// the backend; until Get reads that marker, a backend record whose ID is
// in the history is a stale copy and is dropped. Every record before the
// marker was written before this Open, so no copy written from now on is
// dropped.
//
// Whenever the file holds more than a header, Open rewrites it (as
// compaction does), so a damaged tail is never appended to; the damaged
// file is kept as <path>.bad.
func openJournal(o *Options, log *zap.Logger) (*journal, []restoreEntry, error) {
	path := journalPath(o.DataPath, o.Name)
	j := &journal{
		path:        path,
		log:         log,
		syncEvery:   o.SyncEvery,
		syncTimeout: o.SyncTimeout,
		compactMin:  o.journalCompactBytes,
		noMap:       o.journalNoMap,
		live:        map[ID]jentry{},
		keepBytes:   journalHeaderSize,
	}
	// A compaction that did not finish: the journal itself is whole.
	if err := os.Remove(path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("localqueue %s: remove %s.tmp: %w", o.Name, path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("localqueue %s: open journal: %w", o.Name, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("localqueue %s: stat %s: %w", o.Name, path, err)
	}
	if info.Size() == 0 {
		if err := initJournal(f); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("localqueue %s: create %s: %w", o.Name, path, err)
		}
		f.Close() // opened again with the first record
		return j, nil, nil
	}

	rp, err := replay(f, info.Size(), copySize(o.MaxMsgSize))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("localqueue %s: read %s: %w", o.Name, path, err)
	}
	if rp.corrupt > 0 {
		j.counters.corrupt.Add(uint64(rp.corrupt))
		log.Error("journal is damaged; restoring the good records around the damage",
			zap.String("file", path), zap.Int("damaged_regions", rp.corrupt), zap.Int64("damaged_bytes", rp.corruptBytes),
			zap.Int("records", rp.records), zap.Error(rp.firstErr))
	}
	if rp.orphans > 0 {
		log.Warn("journal has state changes of messages it does not hold (their COPY was lost to damage)",
			zap.String("file", path), zap.Int("records", rp.orphans))
	}
	for id := range rp.live {
		rp.hist[id] = struct{}{}
	}
	if len(rp.hist) > 0 {
		j.gen, j.hist = nonzeroNonce(), rp.hist
		j.dedupOn.Store(true)
	}
	if rp.corrupt == 0 && rp.records == 0 && rp.end == journalHeaderSize {
		f.Close() // opened again with the first record
		return j, nil, nil
	}

	s := &snapshot{live: sortedLive(rp.live), end: rp.end}
	if j.gen != 0 {
		s.hist = j.hist
	}
	rw, err := j.rewrite(f, s)
	if err == nil && rp.corrupt > 0 {
		keepBad(path, log)
	}
	if err == nil {
		if err = os.Rename(rw.f.Name(), path); err != nil {
			rw.discard()
		}
	}
	if err != nil {
		// Appending to the old file after its last good record is safe:
		// replay skips what may be left of damage after the new records,
		// and the next Open rebuilds the same history from the same records.
		j.counters.errors.Add(1)
		log.Error("journal rewrite at open failed; appending to the old file", zap.String("file", path), zap.Error(err))
		j.out, j.live = newAppendFile(f, rp.end, j.noMap), rp.live
		j.liveBytes = rp.liveBytes
		j.startSyncer()
		return j, sortedLive(rp.live), nil
	}
	if err := syncDir(o.DataPath); err != nil {
		log.Warn("journal: fsync of the directory failed", zap.String("file", path), zap.Error(err))
	}
	f.Close()
	j.out, j.live = newAppendFile(rw.f, rw.size, j.noMap), rw.moved
	j.liveBytes, j.keepBytes = rw.copyBytes, rw.keepBytes
	j.startSyncer()
	return j, sortedLive(rw.moved), nil
}

func initJournal(f *os.File) error {
	if _, err := f.Write(journalHeader()); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(f.Name()))
}

// keepBad hard-links the damaged journal to <path>.bad before the rewrite
// replaces it, so that it can be inspected. It only logs failures.
func keepBad(path string, log *zap.Logger) {
	bad := path + ".bad"
	os.Remove(bad)
	if err := os.Link(path, bad); err != nil {
		log.Warn("journal: could not keep a copy of the damaged file", zap.String("file", path), zap.Error(err))
		return
	}
	log.Info("journal: damaged file kept for inspection", zap.String("file", bad))
}

func nonzeroNonce() uint64 {
	for {
		if n := rand.Uint64(); n != 0 {
			return n
		}
	}
}

// replayed is what replay found in a journal file.
type replayed struct {
	live         map[ID]jentry   // journaled messages, offsets in the replayed file
	liveBytes    int64           // their COPY records' bytes
	hist         map[ID]struct{} // FIN'd IDs and earlier HIST records
	records      int             // good records
	end          int64           // where the last good record ends
	orphans      int             // MOVEs of IDs the journal does not hold
	corrupt      int             // damaged regions
	corruptBytes int64
	firstErr     error // the first damage, with its offset
}

// replay reads a journal of size bytes from r. maxResync bounds the record
// length it believes while looking for a good record after damage. A tail
// of zero bytes is space the journal had reserved (see appendFile), not
// damage. It returns an error only when r cannot be read.
func replay(r io.ReaderAt, size int64, maxResync int) (*replayed, error) {
	rp := &replayed{live: map[ID]jentry{}, hist: map[ID]struct{}{}, end: journalHeaderSize}
	w := &window{r: r, size: size}
	off := int64(journalHeaderSize)
	hb, err := w.at(0, journalHeaderSize)
	if err != nil {
		return nil, err
	}
	if herr := checkJournalHeader(hb); herr != nil {
		next, err := rp.damaged(w, 0, herr, maxResync)
		if err != nil {
			return nil, err
		}
		off = next
	}
	for off < size {
		next, err := w.nonZero(off)
		if err != nil {
			return nil, err
		}
		if next == size {
			break // reserved space
		}
		var rec jrec
		n, derr, err := decodeAt(w, off, &rec, maxRecord)
		if err != nil {
			return nil, err
		}
		if derr != nil {
			if off, err = rp.damaged(w, off, derr, maxResync); err != nil {
				return nil, err
			}
			continue
		}
		rp.apply(off, n, &rec)
		off += int64(n)
		rp.end = off
	}
	return rp, nil
}

// damaged records damage at off and returns the offset of the next good
// record, or size when there is none.
func (rp *replayed) damaged(w *window, off int64, derr error, maxResync int) (int64, error) {
	rp.corrupt++
	if rp.firstErr == nil {
		rp.firstErr = fmt.Errorf("at offset %d: %w", off, derr)
	}
	var rec jrec
	for next := off + 1; next+recordHeaderSize < w.size; next++ {
		// A record's length is not zero: skip runs of zero bytes (such
		// as reserved space) to 3 bytes before the next non-zero one.
		nz, err := w.nonZero(next)
		if err != nil {
			return 0, err
		}
		if next = max(next, nz-3); next+recordHeaderSize >= w.size {
			break
		}
		_, derr, err := decodeAt(w, next, &rec, maxResync)
		if err != nil {
			return 0, err
		}
		if derr == nil {
			rp.corruptBytes += next - off
			return next, nil
		}
	}
	rp.corruptBytes += w.size - off
	return w.size, nil
}

func (rp *replayed) apply(off int64, n int, r *jrec) {
	rp.records++
	switch r.kind {
	case kindCopy, kindSwap:
		if r.kind == kindSwap {
			rp.finish(r.replaced)
		}
		if e, ok := rp.live[r.id]; ok {
			rp.liveBytes -= int64(e.size)
		}
		rp.live[r.id] = jentry{off: off, size: int32(n), state: r.state, attempts: int32(clampAttempts(r.attempts)), due: r.due.UnixNano()}
		rp.liveBytes += int64(n)
	case kindMove:
		e, ok := rp.live[r.id]
		if !ok {
			rp.orphans++
			return
		}
		e.state, e.attempts, e.due = r.state, int32(clampAttempts(r.attempts)), r.due.UnixNano()
		rp.live[r.id] = e
	case kindFin:
		rp.finish(r.id)
	case kindHist:
		rp.hist[r.id] = struct{}{}
	}
}

// finish applies the FIN of id (a FIN record, or the FIN half of a SWAP).
func (rp *replayed) finish(id ID) {
	if e, ok := rp.live[id]; ok {
		rp.liveBytes -= int64(e.size)
		delete(rp.live, id)
	}
	rp.hist[id] = struct{}{}
}

// decodeAt decodes the record at off, believing lengths up to limit. derr
// is the decode error (damage), err a read error.
func decodeAt(w *window, off int64, r *jrec, limit int) (n int, derr, err error) {
	hdr, err := w.at(off, recordHeaderSize)
	if err != nil {
		return 0, nil, err
	}
	want := recordHeaderSize
	if len(hdr) == recordHeaderSize {
		l := binary.BigEndian.Uint32(hdr)
		if uint64(l) > uint64(limit) {
			return 0, fmt.Errorf("%w: record length %d", ErrCorruptJournal, l), nil
		}
		want += int(l)
	}
	b, err := w.at(off, want)
	if err != nil {
		return 0, nil, err
	}
	n, derr = decodeJournalRecord(b, r)
	return n, derr, nil
}

// nonZero returns the offset of the first non-zero byte at or after off,
// or the file size.
func (w *window) nonZero(off int64) (int64, error) {
	for off < w.size {
		b, err := w.buffered(off)
		if err != nil {
			return 0, err
		}
		for i, c := range b {
			if c != 0 {
				return off + int64(i), nil
			}
		}
		off += int64(len(b))
	}
	return w.size, nil
}

// window reads a file through a buffer of at least 1 MiB, so that replay
// costs one read per MiB rather than one per record.
type window struct {
	r    io.ReaderAt
	size int64
	base int64
	buf  []byte
}

// buffered returns what the window holds from off on, reading a new window
// only when off is outside the current one: scanning from each record's
// start must not reload a MiB per record. Empty only at the end of the
// file.
func (w *window) buffered(off int64) ([]byte, error) {
	if _, err := w.at(off, 1); err != nil {
		return nil, err
	}
	if off >= w.base+int64(len(w.buf)) {
		return nil, nil
	}
	return w.buf[off-w.base:], nil
}

// at returns up to n bytes at off: fewer only at the end of the file. The
// slice is valid until the next call.
func (w *window) at(off int64, n int) ([]byte, error) {
	if rest := w.size - off; int64(n) > rest {
		n = int(max(rest, 0))
	}
	if off >= w.base && off+int64(n) <= w.base+int64(len(w.buf)) {
		return w.buf[off-w.base:][:n], nil
	}
	want := int(min(max(int64(n), 1<<20), w.size-off))
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	if _, err := w.r.ReadAt(w.buf, off); err != nil && !errors.Is(err, io.EOF) {
		w.buf = w.buf[:0]
		return nil, err
	}
	w.base = off
	return w.buf[:n], nil
}
