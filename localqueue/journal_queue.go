package localqueue

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// writeMarker puts the dedup marker of the journal's generation at the
// end of the backend: backend records before it were written before this
// Open. A marker that Open found alone in the write file (see
// ownWriteFile) is at the end already, with nothing written after it, and
// is taken as this generation's, so that restarts with nothing written in
// between add no marker each.
//
// The backend's damage count is taken first: damage counted from then
// on may take the marker (see damagedSinceMarker).
func (q *Queue) writeMarker() error {
	q.markerDamage.Store(q.backend.damageCount() + 1)
	if nonce := q.backend.reusedMarker(); nonce != 0 {
		q.journal.setGen(nonce)
	} else if err := q.putBackend(appendMarker(nil, q.journal.gen)); err != nil && !errors.Is(err, ErrNotSynced) {
		return fmt.Errorf("localqueue %s: write the dedup marker: %w", q.opts.Name, err)
	}
	// ErrNotSynced: the marker is written (go-diskqueue logged the fsync);
	// it only dedups, so it needs no fsync of its own.
	q.markerNonce = q.journal.gen
	q.marker.Store(true)
	// Damage counted after the count was taken may have found
	// markerDamage still 0 in backendDamaged: look again.
	q.backendDamaged()
	return nil
}

// recover puts the messages the journal restored back in place: deferred
// ones whose due time is still ahead on the deferred heap, without their
// bodies (the scanner reads each back from the journal when it is due);
// in-flight ones
// through retire, as a delivery that failed (a delivery cut short by a
// crash counts): ready again now with their attempts, or dead-lettered if
// they had used up MaxAttempts; the rest (requeued, or deferred and due)
// ready again with their due time. They stay journaled in the journal until
// they are finished. The ready ones wait in restored, without their bodies
// (Get reads each back from the journal), and are not written to the
// backend again: the journal holds them, and a copy in the backend per
// Open would pile up in the data files of a queue restarted with messages
// it does not get to. Get takes them after the backend records from
// before this Open: at once if there are none (and then no stale copy can
// come, so the stale-copy check ends here), else once it has read the
// dedup marker written after them.
func (q *Queue) recover(restore []restoreEntry) error {
	j := q.journal
	if j.dedupOn.Load() {
		if q.onBackend.Load() == 0 {
			j.endDedup(0)
			q.log.Debug("the backend holds nothing from before this Open: no stale copies to drop")
		} else if err := q.writeMarker(); err != nil {
			return err
		}
	}
	if !j.dedupOn.Load() {
		q.releaseRestored()
	}
	if len(restore) == 0 {
		return nil
	}
	now := q.now()
	var ready, inFlight, deferred, dead, failed int
	for _, re := range restore {
		m := Message{ID: re.id, Attempts: int(re.e.attempts), Due: time.Unix(0, re.e.due)}
		later := re.e.state == stateDeferred && m.Due.After(now)
		if re.e.state == stateInFlight && q.spent(m.Attempts) {
			// Dead-lettered: it needs its body now.
			var err error
			if m, err = j.load(re); err != nil {
				// It stays in the journal: the next Open tries again.
				failed++
				j.counters.errors.Add(1)
				q.log.Error("cannot read a journaled message back from the journal", zap.Stringer("id", re.id), zap.Error(err))
				continue
			}
		}
		r := newRecord(m)
		r.journaled = true
		switch {
		case later:
			r.bodyOnDisk = true
			q.pushDeferred(r)
			deferred++
		case re.e.state == stateInFlight:
			// Ready now (due now), or dead: retired defers nothing here.
			if n, isDead := q.retired(r, now, now); isDead {
				q.afterDead(r)
				dead++
			} else {
				q.restored.push(&n.m)
				inFlight++
			}
		default:
			q.restored.push(&r.m)
			ready++
		}
	}
	q.log.Info("restored journaled messages from the journal", zap.Int("in_flight", inFlight), zap.Int("deferred", deferred),
		zap.Int("due", ready), zap.Int("dead", dead), zap.Int("unreadable", failed))
	return nil
}
