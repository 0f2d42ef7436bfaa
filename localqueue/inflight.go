package localqueue

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Finish acknowledges the delivery of id: the message is done and leaves
// the queue. It returns ErrNotInFlight (or ErrTimedOut, which wraps it)
// when id is not in flight, so a late Finish after a timeout is rejected
// until the scanner redelivers the message. An ID names the message, not a
// delivery: once it is redelivered, Finish, Requeue, Touch and Replace
// with its ID act on the new delivery, whoever calls them. A late Finish
// ends the message as done (its work was done), and the new delivery's
// Finish then returns ErrNotInFlight; a late Requeue hands the new
// delivery back (delivered again, or dead-lettered if it was the
// MaxAttempts-th); a late Touch extends the new delivery's deadline.
//
// With a DataPath, Finish of a journaled message appends its FIN record
// before it returns. If that write fails, the error is logged and counted
// (Stats.JournalErrors) but Finish still succeeds: the message is done,
// and a crash may bring it back once (at-least-once).
func (q *Queue) Finish(id ID) error {
	if q.journal != nil {
		// The FIN is appended after inFlightMu is released (see
		// popInFlight); getMu keeps Close from closing the journal before
		// it is.
		q.getMu.RLock()
		defer q.getMu.RUnlock()
	}
	r, err := q.popInFlight(id)
	if err != nil {
		return err
	}
	if r.journaled {
		q.journalFin(r)
	}
	q.stats.finished.Add(1)
	return nil
}

