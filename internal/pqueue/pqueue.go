// Package pqueue is a small generic min-heap keyed on absolute deadlines, the
// shape of nsq's internal/pqueue without interface{} boxing: PeekAndShift(now)
// pops the earliest entry only when it is due, and reports how long until the
// next one otherwise.
//
// A Queue is not safe for concurrent use; one goroutine owns it.
package pqueue

import "time"

// Entry is one element and its deadline. Index is maintained by the queue
// (-1 once the entry has left it) so that callers holding *Entry can Remove
// or Update it in O(log n).
type Entry[T any] struct {
	Value    T
	Deadline time.Time
	index    int
}

// Index reports the entry's position in its queue, or -1 when it is not in one.
func (e *Entry[T]) Index() int { return e.index }

// Queue is a min-heap of *Entry[T] ordered by Deadline (earliest first).
type Queue[T any] struct {
	items []*Entry[T]
}

// New returns a queue with room for capacity entries before it grows.
func New[T any](capacity int) *Queue[T] {
	return &Queue[T]{items: make([]*Entry[T], 0, capacity)}
}

// Len is the number of entries queued.
func (q *Queue[T]) Len() int { return len(q.items) }

// Push adds e. e must not be in any queue.
func (q *Queue[T]) Push(e *Entry[T]) {
	e.index = len(q.items)
	q.items = append(q.items, e)
	q.up(e.index)
}

// Peek returns the earliest entry without removing it, or nil when empty.
func (q *Queue[T]) Peek() *Entry[T] {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// Pop removes and returns the earliest entry, or nil when empty.
func (q *Queue[T]) Pop() *Entry[T] {
	if len(q.items) == 0 {
		return nil
	}
	return q.Remove(0)
}

// PeekAndShift removes and returns the earliest entry if its deadline is at
// or before now. Otherwise it returns nil and how long until the earliest
// entry is due (0 when the queue is empty).
func (q *Queue[T]) PeekAndShift(now time.Time) (*Entry[T], time.Duration) {
	if len(q.items) == 0 {
		return nil, 0
	}
	e := q.items[0]
	if e.Deadline.After(now) {
		return nil, e.Deadline.Sub(now)
	}
	return q.Remove(0), 0
}

// Remove deletes the entry at index i (see Entry.Index) and returns it.
func (q *Queue[T]) Remove(i int) *Entry[T] {
	n := len(q.items) - 1
	e := q.items[i]
	if n != i {
		q.swap(i, n)
		q.items[n] = nil
		q.items = q.items[:n]
		if !q.down(i) {
			q.up(i)
		}
	} else {
		q.items[n] = nil
		q.items = q.items[:n]
	}
	e.index = -1
	// Give back memory after a burst: a queue that grew large and drained
	// should not pin its peak forever.
	if c := cap(q.items); c > 64 && len(q.items) < c/4 {
		shrunk := make([]*Entry[T], len(q.items), c/2)
		copy(shrunk, q.items)
		q.items = shrunk
	}
	return e
}

// Update moves e to a new deadline, keeping heap order.
func (q *Queue[T]) Update(e *Entry[T], deadline time.Time) {
	e.Deadline = deadline
	if !q.down(e.index) {
		q.up(e.index)
	}
}

func (q *Queue[T]) less(i, j int) bool {
	return q.items[i].Deadline.Before(q.items[j].Deadline)
}

func (q *Queue[T]) swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index = i
	q.items[j].index = j
}

func (q *Queue[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !q.less(j, i) {
			return
		}
		q.swap(i, j)
		j = i
	}
}

// down sifts i toward the leaves and reports whether it moved.
func (q *Queue[T]) down(i0 int) bool {
	n := len(q.items)
	i := i0
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		j := l
		if r := l + 1; r < n && q.less(r, l) {
			j = r
		}
		if !q.less(j, i) {
			break
		}
		q.swap(i, j)
		i = j
	}
	return i > i0
}
