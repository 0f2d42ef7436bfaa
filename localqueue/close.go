package localqueue

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/orderly-go/orderly/internal/pqueue"
	"go.uber.org/zap"
)

// Empty drops every message: ready, in flight and deferred (and, with a
// DataPath, the journal's records of them).
func (q *Queue) Empty() error {
	q.putMu.RLock()
	defer q.putMu.RUnlock()
	if q.closed.Load() {
		return ErrClosed
	}
drain:
	for range cap(q.memChan) { // bounded: Puts may go on meanwhile
		select {
		case <-q.memChan:
		default:
			break drain
		}
	}
	q.inFlightMu.Lock()
	q.inFlight.reset()
	q.inFlightPQ = pqueue.New[*record](0)
	q.inFlightMu.Unlock()
	q.deferredMu.Lock()
	q.deferredPQ = pqueue.New[*record](0)
	q.deferredMu.Unlock()
	if q.mem != nil {
		q.mem.empty(false)
	} else {
		q.restored.empty()
		if err := q.emptyBackend(); err != nil {
			return fmt.Errorf("localqueue %s: empty backend: %w", q.opts.Name, err)
		}
	}
	q.onBackend.Store(0)
	q.marker.Store(false)
	if q.journal != nil {
		if err := q.journal.reset(); err != nil {
			return fmt.Errorf("localqueue %s: empty journal: %w", q.opts.Name, err)
		}
	}
	q.log.Info("queue emptied")
	return nil
}

// Close stops the queue. With a DataPath nothing that is not finished is
// lost: messages the journal holds (in flight or deferred, or handed back
// after either) stay there, the rest of the memory chan and of the
// in-flight messages (ready again, attempts kept) are written to the
// backend, and both are synced; Open restores all of them. In memory mode
// what is left is discarded (and counted in the log). Blocked Gets return
// ErrClosed. A second Close returns ErrClosed.
func (q *Queue) Close() error { return q.shutdown(false) }

// Delete stops the queue and removes its messages and files (data files
// that go-diskqueue renamed to .bad, and a damaged journal kept as .bad,
// stay for inspection).
func (q *Queue) Delete() error { return q.shutdown(true) }

func (q *Queue) shutdown(deleting bool) error {
	if !q.closing.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(q.exitChan)
	q.getMu.Lock()
	q.putMu.Lock()
	q.closed.Store(true)
	q.putMu.Unlock()
	q.getMu.Unlock()
	q.scanner.unregister(q)

	var errs []error
	switch {
	case q.mem != nil:
		left := int64(len(q.memChan)+q.inFlightLen()+q.deferredLen()) + q.mem.len()
		q.mem.empty(true)
		switch {
		case deleting:
			q.log.Info("queue deleted")
		case left > 0:
			q.log.Warn("memory-only queue closed with messages left; they are discarded", zap.Int64("messages", left))
		}
	case deleting:
		if err := q.backend.Empty(); err != nil {
			errs = append(errs, fmt.Errorf("empty backend: %w", err))
		}
		if err := q.backend.Delete(); err != nil {
			errs = append(errs, fmt.Errorf("delete backend: %w", err))
		}
		if q.journal != nil {
			if err := q.journal.remove(); err != nil {
				errs = append(errs, fmt.Errorf("delete journal: %w", err))
			}
		}
		if q.lock != nil {
			os.Remove(q.lock.Name())
		}
		q.log.Info("queue deleted")
	default:
		if err := q.flush(); err != nil {
			errs = append(errs, err)
		}
		if err := q.writeFiller(); err != nil {
			errs = append(errs, err)
		}
		if err := q.backend.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close backend: %w", err))
		}
		if q.journal != nil {
			if err := q.journal.close(); err != nil {
				errs = append(errs, fmt.Errorf("close journal: %w", err))
			}
		}
		q.log.Info("queue closed")
	}
	if q.lock != nil {
		q.lock.Close()
	}
	if q.ownScanner {
		q.scanner.Close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("localqueue %s: %w", q.opts.Name, err)
	}
	return nil
}

// flush puts what only memory holds on disk. The in-flight messages the
// journal does not hold yet (taken from the memory chan) are journaled as
// in flight, as a crash would have left a journaled one, so that Open counts
// their delivery as cut short whatever MemQueueSize is (see
// Options.MaxAttempts). The memory chan, the deferred messages the journal
// does not hold, and in-flight ones it could not take go to the backend,
// ready (the in-flight ones from now, Attempts kept). Journaled ones stay in
// the journal, which Open replays; so do the ones Open restored that Get
// has not taken, which only the journal holds the bodies of. Only Close
// calls it, after closed is set, so nothing else touches the queue's
// state.
func (q *Queue) flush() error {
	now := q.now()
	var failed, mem, inFlight, deferred, kept int
	write := func(r *record, m *Message, n *int) {
		if r.journaled {
			kept++
			return
		}
		if err := q.writeBackend(m); err != nil && !errors.Is(err, ErrNotSynced) {
			failed++
			q.log.Error("message lost at close", zap.Stringer("id", m.ID), zap.Int("attempts", m.Attempts), zap.Error(err))
			return
		}
		*n++
	}
	kept += q.restored.empty() // the journal holds them
	for len(q.memChan) > 0 {
		r := <-q.memChan
		write(r, &r.m, &mem)
	}
	q.inFlightMu.Lock()
	var flying []*record
	for e := q.inFlightPQ.Pop(); e != nil; e = q.inFlightPQ.Pop() {
		flying = append(flying, e.Value)
	}
	q.inFlight.reset()
	q.inFlightMu.Unlock()
	journaled := q.journalInFlight(flying)
	for _, r := range flying {
		m := r.m
		m.Due, m.Deadline = now, time.Time{}
		write(r, &m, &inFlight)
	}
	q.deferredMu.Lock()
	for e := q.deferredPQ.Pop(); e != nil; e = q.deferredPQ.Pop() {
		write(e.Value, &e.Value.m, &deferred)
	}
	q.deferredMu.Unlock()
	q.log.Debug("flushed to disk", zap.Int("memory", mem), zap.Int("in_flight", inFlight), zap.Int("deferred", deferred),
		zap.Int("in_flight_journaled", journaled), zap.Int("kept_in_journal", kept-journaled))
	if failed > 0 {
		return fmt.Errorf("%d messages could not be written at close", failed)
	}
	return nil
}

// journalInFlight journals the records of rs that the journal does not
// hold as in flight (see flush) and marks them journaled. It returns how many
// it journaled; those it could not are logged and left to the backend.
func (q *Queue) journalInFlight(rs []*record) int {
	if q.journal == nil {
		return 0
	}
	var todo []*record
	var ms []*Message
	for _, r := range rs {
		if !r.journaled {
			todo = append(todo, r)
			ms = append(ms, &r.m)
		}
	}
	if len(ms) == 0 {
		return 0
	}
	held, err := q.journal.writeClosing(ms)
	n := 0
	for i, r := range todo {
		if held[i] {
			r.journaled = true
			n++
		}
	}
	if err != nil {
		q.log.Error("journal write failed at close; in-flight messages go to the backend instead, and their cut-short delivery will not count toward MaxAttempts",
			zap.Int("messages", len(ms)-n), zap.Error(err))
	}
	return n
}
