package dispatch

import "slices"

// Pacing: a claim loop turns a message into an item (its Msg filled in,
// its lane found, its tracker entry linked) only while the workers are
// short of ready work, or while its partition has less than its share of
// the backlog in flight (mayBePaced). Past Options.Backlog ready items
// and that share, Paced tells the claim loop to leave what it fetched as
// sarama's messages (as it does out of share), and ListIfPaced lists it
// to be woken; as takes drain the
// backlog below the mark, the listed partitions are woken, oldest first,
// as many as the shortfall needs at one Window each, so that they do not
// all push a burst at once, and all of them once nothing is ready.
//
// Why: an item is 256 bytes written at intake and read again by a worker
// and by its owner when it finishes. With tens of thousands queued (a
// claim loop reading as far as its in-flight share lets it, which a
// no-op handler's workers never need), each item's lines had left the
// cache by the time it was touched again, and the claim loops' stores
// into items were the largest part of their cost.
//
// Only ready items count (the scheduler's readyItems): not items queued
// behind a lane's held head, nor, once a take has passed its lane over,
// behind a running one. A lane a batch took items from and requeued while
// it filled counts what arrives for it until the next take passes it over;
// a push wakes idle workers, so that is at once unless every worker is in
// a call, when more items would not be taken anyway.

// pacedLocked publishes the ready backlog to Paced and, once it is below
// the mark, wakes the partitions waiting on it (ListIfPaced), oldest
// first, one per Window of shortfall; all of them once the backlog is
// empty or the scheduler stopped. Call it, holding the lock, after
// readyItems shrinks.
//
// Why all of them at an empty backlog: only takes, revokes, Unhold and
// Stop wake the list, and with nothing ready no take follows. A woken
// partition may push nothing (its share shrank, or its finished set no
// longer fits the commit metadata, since it was listed); the rest would
// then stay listed with the workers idle.
func (s *Scheduler[M, T]) pacedLocked() {
	s.ready.Store(int64(s.readyItems))
	if (s.readyItems >= s.backlog && !s.stopped) || len(s.paced) == 0 {
		return
	}
	n := len(s.paced)
	if !s.stopped && s.readyItems > 0 {
		n = min(n, max(1, (s.backlog-s.readyItems+int(s.window)-1)/int(s.window)))
	}
	for _, p := range s.paced[:n] {
		p.inPaced.Store(false)
		signal(p.wake)
	}
	rest := copy(s.paced, s.paced[n:])
	clear(s.paced[rest:])
	s.paced = s.paced[:rest]
}

// forgetPacedLocked takes p off the paced list (it was revoked, or is no
// longer paced).
func (s *Scheduler[M, T]) forgetPacedLocked(p *Partition[M, T]) {
	if !p.inPaced.Load() {
		return
	}
	p.inPaced.Store(false)
	if i := slices.Index(s.paced, p); i >= 0 {
		s.paced = slices.Delete(s.paced, i, i+1)
	}
}

// Paced reports whether the workers have Options.Backlog items or more
// ready to take, so that the owner should turn no more messages into
// items for now. It has no side effect: to be woken once the backlog
// drains, call ListIfPaced. Owner only; false when Backlog is 0 or the
// scheduler has stopped.
func (p *Partition[M, T]) Paced() bool {
	s := p.s
	if !p.mayBePaced() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readyItems >= s.backlog && !s.stopped && !p.revoked
}

// ListIfPaced is Paced, and while paced it lists p to be woken (Wake)
// once the backlog drains below the mark; not paced, it takes p off the
// list. Call it only while holding messages to dispatch once woken, and
// call UnlistPaced when p could not dispatch anyway: each wake is one of a
// few handed out per take (see pacedLocked), and one spent on a partition
// with nothing to push is lost to those still waiting. Owner only.
func (p *Partition[M, T]) ListIfPaced() bool {
	s := p.s
	if !p.mayBePaced() {
		p.UnlistPaced()
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	paced := s.readyItems >= s.backlog && !s.stopped && !p.revoked
	switch {
	case paced && !p.inPaced.Load():
		p.inPaced.Store(true)
		s.paced = append(s.paced, p)
	case !paced:
		s.forgetPacedLocked(p)
	}
	return paced
}

// mayBePaced is what Paced and ListIfPaced can tell without the lock:
// pacing is on, p is not a side partition, the published backlog is at
// the mark, and p has at least its share of the backlog in flight. Under
// that share the backlog is other partitions' work, and p is not paced:
// otherwise a partition whose records arrived after another's backlog
// waited for that backlog to drain below the mark, and then for a wake
// (one per Window of shortfall, oldest listed first) that the busy
// partition could take before it: with a slow handler, seconds behind a
// partition that was busy but not stuck. Owner only.
func (p *Partition[M, T]) mayBePaced() bool {
	s := p.s
	return s.backlog > 0 && !p.side && s.ready.Load() >= int64(s.backlog) && p.inflight >= p.paceShare()
}

// paceShare is p's share of Options.Backlog: the backlog divided among
// the claimed partitions, at least 1.
func (p *Partition[M, T]) paceShare() int64 {
	return max(1, int64(p.s.backlog)/max(p.s.shares.claimed.Load(), 1))
}

// UnlistPaced takes p off the list of partitions waiting for the backlog
// to drain, if it is on it. Owner only.
func (p *Partition[M, T]) UnlistPaced() {
	if !p.inPaced.Load() {
		return
	}
	p.s.mu.Lock()
	p.s.forgetPacedLocked(p)
	p.s.mu.Unlock()
}
