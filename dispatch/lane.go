package dispatch

// lane is the FIFO of one ordering lane's queued items. Every field is
// guarded by the scheduler's mutex.
type lane[M, T any] struct {
	key        uint64
	part       *Partition[M, T]
	head, tail *Item[M, T]
	n          int
	holder     *Batch[M, T] // the batch running (or filling, or parked on) this lane's items
	inReady    bool
	nextReady  *lane[M, T]
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
func (l *lane[M, T]) idle() bool { return l.n == 0 && l.holder == nil && !l.inReady }

// laneList is an intrusive FIFO of lanes (the ready queue).
type laneList[M, T any] struct {
	head, tail *lane[M, T]
}

func (q *laneList[M, T]) push(l *lane[M, T]) {
	l.nextReady = nil
	if q.tail == nil {
		q.head = l
	} else {
		q.tail.nextReady = l
	}
	q.tail = l
}

func (q *laneList[M, T]) pop() *lane[M, T] {
	l := q.head
	if l == nil {
		return nil
	}
	q.head = l.nextReady
	if q.head == nil {
		q.tail = nil
	}
	l.nextReady = nil
	return l
}
