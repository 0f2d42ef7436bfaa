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
	// Retry: the item failed; it goes back to the front of its lane,
	// which waits until Outcome.Due.
	Retry
	// Return: the item neither finished nor failed (it was not run, or
	// its call was cancelled); it goes back to the front of its lane, to
	// run again as soon as a worker takes it.
	Return
)

// Outcome is the verdict on one item, and for Retry when it may run again.
type Outcome struct {
	Verdict Verdict
	Due     time.Time
}

// Settle ends a batch that did not simply succeed, item by item, with
// out[i] the outcome of b.Items[i]. Items of a lane after one that goes back
// (Retry or Return) go back too, behind it and in order, whatever their own
// outcome: a lane's later messages never finish before an earlier one.
// Items whose partition was revoked are abandoned, never requeued. The
// batch's lanes are let go: a lane whose first returned item is a Retry
// waits in the retry queue until its Due; the others are ready again at
// once. b is empty and reusable afterwards. It returns how many items went
// back to their partitions.
func (s *Scheduler[M, T]) Settle(b *Batch[M, T], out []Outcome) (finished int) {
	done, gone := b.done[:0], b.gone[:0]
	now := time.Now()
	s.mu.Lock()
	for i, it := range b.Items {
		o := out[i]
		if o.Verdict == Finished {
			continue // handed back already: its partition may have recycled it
		}
		if it.part.revoked {
			gone = append(gone, it)
			continue
		}
		switch l := it.lane; {
		case l.backN > 0:
			l.putBack(it) // behind an earlier item of its lane
		case o.Verdict == Done:
			done = append(done, it)
		default:
			l.putBack(it)
			l.retry.Deadline = time.Time{}
			if o.Verdict == Retry {
				l.retry.Deadline = o.Due
			}
		}
	}
	if b.w.running == b {
		b.w.running = nil
	}
	kick := false
	for i, l := range b.lanes {
		b.lanes[i] = nil
		l.holder = nil
		n := l.restoreBack()
		if l.part.revoked {
			continue
		}
		if n > 0 && l.inReady {
			s.readyItems += n
		}
		switch {
		case n > 0 && l.retry.Deadline.After(now):
			l.blocked = true
			s.retries.Push(&l.retry)
			kick = kick || s.retries.Peek() == &l.retry
		case l.n > 0 && !l.inReady:
			s.requeue(l)
		}
	}
	b.lanes = b.lanes[:0]
	s.wakeLocked()
	s.mu.Unlock()
	if kick {
		signal(s.retryKick)
	}
	finish(done)
	abandon(gone)
	clear(done)
	clear(gone)
	b.done, b.gone = done[:0], gone[:0]
	clear(b.Items)
	b.Items = b.Items[:0]
	return len(done)
}

// RunRetries makes blocked lanes ready again when their retry is due, until
// stop is closed. Run it in one goroutine.
func (s *Scheduler[M, T]) RunRetries(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		wait := time.Duration(-1)
		s.mu.Lock()
		now := time.Now()
		for {
			e, d := s.retries.PeekAndShift(now)
			if e == nil {
				if s.retries.Len() > 0 {
					wait = d
				}
				break
			}
			l := e.Value
			l.blocked = false
			if !l.part.revoked && l.holder == nil && !l.inReady && l.n > 0 {
				s.requeue(l)
			}
		}
		s.wakeLocked()
		s.mu.Unlock()
		var due <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-due:
		case <-s.retryKick:
		case <-stop:
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// Retrying is how many lanes wait for a retry.
func (s *Scheduler[M, T]) Retrying() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retries.Len()
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

// CancelAll cancels the context of every running batch with cause.
func (s *Scheduler[M, T]) CancelAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
		if w.running != nil && w.cancel != nil {
			w.cancel(cause)
		}
	}
}

// SortByLane reorders a running batch's items so that each lane's items
// stand together, lanes in the order they first appear and each lane's
// items in their order: any split of the batch at a lane boundary then
// keeps lane order. Only the batch's worker touches a running batch's
// items.
func (b *Batch[M, T]) SortByLane() {
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
	copy(b.Items, sorted)
	clear(sorted)
	b.scratch, b.starts = sorted[:0], starts[:0]
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
