package dispatch

// lane is the FIFO of one ordering lane's queued items. Every field is
// guarded by the scheduler's mutex, except pending and seen (the owner's).
type lane[M, T any] struct {
	part       *Partition[M, T]
	head, tail *Item[M, T]
	n          int
	holder     *Batch[M, T] // the batch running (or filling) with this lane's items
	inReady    bool         // in the scheduler's fresh list or requeue queue
	seen       uint32       // the partition's sweeps at the last laneFor (owner only)
	pending    int          // items assigned by laneFor, not yet pushed (owner only)
	nextReady  *lane[M, T]  // fresh list link
	// blocked: the lane is held for its head (Scheduler.Settle, Unhold):
	// it is not ready, whatever it has queued.
	blocked bool
	// back, backTail, backN: items of this lane going back to its front
	// while a batch settles (Scheduler.Settle).
	back, backTail *Item[M, T]
	backN          int
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

// putBack appends it to the items going back to the lane's front.
func (l *lane[M, T]) putBack(it *Item[M, T]) {
	it.next = nil
	if l.backTail == nil {
		l.back = it
	} else {
		l.backTail.next = it
	}
	l.backTail = it
	l.backN++
}

// restoreBack puts the items gathered by putBack in front of the queue, in
// order, and returns how many.
func (l *lane[M, T]) restoreBack() int {
	n := l.backN
	if n == 0 {
		return 0
	}
	l.backTail.next = l.head
	if l.tail == nil {
		l.tail = l.backTail
	}
	l.head = l.back
	l.n += n
	l.back, l.backTail, l.backN = nil, nil, 0
	return n
}

// idle reports whether nothing refers to the lane but its partition's map.
func (l *lane[M, T]) idle() bool {
	return l.n == 0 && l.holder == nil && !l.inReady && l.pending == 0 && !l.blocked
}
