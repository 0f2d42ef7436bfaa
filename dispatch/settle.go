package dispatch

import (
	"context"
	"time"
)

// Verdict is what became of one item of a batch that ran.
type Verdict uint8

const (
	// Done: the item finished; it goes back to its partition.
	Done Verdict = iota
	// Finished: the item was handed back already (Scheduler.Finish).
	Finished
	// Return: the item neither finished nor failed (it was not run, or its
	// call was cancelled); it goes back to the front of its lane, to run
	// again as soon as a worker takes it.
	Return
	// Hold: the item goes back to the front of its lane and the lane
	// waits, held, until Unhold: Options.Hold is told, and decides how
	// long (a retry's backoff, a deferral) or what must happen first (a
	// dead letter written).
	Hold
)

// Outcome is the verdict on one item. Kind, Delay and Err belong to the
// caller: Settle hands them to Options.Hold with a held item.
type Outcome struct {
	Verdict Verdict
	Kind    uint8
	Delay   time.Duration
	Err     error
}

// Settle ends a batch that did not simply succeed, item by item, with
// out[i] the outcome of b.Items[i]. Items of a lane after one that goes back
// (Return or Hold) go back too, behind it and in order, whatever their own
// outcome: a lane's later messages never finish before an earlier one.
// Items whose partition was revoked are settled as its drain needs
// (drainedLocked), never requeued. A batch Orphan gave up on ignores what
// its call reported for the items it copied: they are only recycled. The
// batch's lanes are let go: a lane whose first returned item
// is held waits (Options.Hold is called for that item once the lock is
// released); the others are ready again at once. b is empty and reusable
// afterwards. It returns how many items finished (Done) and went back to
// their partitions: not the items only recycled, nor those of a sealed
// partition (Partition.Seal), which its owner no longer takes back.
func (s *Scheduler[M, T]) Settle(b *Batch[M, T], out []Outcome) (finished int) {
	done, gone, held, back, spent := b.done[:0], b.gone[:0], b.held[:0], b.back[:0], b.spent[:0]
	orphaned := b.orphaned.Load()
	s.mu.Lock()
	for i, it := range b.Items {
		o := out[i]
		switch {
		case o.Verdict == Finished:
			continue // handed back already: its partition may have recycled it
		case orphaned && it.orphan.Load():
			// It runs elsewhere (Orphan): what the call says is
			// ignored, and it goes back to its partition only to be
			// recycled.
			spent = append(spent, it)
			continue
		case it.part.revoked:
			// Its partition drains (an orphaned batch's other items are
			// all such: Orphan passes them over).
			switch s.drainedLocked(it, o) {
			case Done:
				done = append(done, it)
			case Hold:
				held = append(held, heldItem[M, T]{it, o})
			default:
				gone = append(gone, it)
			}
			continue
		}
		switch l := it.lane; {
		case l.returning:
			back = append(back, it) // behind an earlier item of its lane
			if o.Verdict == Hold && o.Err != nil {
				it.arrival = &Outcome{Err: o.Err} // for LastError
			}
			if it.Attempt > 1 {
				// Charged (Do named it too), or arrived at a later
				// attempt: listed for the commit metadata until it
				// finishes, as a held head is.
				noteWaitLocked(it)
			}
		case o.Verdict == Done:
			done = append(done, it)
		default:
			l.returning = true
			back = append(back, it)
			if o.Verdict == Hold {
				l.blocked = true
				it.kept = true
				noteWaitLocked(it)
				held = append(held, heldItem[M, T]{it, o})
			}
		}
	}
	if b.w.running == b {
		b.w.running = nil
		s.running--
	}
	if orphaned { // Orphan let go of its lanes: reset what drainedLocked marked
		for i, it := range b.Items {
			if out[i].Verdict != Finished {
				it.lane.returning = false
			}
		}
	}
	// Back to the fronts of their lanes, in batch order: the last first.
	// None is of a revoked partition (those are gone). A lane on the
	// ready queue counts them as ready at once; a blocked one has them
	// taken off again when it is next popped.
	for i := len(back) - 1; i >= 0; i-- {
		l := back[i].lane
		l.pushFront(back[i])
		l.returning = false
		l.waits = l.waits || back[i].waitAttempt != 0
		if l.inReady {
			s.readyItems++
		}
	}
	for i, l := range b.lanes {
		b.lanes[i] = nil
		l.holder = nil
		switch {
		case l.part.revoked:
			l.returning = false
		case l.blocked:
			l.part.held++
			s.held++
		default:
			if l.n > 0 && !l.inReady {
				s.requeue(l)
			}
		}
	}
	b.lanes = b.lanes[:0]
	s.wakeLocked()
	s.mu.Unlock()
	finished = finish(done)
	finish(spent)
	abandon(gone)
	for _, h := range held {
		s.hold(h.it, h.o)
	}
	clear(done)
	clear(gone)
	clear(held)
	clear(back)
	clear(spent)
	b.done, b.gone, b.held, b.back, b.spent = done[:0], gone[:0], held[:0], back[:0], spent[:0]
	clear(b.Items)
	b.Items = b.Items[:0]
	b.reset()
	return finished
}

