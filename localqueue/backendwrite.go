package localqueue

import (
	"errors"
	"fmt"
	"sync"
)

// backendWriter is the one way records go into the backend. go-diskqueue
// (v1.1.0 and its master) does not undo a write that fails part way, as
// on a full disk: the bytes written stay past its last record, and its
// reader, reading ahead into that tail, may hold them when the next
// record is written over them, and then hands out that record torn (its
// head replaced by the failed one's). So after a failed write the next
// record is a filler of the failed one (the same length and bytes, its
// checksum spoilt: see appendFiller), written before anything else; until
// the filler is written, every write fails with its error. A torn filler
// is still a filler, and the records after it line up again.
type backendWriter struct {
	mu     sync.Mutex
	failed []byte // the filler to write first; nil if none
}

// putBackend appends rec to the backend, after the filler still to write,
// and accounts for each record written (or written and not synced).
func (q *Queue) putBackend(rec []byte) error {
	w := &q.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := q.writeFillerLocked(); err != nil {
		return err
	}
	err := q.backend.Put(rec)
	if err != nil && !errors.Is(err, ErrNotSynced) {
		w.failed = appendFiller(nil, rec)
		q.backendFailed(err)
		return err
	}
	q.wroteBackend()
	return err
}

// writeFillerLocked writes the filler still to write, if there is one.
// The caller holds writer.mu.
func (q *Queue) writeFillerLocked() error {
	w := &q.writer
	if w.failed == nil {
		return nil
	}
	q.fillers.Add(1) // before a reader can pass it
	if err := q.backend.Put(w.failed); err != nil && !errors.Is(err, ErrNotSynced) {
		q.fillerRead()
		q.backendFailed(err)
		return fmt.Errorf("write the filler of an earlier write that failed: %w", err)
	}
	w.failed = nil
	q.wroteBackend()
	return nil
}

// writeFiller writes the filler still to write before Close closes the
// backend, so that the next Open's reader does not meet the failed
// write's remains (go-diskqueue would take them for a damaged file and
// set the whole file aside).
func (q *Queue) writeFiller() error {
	q.writer.mu.Lock()
	err := q.writeFillerLocked()
	q.writer.mu.Unlock()
	if err != nil {
		return fmt.Errorf("localqueue %s: %w", q.opts.Name, err)
	}
	return nil
}

// wroteBackend accounts for a record written to the backend, even if not
// synced.
func (q *Queue) wroteBackend() {
	q.onBackend.Add(1)
	if q.journal != nil {
		q.journal.backendOps.Add(1)
	}
}

// backendFailed tells the journal when a backend write met a full disk:
// the journal's dead records may be what fills it.
func (q *Queue) backendFailed(err error) {
	if q.journal != nil && isDiskFull(err) {
		q.journal.noteDiskFull()
	}
}

// fillerRead accounts for a filler Get passed: one fewer unread, never
// below 0 (an earlier run's filler was not counted).
func (q *Queue) fillerRead() {
	for {
		n := q.fillers.Load()
		if n <= 0 || q.fillers.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// emptyBackend empties the backend, and with its files (torn tails
// included) drops the filler still to write and the count of unread ones;
// no backend write runs meanwhile.
func (q *Queue) emptyBackend() error {
	q.writer.mu.Lock()
	defer q.writer.mu.Unlock()
	if err := q.backend.Empty(); err != nil {
		return err
	}
	q.writer.failed = nil
	q.fillers.Store(0)
	return nil
}
