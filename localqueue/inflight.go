package localqueue

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Finish acknowledges the delivery of id: the message is done and leaves
// the queue. It returns ErrNotInFlight (or ErrTimedOut, which wraps it)
// when id is not in flight, so a late Finish after a timeout is rejected.
//
// With a DataPath, Finish of a journaled message appends its FIN record
// before it returns. If that write fails, the error is logged and counted
// (Stats.JournalErrors) but Finish still succeeds: the message is done,
// and a crash may bring it back once (at-least-once).
func (q *Queue) Finish(id ID) error {
	if _, err := q.popInFlight(id, true); err != nil {
		return err
	}
	q.stats.finished.Add(1)
	return nil
}

// unpark appends the FIN of a journaled message that is done here.
func (q *Queue) unpark(r *record) {
	if err := q.journal.fin(r.m.ID); err != nil {
		q.log.Error("journal write failed; a crash may bring this finished message back", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts), zap.Error(err))
	}
}

// Requeue hands the delivery of id back: ready again now (delay 0) or
// after delay, in [0, MaxReqTimeout]. A message that has had MaxAttempts
// deliveries is dead-lettered instead. Errors are those of Finish and
// ErrInvalidDelay.
func (q *Queue) Requeue(id ID, delay time.Duration) error {
	if err := q.checkDelay(delay); err != nil {
		return err
	}
	q.putMu.RLock()
	defer q.putMu.RUnlock()
	r, err := q.popInFlight(id, false)
	if err != nil {
		return err
	}
	q.stats.requeued.Add(1)
	now := q.now()
	q.retire(r, now.Add(delay), now)
	return nil
}

// Touch extends the deadline of the delivery of id to now plus MsgTimeout,
// but never past its Get time plus MaxMsgTimeout (a Touch at that cap
// succeeds without extending). Errors are those of Finish.
func (q *Queue) Touch(id ID) error {
	now := q.now()
	q.inFlightMu.Lock()
	defer q.inFlightMu.Unlock()
	if q.closed.Load() {
		return ErrClosed
	}
	r, err := q.lookupInFlight(id, now)
	if err != nil {
		return err
	}
	deadline := now.Add(q.opts.MsgTimeout)
	delivered := r.m.Deadline.Add(-q.opts.MsgTimeout)
	if limit := delivered.Add(q.opts.MaxMsgTimeout); deadline.After(limit) {
		deadline = limit
	}
	if deadline.After(r.e.Deadline) {
		q.inFlightPQ.Update(&r.e, deadline)
	}
	q.stats.touched.Add(1)
	return nil
}

// popInFlight removes id from the in-flight set; with finish set, it also
// appends the FIN of a journaled message, under the same lock. It needs no
// putMu/getMu: Close sets closed before it takes inFlightMu to flush and
// then closes the journal, so a pop (and its FIN) either happens before
// the flush or sees closed.
func (q *Queue) popInFlight(id ID, finish bool) (*record, error) {
	now := q.now()
	q.inFlightMu.Lock()
	defer q.inFlightMu.Unlock()
	if q.closed.Load() {
		return nil, ErrClosed
	}
	// Remove first (one probe): a delivery that timed out, the rare case,
	// goes back for the scanner to redeliver.
	r := q.inFlight.remove(id)
	if r == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotInFlight, id)
	}
	if err := timedOut(r, now); err != nil {
		q.inFlight.put(r)
		return nil, err
	}
	q.inFlightPQ.Remove(r.e.Index())
	if finish && r.parked {
		q.unpark(r)
	}
	return r, nil
}

// lookupInFlight finds id's live delivery. The caller holds inFlightMu.
func (q *Queue) lookupInFlight(id ID, now time.Time) (*record, error) {
	r := q.inFlight.get(id)
	if r == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotInFlight, id)
	}
	return r, timedOut(r, now)
}

// timedOut reports ErrTimedOut if r's deadline is at or before now.
func timedOut(r *record, now time.Time) error {
	if !now.Before(r.e.Deadline) {
		return fmt.Errorf("%w: %s at %s", ErrTimedOut, r.m.ID, r.e.Deadline.Format(time.RFC3339Nano))
	}
	return nil
}

