package dispatch

// lane is the FIFO of one ordering lane's queued items. Every field is
// guarded by the scheduler's mutex.
type lane[M, T any] struct {
	part       *Partition[M, T]
	head, tail *Item[M, T]
	n          int
	holder     *Batch[M, T] // the batch running (or filling, or parked on) this lane's items
	inReady    bool         // in the scheduler's fresh list or requeue heap
	pending    int          // items assigned by laneFor, not yet pushed (owner only)
	nextReady  *lane[M, T]  // fresh list link
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

// idle reports whether nothing refers to the lane but its partition's map.
func (l *lane[M, T]) idle() bool { return l.n == 0 && l.holder == nil && !l.inReady && l.pending == 0 }