// drainedLocked decides what becomes of it, of a revoked partition, whose
// call reported o: Done, it finishes, so that the final commit passes it (a
// graceful handoff repeats nothing), unless it is behind an earlier item of
// its lane that goes back; Hold, the first held item of its lane is kept
// outstanding and Options.Hold is told (a dead letter or a park may still
// finish it in the drain; a timed wait abandons it, Waits); anything else
// (Return), it is abandoned, never requeued. The owner's final commit lists
// those held or charged at their attempts now (DrainedWaiting). It marks
// the lane returning; the caller resets that. Under the lock.
func (s *Scheduler[M, T]) drainedLocked(it *Item[M, T], o Outcome) Verdict {
	l := it.lane
	v := Return
	switch {
	case !l.returning && o.Verdict == Done:
		return Done
	case !l.returning && o.Verdict == Hold:
		it.kept = true
		v = Hold
	}
	l.returning = true
	if o.Verdict == Hold || it.Attempt > 1 {
		noteDrainedLocked(it, it.Attempt)
	}
	if v != Hold { // a held item's hold hook decides what becomes of it
		s.showHandedOverLocked(it, it.Attempt)
	}
	return v
}

// heldItem is an item Settle holds at its lane's front, and why.
type heldItem[M, T any] struct {
	it *Item[M, T]
	o  Outcome
}

// Unhold lets the lane held for it go on: with finished, it is done (it
// leaves its lane and goes back to its partition: its dead letter was
// written, or it was parked); otherwise it runs again, first in its lane.
// It reports false when there was nothing to let go: the item's partition
// was revoked meanwhile (its lane's items were dropped), or its lane is not
// held for it. A kept item (Item.kept: held by Settle, or marked
// Finishing) outlives a revoke: Unhold then finishes it (finished) or
// abandons it, and reports true.
func (s *Scheduler[M, T]) Unhold(it *Item[M, T], finished bool) bool {
	letGo, _ := s.unhold(it, finished)
	return letGo
}

// FinishHeld is Unhold(it, true), for a held item that a write finished
// (its dead letter, or its park), reporting whether its partition took
// it back: not when there was nothing to let go, nor when its owner had
// sealed the partition by then (Partition.Seal: the drain gave up on the
// item, and its owner counted it so). Nothing may touch it afterwards.
func (s *Scheduler[M, T]) FinishHeld(it *Item[M, T]) (taken bool) {
	_, taken = s.unhold(it, true)
	return taken
}

// unhold is Unhold, reporting too whether it finished and its partition
// took it back.
func (s *Scheduler[M, T]) unhold(it *Item[M, T], finished bool) (letGo, taken bool) {
	s.mu.Lock()
	l := it.lane
	if it.part.revoked {
		// Its lane's items were dropped; a kept one was left
		// outstanding for this: it finishes while the partition drains,
		// or, not finished, is abandoned.
		marked := it.kept
		it.kept = false
		s.mu.Unlock()
		switch {
		case marked && finished:
			taken = finish([]*Item[M, T]{it}) == 1
		case marked:
			abandon([]*Item[M, T]{it})
		}
		return marked, taken
	}
	if l == nil || !l.blocked || l.head != it {
		s.mu.Unlock()
		return false, false
	}
	it.kept = false
	l.blocked = false
	l.part.held--
	s.held--
	if finished {
		l.pop()
		if l.inReady {
			s.readyItems--
		}
	}
	if l.n > 0 && l.holder == nil && !l.inReady {
		s.requeue(l)
	}
	s.wakeLocked()
	s.pacedLocked()
	s.mu.Unlock()
	if finished {
		taken = finish([]*Item[M, T]{it}) == 1
	}
	return true, taken
}

// Finishing tells the scheduler that it, held, waits for a write that
// finishes it (its dead letter, or its park; Unhold with finished
// follows): a revoke leaves it outstanding rather than dropping it, so
// that the owner's drain waits for it and its final commit passes it (a
// graceful handoff repeats nothing). It reports false, doing nothing,
// when it is neither kept (Item.kept: Settle held it) nor the held head
// of its lane in a partition not revoked.
func (s *Scheduler[M, T]) Finishing(it *Item[M, T]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.kept {
		return true
	}
	l := it.lane
	if it.part.revoked || l == nil || !l.blocked || l.head != it {
		return false
	}
	it.kept = true
	return true
}

