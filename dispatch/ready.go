package dispatch

// readyHeap is the scheduler's ready queue: lanes with queued items and no
// other holder, ordered by the arrival stamp of their head item, oldest
// first. Serving the oldest waiting message first (subject to lane order)
// keeps every partition's commit frontier close behind the work done; a
// FIFO of lanes that hands out a lane's whole queue lets newer messages of
// early lanes finish long before older messages of late ones, and the
// frontier (and the in-flight budget behind it) stalls for a whole round.
//
// Entries carry the key inline so sifting touches only the array. A lane's
// key changes only while it is at the top (its head was taken), so Fix is
// only needed at index 0.
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

// fixTop re-keys the top lane after its head changed.
func (h *readyHeap[M, T]) fixTop() {
	h.e[0].stamp = h.e[0].l.head.stamp
	h.down()
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
