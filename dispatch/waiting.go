package dispatch

import (
	"math"
	"time"
)

// WaitingItem is an item WaitingItems found, as it saw it under the
// scheduler's lock: the item (a key for the caller's own maps), its offset,
// the attempt a new owner goes on at, whether its lane is held for it now
// (a retry's backoff or a deferral still to run out, a dead letter being
// written) rather than let go, and when it first failed (zero: it never
// did, as a deferral), which a new owner's dead letter for it reports.
type WaitingItem[M, T any] struct {
	Item         *Item[M, T]
	Offset       int64
	Attempt      int
	Held         bool
	FirstFailure time.Time
}

// waitingItem is it as WaitingItems lists it, at attempt. Under the lock.
func waitingItem[M, T any](it *Item[M, T], attempt int, held bool) WaitingItem[M, T] {
	return WaitingItem[M, T]{it, it.offset, attempt, held, it.FirstFailure()}
}

// noteWaitLocked records it as an item the commit metadata must list until
// it finishes (Item.waitAttempt), at its attempt now. Under the lock.
func noteWaitLocked[M, T any](it *Item[M, T]) {
	if it.waitAttempt == 0 {
		it.part.waiting.Add(1)
	}
	it.waitAttempt = int32(min(it.Attempt, math.MaxInt32))
	it.lane.waits = true
}

// WaitingItems appends to dst, in no particular order, p's unfinished
// items that have been held or arrived at an attempt past the first: those
// its held lanes wait for, and those whose lanes were let go since and that
// are queued or running now (a retry that came due while every worker was
// busy). The owner writes them into its commit metadata, so that a new owner
// goes on at their attempts whether or not their backoff had run out. It
// costs nothing while p has none, and otherwise O(p's lanes) plus the items
// of the lanes and batches that hold one. Offset, Attempt and the first
// failure are copied under the lock: the moment it is released, a retry
// that comes due can hand the item to a worker that charges it another
// attempt.
func (s *Scheduler[M, T]) WaitingItems(p *Partition[M, T], dst []WaitingItem[M, T]) []WaitingItem[M, T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.revoked || p.waiting.Load() == 0 {
		return dst
	}
	p.lanes.each(func(l *lane[M, T]) {
		if !l.waits {
			return
		}
		for it := l.head; it != nil; it = it.next {
			if it.waitAttempt != 0 {
				dst = append(dst, waitingItem(it, int(it.waitAttempt), l.blocked && it == l.head))
			}
		}
	})
	for _, w := range s.workers {
		dst = appendWaitingIn(dst, w.running, p)
	}
	return appendWaitingIn(dst, s.filler, p)
}

// appendWaitingIn appends the items of p in b (running, or filling) that
// WaitingItems lists. Under the lock; b's items change only under it while
// b runs or fills (see SortByLane), apart from those Finish handed back.
func appendWaitingIn[M, T any](dst []WaitingItem[M, T], b *Batch[M, T], p *Partition[M, T]) []WaitingItem[M, T] {
	if b == nil || !b.waits || b.orphaned.Load() {
		return dst
	}
	for i, it := range b.Items {
		if it.part == p && it.waitAttempt != 0 && (i >= len(b.early) || !b.early[i]) {
			dst = append(dst, waitingItem(it, int(it.waitAttempt), false))
		}
	}
	return dst
}

// noteDrainedLocked notes it, of a revoked partition, for the owner's
// final commit at attempt (DrainedWaiting). Under the lock.
func noteDrainedLocked[M, T any](it *Item[M, T], attempt int) {
	p := it.part
	p.drained = append(p.drained, waitingItem(it, attempt, false))
}

// DrainedWaiting appends to dst the items of p, revoked, noted for its
// final commit since the revoke, at their attempts then, and forgets them:
// those the revoke took off their lanes with an attempt to list (dropped,
// or kept: Item.kept), the copies of orphans made in the drain, which
// push drops unrun (each stands for its original, one attempt past the
// hung one, which so stays charged), and those a batch settling in the
// drain held or had charged. WaitingItems lists nothing
// once p is revoked: the owner's final commit adds these to what it
// listed before the revoke, so that a failure in the drain still counts.
func (s *Scheduler[M, T]) DrainedWaiting(p *Partition[M, T], dst []WaitingItem[M, T]) []WaitingItem[M, T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst = append(dst, p.drained...)
	clear(p.drained)
	p.drained = p.drained[:0]
	return dst
}