// Waits tells the scheduler that it, held, waits for a timer instead
// (Unhold follows when it is due): a revoke from now on drops it with its
// lane. It reports false when its partition was revoked already: it has
// been let go then (abandoned, if Settle had kept it outstanding), and no
// Unhold may follow.
func (s *Scheduler[M, T]) Waits(it *Item[M, T]) bool {
	s.mu.Lock()
	kept, revoked := it.kept, it.part.revoked
	it.kept = false
	s.mu.Unlock()
	if revoked && kept {
		abandon([]*Item[M, T]{it})
	}
	return !revoked
}

// Held is how many lanes wait, held, over all partitions.
func (s *Scheduler[M, T]) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Uncharge takes back the attempt a held item was charged (its failure
// does not count: an outage), under the lock WaitingItems reads it with.
func (s *Scheduler[M, T]) Uncharge(it *Item[M, T]) {
	s.mu.Lock()
	it.Attempt--
	if it.waitAttempt != 0 {
		it.waitAttempt = int32(it.Attempt)
	}
	for i := range it.part.drained { // noted for the final commit since (a revoked partition)
		if d := &it.part.drained[i]; d.Item == it {
			d.Attempt = min(d.Attempt, it.Attempt)
		}
	}
	s.mu.Unlock()
}

// CancelRunning cancels, with cause, the context of every worker whose
// running batch holds items of p (p was revoked and its DrainTimeout
// passed). It returns how many it cancelled.
func (s *Scheduler[M, T]) CancelRunning(p *Partition[M, T], cause error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.workers {
		b := w.running
		if b == nil || w.cancel == nil {
			continue
		}
		for _, l := range b.lanes {
			if l.part == p {
				w.cancel(cause)
				n++
				break
			}
		}
	}
	return n
}

// SortByLane reorders a running batch's items so that each lane's items
// stand together, lanes in the order they first appear and each lane's
// items in their order: any split of the batch at a lane boundary then
// keeps lane order. The batch's worker calls it. The order is worked out
// without the scheduler's lock (nothing else writes a running batch's
// items) and written into the batch under it, since WaitingItems reads
// the items under it.
func (s *Scheduler[M, T]) SortByLane(b *Batch[M, T]) {
	if b.order == nil {
		b.order = make(map[*lane[M, T]]int)
	}
	clear(b.order)
	starts := b.starts[:0]
	for _, it := range b.Items {
		if _, ok := b.order[it.lane]; !ok {
			b.order[it.lane] = len(starts)
			starts = append(starts, 0)
		}
		starts[b.order[it.lane]]++
	}
	sum := 0
	for i, n := range starts {
		starts[i], sum = sum, sum+n
	}
	sorted := append(b.scratch[:0], b.Items...)
	for _, it := range b.Items {
		k := b.order[it.lane]
		sorted[starts[k]] = it
		starts[k]++
	}
	s.mu.Lock()
	copy(b.Items, sorted)
	s.mu.Unlock()
	clear(sorted)
	b.scratch, b.starts = sorted[:0], starts[:0]
}

// MoveBack moves the items of b for which back reports true (asked once
// for each index, in order, before anything moves) to the end of the
// batch, keeping the order within each part, and returns how many stay in
// front. Like SortByLane, the batch's worker calls it before any outcome
// is recorded.
func (s *Scheduler[M, T]) MoveBack(b *Batch[M, T], back func(i int) bool) int {
	front, rest := b.scratch[:0], b.back[:0]
	for i, it := range b.Items {
		if back(i) {
			rest = append(rest, it)
		} else {
			front = append(front, it)
		}
	}
	n := len(front)
	s.mu.Lock()
	copy(b.Items, front)
	copy(b.Items[n:], rest)
	s.mu.Unlock()
	clear(front)
	clear(rest)
	b.scratch, b.back = front[:0], rest[:0]
	return n
}

// SameLane reports whether items i and j of the batch are in one lane.
func (b *Batch[M, T]) SameLane(i, j int) bool { return b.Items[i].lane == b.Items[j].lane }

// WithCancel is a context for a worker's batches that CancelRunning can
// cancel, registered for w.
func (s *Scheduler[M, T]) WithCancel(parent context.Context, w *Worker[M, T]) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	s.SetCancel(w, cancel)
	return ctx
}
