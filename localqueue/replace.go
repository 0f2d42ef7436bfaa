package localqueue

import (
	"fmt"
	"time"
)

// Replace finishes the delivery of old and adds body as a new message, due
// after delay (in [0, MaxReqTimeout]), and returns the new message's ID.
// body is copied. It is what a consumer does with a message that must run
// again with a changed body (a retry count kept in it, say), where Finish
// and PutDeferred would leave a window in which both exist.
//
// With a DataPath one journal record (a SWAP) holds both halves, so a
// process crash or a power loss brings back either old (as a delivery cut
// short) or the new message, never both and never neither; the record is
// fsynced on the journal's schedule, like a PutDeferred's, or by Sync. An
// old that was memory-only (Put into the memory chan and taken from there
// by Get) is in no file before the SWAP, so a crash before it loses old,
// as it would without Replace. In memory mode it is Finish and
// PutDeferred under the locks they take.
//
// It returns the errors of Finish (ErrNotInFlight, ErrTimedOut) when old is
// not in flight, and those of PutDeferred; on any error old stays in
// flight and nothing is added.
func (q *Queue) Replace(old ID, body []byte, delay time.Duration) (ID, error) {
	if len(body) > q.opts.MaxMsgSize {
		return ID{}, fmt.Errorf("%w: %d bytes, MaxMsgSize is %d", ErrTooLarge, len(body), q.opts.MaxMsgSize)
	}
	if err := q.checkDelay(delay); err != nil {
		return ID{}, err
	}
	if q.lock != nil { // see putMu and getMu: Close must not close the journal meanwhile
		q.getMu.RLock()
		defer q.getMu.RUnlock()
		q.putMu.RLock()
		defer q.putMu.RUnlock()
	}
	r, err := q.popInFlight(old)
	if err != nil {
		return ID{}, err
	}
	now := q.now()
	n := newReady(q.newID(), body, false, now, now.Add(delay))
	state := byte(stateReady)
	if delay > 0 {
		state = stateDeferred
	}
	if q.journal != nil {
		if err := q.journal.swap(old, &n.m, state); err != nil {
			q.restoreInFlight(r)
			return ID{}, fmt.Errorf("localqueue %s: replace %s: %w", q.opts.Name, old, err)
		}
		n.journaled = true
	}
	q.stats.finished.Add(1)
	q.stats.puts.Add(1)
	if delay > 0 {
		q.pushDeferred(n)
	} else {
		q.putReady(n)
	}
	return n.m.ID, nil
}

// restoreInFlight puts back a delivery popInFlight took whose journal write
// failed: it stays in flight, with its deadline.
func (q *Queue) restoreInFlight(r *record) {
	q.inFlightMu.Lock()
	q.inFlight.put(r)
	q.inFlightPQ.Push(&r.e)
	q.inFlightMu.Unlock()
	q.scanner.activate(q)
}
