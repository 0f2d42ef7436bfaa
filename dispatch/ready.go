package dispatch

// The scheduler's ready queue: lanes with queued items and no other
// holder, served oldest head first. Serving the oldest waiting message
// first (subject to lane order) keeps every partition's commit frontier
// close behind the work done; a FIFO of lanes that hands out a lane's whole
// queue lets newer messages of early lanes finish long before older
// messages of late ones, and the frontier (and the in-flight budget behind
// it) stalls for a whole round.
//
// Two structures make it cheap: lanes that become ready because a new item
// arrived have the newest heads, in arrival order, so they go to a FIFO
// (fresh); lanes that come back with older items queued (released after a
// batch, or still holding items after one was taken) go to a min-heap on
// their head's stamp (requeued). take compares the two fronts. With many
// keys most lanes hold one item at a time, and cost O(1).

// laneList is an intrusive FIFO of lanes.
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

func (q *laneList[M, T]) pop() {
	l := q.head
	q.head = l.nextReady
	if q.head == nil {
		q.tail = nil
	}
	l.nextReady = nil
}

// readyHeap is a min-heap of lanes on their head's stamp. Entries carry the
// key inline so sifting touches only the array.
type readyHeap[M, T any] struct {
	e []readyEntry[M, T]
}

type readyEntry[M, T any] struct {
	stamp uint64
	l     *lane[M, T]
}

func (h *readyHeap[M, T]) len() int { return len(h.e) }

func (h *readyHeap[M, T]) push(l *lane[M, T]) {
	h.e = append(h.e, readyEntry[M, T]{l.head.stamp, l})
	// up: new heads are usually the newest, so this rarely moves
	j := len(h.e) - 1
	for j > 0 {
		i := (j - 1) / 2
		if h.e[i].stamp <= h.e[j].stamp {
			break
		}
		h.e[i], h.e[j] = h.e[j], h.e[i]
		j = i
	}
}

// top returns the lane with the oldest head, or nil.
func (h *readyHeap[M, T]) top() *lane[M, T] {
	if len(h.e) == 0 {
		return nil
	}
	return h.e[0].l
}

// pop removes the top lane.
func (h *readyHeap[M, T]) pop() {
	n := len(h.e) - 1
	h.e[0] = h.e[n]
	h.e[n] = readyEntry[M, T]{}
	h.e = h.e[:n]
	if n > 0 {
		h.down()
	}
	if c := cap(h.e); c > 1024 && n < c/4 {
		h.e = append(make([]readyEntry[M, T], 0, c/2), h.e...)
	}
}

func (h *readyHeap[M, T]) down() {
	n := len(h.e)
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h.e[r].stamp < h.e[l].stamp {
			j = r
		}
		if h.e[i].stamp <= h.e[j].stamp {
			return
		}
		h.e[i], h.e[j] = h.e[j], h.e[i]
		i = j
	}
}