// retire ends a delivery that was not finished: the message is ready again
// at due, or dead-lettered once it has had MaxAttempts deliveries. A
// journaled message stays journaled: a MOVE records its new state (a
// deferred one from the memory chan gets a PARK). The caller holds putMu.
func (q *Queue) retire(r *record, due, now time.Time) {
	if q.opts.MaxAttempts > 0 && r.m.Attempts >= q.opts.MaxAttempts {
		q.dead(r)
		return
	}
	n := newRecord(r.m)
	n.parked = r.parked
	n.m.Due, n.m.Deadline = due, time.Time{}
	if due.After(now) {
		q.deferRecord(n)
		return
	}
	if n.parked {
		q.park(n, stateReady)
	}
	q.putReady(n)
}

// dead hands a message that used up its attempts to DeadLetter and OnDead.
func (q *Queue) dead(r *record) {
	m := r.m
	m.Deadline = time.Time{}
	log := q.log.With(zap.Stringer("id", m.ID), zap.Int("attempts", m.Attempts))
	if dl := q.opts.DeadLetter; dl != nil {
		if err := dl.putDead(m); err != nil {
			log.Error("dead-letter queue refused the message; redelivering it", zap.String("dead_letter", dl.Name()), zap.Error(err))
			n := newRecord(m)
			n.parked = r.parked
			n.m.Due = q.now()
			if n.parked {
				q.park(n, stateReady)
			}
			q.putReady(n)
			return
		}
	}
	if r.parked {
		q.unpark(r)
	}
	q.stats.dead.Add(1)
	log.Warn("message dead-lettered")
	if q.opts.OnDead != nil {
		q.opts.OnDead(&m)
	}
}

// putDead adds a dead message from another queue, keeping its ID,
// Timestamp and Attempts.
func (q *Queue) putDead(m Message) error {
	if len(m.Body) > q.opts.MaxMsgSize {
		return fmt.Errorf("%w: %d bytes, MaxMsgSize is %d", ErrTooLarge, len(m.Body), q.opts.MaxMsgSize)
	}
	q.putMu.RLock()
	defer q.putMu.RUnlock()
	if q.closed.Load() {
		return ErrClosed
	}
	m.Due = q.now()
	r := newRecord(m)
	select {
	case q.memChan <- r:
	default:
		if err := q.writeBackend(&r.m); err != nil {
			return err
		}
	}
	q.stats.puts.Add(1)
	return nil
}

// scan times out due in-flight messages and releases due deferred ones.
// dirty reports that something was due; idle that nothing is in flight or
// deferred. Scanner workers call it.
func (q *Queue) scan() (dirty, idle bool) {
	q.putMu.RLock()
	defer q.putMu.RUnlock()
	if q.closed.Load() {
		return false, true
	}
	now := q.now()
	dirty = q.processInFlight(now)
	dirty = q.processDeferred(now) || dirty
	return dirty, !q.hasTimers()
}

// processInFlight redelivers (or dead-letters) every in-flight message
// whose deadline is at or before now.
func (q *Queue) processInFlight(now time.Time) bool {
	dirty := false
	for {
		q.inFlightMu.Lock()
		e, _ := q.inFlightPQ.PeekAndShift(now)
		if e == nil {
			q.inFlightMu.Unlock()
			return dirty
		}
		r := e.Value
		q.inFlight.remove(r.m.ID)
		q.inFlightMu.Unlock()
		dirty = true
		q.stats.timedOut.Add(1)
		q.log.Debug("delivery timed out", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts))
		q.retire(r, now, now)
	}
}

// processDeferred makes every deferred message due at or before now ready.
func (q *Queue) processDeferred(now time.Time) bool {
	dirty := false
	for {
		q.deferredMu.Lock()
		e, _ := q.deferredPQ.PeekAndShift(now)
		q.deferredMu.Unlock()
		if e == nil {
			return dirty
		}
		dirty = true
		q.putReady(e.Value)
	}
}

// hasTimers reports whether anything is in flight or deferred.
func (q *Queue) hasTimers() bool {
	return q.inFlightLen() > 0 || q.deferredLen() > 0
}

func (q *Queue) inFlightLen() int {
	q.inFlightMu.Lock()
	defer q.inFlightMu.Unlock()
	return q.inFlightPQ.Len()
}

func (q *Queue) deferredLen() int {
	q.deferredMu.Lock()
	defer q.deferredMu.Unlock()
	return q.deferredPQ.Len()
}

// hasTimersOpen is hasTimers for an open queue; a closed one has none.
func (q *Queue) hasTimersOpen() bool {
	return !q.closed.Load() && q.hasTimers()
}
