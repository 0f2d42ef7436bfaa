package dispatch

// lane is the FIFO of one ordering lane's queued items. Every field is
// guarded by the scheduler's mutex, except pending and seen (the owner's).
// It fits one cache line (64 bytes, TestLaneFitsCacheLine): a lane
// allocated alone, in the 64-byte size class, never straddles two.
type lane[M, T any] struct {
	part       *Partition[M, T]
	head, tail *Item[M, T]
	n          int
	holder     *Batch[M, T] // the batch running (or filling) with this lane's items
	pending    int          // items assigned by laneFor, not yet pushed (owner only)
	nextReady  *lane[M, T]  // fresh list link
	seen       uint32       // the partition's sweeps at the last laneFor (owner only)
	inReady    bool         // in the scheduler's fresh list or requeue queue
	// blocked: the lane is held for its head (Scheduler.Settle, Unhold):
	// it is not ready, whatever it has queued.
	blocked bool
	// returning: while a batch settles, an item of this lane goes back to
	// the lane's front, and its later items in the batch go behind it
	// (Scheduler.Settle).
	returning bool
	// waits: an item with a waitAttempt is, or may be, queued here
	// (set when one is held or queued, cleared when the lane empties):
	// WaitingItems walks only such lanes.
	waits bool
}

func (l *lane[M, T]) push(it *Item[M, T]) {
	it.next = nil
	if l.tail == nil {
		l.head = it
	} else {
		l.tail.next = it
	}
	l.tail = it
	l.n++
}

func (l *lane[M, T]) pop() *Item[M, T] {
	it := l.head
	l.head = it.next
	if l.head == nil {
		l.tail = nil
	}
	it.next = nil
	l.n--
	return it
}

// pushFront puts it at the front of the queue.
func (l *lane[M, T]) pushFront(it *Item[M, T]) {
	it.next = l.head
	l.head = it
	if l.tail == nil {
		l.tail = it
	}
	l.n++
}

// idle reports whether nothing refers to the lane but its partition's map.
func (l *lane[M, T]) idle() bool {
	return l.n == 0 && l.holder == nil && !l.inReady && l.pending == 0 && !l.blocked
}