// journalFin appends the FIN of a journaled message that is done here.
func (q *Queue) journalFin(r *record) {
	if err := q.journal.fin(r.m.ID); err != nil {
		q.journalErrLog.Error(q.log, "journal write failed; a crash may bring this finished message back", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts), zap.Error(err))
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
	r, err := q.popInFlight(id)
	if err != nil {
		q.putMu.RUnlock()
		return err
	}
	q.stats.requeued.Add(1)
	now := q.now()
	dead := q.retire(r, now.Add(delay), now)
	q.putMu.RUnlock()
	if dead {
		q.afterDead(r)
	}
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

// popInFlight removes id from the in-flight set. The caller then owns the
// record and does its journal write (a FIN, a MOVE) without inFlightMu,
// which Get, Finish, Requeue, Touch and the scanner all take: that write
// can wait for an fsync (SyncEvery 1). A crash before the write brings the
// message back from the journal (at-least-once). With a journal the caller
// holds putMu or getMu shared, so that Close does not close the journal
// before the write.
func (q *Queue) popInFlight(id ID) (*record, error) {
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
// at due, or dead-lettered once it has had MaxAttempts deliveries (it
// reports whether it was; the caller then calls afterDead(r) once it has
// released putMu). A journaled message stays journaled: a MOVE records its
// new state (a deferred one from the memory chan gets a COPY). The caller
// holds putMu (or is Open, restoring the journal).
func (q *Queue) retire(r *record, due, now time.Time) (dead bool) {
	n, dead := q.retired(r, due, now)
	if n != nil {
		q.putReady(n)
	}
	return dead
}

// retired is retire without the last step: a message ready now is
// returned (journaled as ready) for the caller to hand on, nil if it is
// deferred or dead.
func (q *Queue) retired(r *record, due, now time.Time) (ready *record, dead bool) {
	if q.spent(r.m.Attempts) {
		if q.dead(r) {
			return nil, true
		}
		due = now // the dead-letter queue refused it: redeliver it now
	}
	n := newRecord(r.m)
	n.journaled = r.journaled
	n.m.Due, n.m.Deadline = due, time.Time{}
	if due.After(now) {
		q.deferRecord(n)
		return nil, false
	}
	if n.journaled {
		q.journalWrite(n, stateReady)
	}
	return n, false
}

// spent reports whether a delivery that ended unfinished after attempts
// deliveries used up MaxAttempts: the message is then dead-lettered.
func (q *Queue) spent(attempts int) bool {
	return q.opts.MaxAttempts > 0 && attempts >= q.opts.MaxAttempts
}

// dead hands a message that used up its attempts to DeadLetter, and then,
// DeadLetter holding it, appends its FIN. It reports false, and does
// nothing else, when DeadLetter refuses it. OnDead comes after, in
// afterDead, without putMu.
func (q *Queue) dead(r *record) bool {
	m := r.m
	m.Deadline = time.Time{}
	log := q.log.With(zap.Stringer("id", m.ID), zap.Int("attempts", m.Attempts))
	if dl := q.opts.DeadLetter; dl != nil {
		if err := dl.putDead(m); err != nil {
			log.Error("dead-letter queue refused the message; redelivering it", zap.String("dead_letter", dl.Name()), zap.Error(err))
			return false
		}
		if r.journaled {
			q.journalFin(r)
		}
	}
	q.stats.dead.Add(1)
	log.Warn("message dead-lettered")
	return true
}

// afterDead calls OnDead with a message dead() took, and, without a
// DeadLetter queue, appends its FIN only then: OnDead is where the
// message goes, so a crash before it returned must bring the message
// back. The caller holds no lock of q, so OnDead may call q's methods. A
// Close that came first leaves the message in the journal, and the next
// Open dead-letters it again (at-least-once).
func (q *Queue) afterDead(r *record) {
	if q.opts.OnDead != nil {
		m := r.m
		m.Deadline = time.Time{}
		q.opts.OnDead(&m)
	}
	if q.opts.DeadLetter != nil || !r.journaled {
		return
	}
	q.putMu.RLock() // so that Close does not close the journal meanwhile
	defer q.putMu.RUnlock()
	if q.closed.Load() {
		q.log.Info("queue closed while OnDead ran; the next Open dead-letters the message again", zap.Stringer("id", r.m.ID))
		return
	}
	q.journalFin(r)
}

// putDead adds a dead message from another queue, keeping its ID,
// Timestamp and Attempts. With a DataPath it is written straight to the
// backend, never to the memory chan, so that when putDead returns it is
// as durable as a Put with MemQueueSize 0: in go-diskqueue's data file
// (one write(2): it survives a crash of the process), and fsynced with
// go-diskqueue's metadata if SyncEvery is 1 (it survives power loss). The
// source writes its FIN only after that.
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
	var err error
	if q.backend != nil {
		err = q.writeBackend(&m)
	} else {
		err = q.enqueue(newRecord(m))
	}
	if errors.Is(err, ErrNotSynced) {
		// Written: refusing it would redeliver the message, which would
		// then be dead-lettered twice. It is as durable as the fsync
		// that follows.
		q.log.Warn("dead letter written but its fsync failed; a power loss before the next fsync can lose it", zap.Stringer("id", m.ID), zap.Error(err))
		err = nil
	}
	if err != nil {
		return err
	}
	q.stats.puts.Add(1)
	return nil
}

// scan times out due in-flight messages and releases due deferred ones.
// dirty reports that something was due; idle that nothing is in flight or
// deferred. Scanner workers call it.
func (q *Queue) scan() (dirty, idle bool) {
	q.putMu.RLock()
	if q.closed.Load() {
		q.putMu.RUnlock()
		return false, true
	}
	now := q.now()
	dirty, dead := q.processInFlight(now)
	dirty = q.processDeferred(now) || dirty
	q.putMu.RUnlock()
	for _, r := range dead {
		q.afterDead(r)
	}
	return dirty, !q.hasTimers()
}

// processInFlight redelivers (or dead-letters) every in-flight message
// whose deadline is at or before now. It returns the dead ones, in
// deadline order, for afterDead.
func (q *Queue) processInFlight(now time.Time) (dirty bool, dead []*record) {
	for {
		q.inFlightMu.Lock()
		e, _ := q.inFlightPQ.PeekAndShift(now)
		if e == nil {
			q.inFlightMu.Unlock()
			return dirty, dead
		}
		r := e.Value
		q.inFlight.remove(r.m.ID)
		q.inFlightMu.Unlock()
		dirty = true
		q.stats.timedOut.Add(1)
		q.log.Debug("delivery timed out", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts))
		if q.retire(r, now, now) {
			dead = append(dead, r)
		}
	}
}

// processDeferred makes every deferred message due at or before now
// ready. One whose body is on disk only (Open restored it) is read back
// from the journal first.
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
		r := e.Value
		if r.bodyOnDisk {
			if r = q.readBack(r.m.ID, r.m.Attempts, r.m.Due); r == nil {
				continue
			}
		}
		q.putReady(r)
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
