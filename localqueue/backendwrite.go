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

// putBackend appends rec to the backend. Written counts the records it
// appended (a filler, then rec), written or not synced.
func (q *Queue) putBackend(rec []byte) (written int, err error) {
	w := &q.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		if err := q.backend.Put(w.failed); err != nil && !errors.Is(err, ErrNotSynced) {
			return 0, fmt.Errorf("write the filler of an earlier write that failed: %w", err)
		}
		w.failed = nil
		q.fillers.Add(1)
		written++
	}
	err = q.backend.Put(rec)
	if err != nil && !errors.Is(err, ErrNotSynced) {
		w.failed = appendFiller(nil, rec)
		return written, err
	}
	return written + 1, err
}
