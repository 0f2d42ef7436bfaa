package dispatch

// Pacing: a claim loop turns a message into an item (its Msg filled in,
// its lane found, its tracker entry linked) only when the workers are
// about to want it. Items wait in lanes only while the ready backlog is
// below Options.Backlog; past it, the claim loop leaves what it fetched as
// sarama's messages (as it does out of share) and Wake tells it when the
// backlog has drained below the mark again.
//
// Why: an item is 256 bytes written at intake and read again by a worker
// and by its owner when it finishes. With tens of thousands queued (a
// claim loop reading as far as its in-flight share lets it, which a
// no-op handler's workers never need), each item's lines have left the
// cache by the time it is touched again, and those misses were most of
// the claim loop's cost per message.
//
// Only items that workers could take now count (the scheduler's ready
// backlog): items queued behind a lane's running or held head do not, so
// a stuck lane never paces the other partitions, or its own.

// pacedLocked publishes the ready backlog to Paced and wakes the partitions
// waiting on it once it is below the mark or the scheduler stopped. Call
// it, holding the lock, after readyItems shrinks.
func (s *Scheduler[M, T]) pacedLocked() {
	s.ready.Store(int64(s.readyItems))
	if (s.readyItems >= s.backlog && !s.stopped) || len(s.paced) == 0 {
		return
	}
	for i, p := range s.paced {
		p.inPaced = false
		signal(p.wake)
		s.paced[i] = nil
	}
	s.paced = s.paced[:0]
}

// Paced reports whether the workers have Options.Backlog items or more
// ready to take, so that the owner should turn no more messages into
// items for now; Wake fires once the backlog is below the mark. Owner
// only; false when Backlog is 0 or the scheduler has stopped.
func (p *Partition[M, T]) Paced() bool {
	s := p.s
	if s.backlog <= 0 || p.side || s.ready.Load() < int64(s.backlog) {
		return false
	}
	s.mu.Lock()
	paced := s.readyItems >= s.backlog && !s.stopped && !p.revoked
	if paced && !p.inPaced {
		p.inPaced = true
		s.paced = append(s.paced, p)
	}
	s.mu.Unlock()
	if paced {
		p.pacedCount++
	}
	return paced
}

// PacedCount is how many times Paced said yes; owner only.
func (p *Partition[M, T]) PacedCount() int64 { return p.pacedCount }
