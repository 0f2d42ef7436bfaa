package localqueue

import (
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// writeMarker appends the dedup marker of the journal's generation to the
// backend: backend records before it were written before this Open.
func (q *Queue) writeMarker() error {
	if err := q.putBackend(appendMarker(nil, q.journal.gen)); err != nil && !errors.Is(err, ErrNotSynced) {
		return fmt.Errorf("localqueue %s: write the dedup marker: %w", q.opts.Name, err)
	}
	// ErrNotSynced: the marker is written (go-diskqueue logged the fsync);
	// it only dedups, so it needs no fsync of its own.
	q.markerNonce = q.journal.gen
	q.marker.Store(true)
	q.backendErrs = q.backend.errorCount()
	return nil
}

// recover puts the messages the journal restored back in place: deferred
// ones whose due time is still ahead on the deferred heap; in-flight ones
// through retire, as a delivery that failed (a delivery cut short by a
// crash counts): ready again now with their attempts, or dead-lettered if
// they had used up MaxAttempts; the rest (requeued, or deferred and due)
// ready again with their due time. They stay journaled in the journal until
// they are finished. The dedup marker goes to the backend first, so that
// the copies written here are not taken for stale ones.
func (q *Queue) recover(restore []restoreEntry) error {
	j := q.journal
	if j.dedupOn.Load() {
		if err := q.writeMarker(); err != nil {
			return err
		}
	}
	if len(restore) == 0 {
		return nil
	}
	now := q.now()
	var ready, inFlight, deferred, dead, failed int
	for _, re := range restore {
		m, err := j.load(re)
		if err != nil {
			// It stays in the journal: the next Open tries again.
			failed++
			j.counters.errors.Add(1)
			q.log.Error("cannot read a journaled message back from the journal", zap.Stringer("id", re.id), zap.Error(err))
			continue
		}
		r := newRecord(m)
		r.journaled = true
		switch {
		case re.e.state == stateDeferred && m.Due.After(now):
			q.pushDeferred(r)
			deferred++
		case re.e.state == stateInFlight:
			if q.retire(r, now, now) {
				q.afterDead(r)
				dead++
			} else {
				inFlight++
			}
		default:
			q.putReady(r)
			ready++
		}
	}
	q.log.Info("restored journaled messages from the journal", zap.Int("in_flight", inFlight), zap.Int("deferred", deferred),
		zap.Int("due", ready), zap.Int("dead", dead), zap.Int("unreadable", failed))
	return nil
}
