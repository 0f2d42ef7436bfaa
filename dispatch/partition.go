package dispatch

import (
	"github.com/orderly-go/orderly/commit"
	"sync/atomic"
)

const minLaneSweep = 1024

// Partition is one claimed partition's side of the pipeline. Its owner
// goroutine (the Kafka claim loop) calls Alloc/Add/Skip/Flush to feed
// messages in, and Advance when Wake fires to move the commit frontier.
// A new claim of the same partition gets a new Partition, so completions
// from an older claim can never move the new claim's frontier.
type Partition[M, T any] struct {
	s    *Scheduler[M, T]
	wake chan struct{}

	// owned by the partition goroutine
	tracker *commit.Tracker[*Item[M, T]]
	free    *Item[M, T]
	pending []*Item[M, T]
	credit  int64
	closed  bool

	// owned by the partition goroutine (lane fields themselves are guarded
	// by the scheduler mutex)
	lanes     map[uint64]*lane[M, T]
	freeLanes []*lane[M, T]
	sweepAt   int

	revoked bool // guarded by the scheduler mutex

	outstanding atomicInt // items handed to lanes and not yet finished, dropped or abandoned
	// head is the offset of the oldest unreleased item (-1: none), published
	// by the owner: only finishing that item can move the frontier, so
	// workers wake the owner for it alone, not for every completion.
	head atomicInt
	// draining makes every completion wake the owner (it waits for
	// Outstanding to reach zero after Revoke).
	draining atomicBool
	// wakePending: a head completion is waiting in the scheduler's waker
	// (see Options.WakeDelay).
	wakePending atomicBool
	// budgetWait: registered to be woken when in-flight budget frees up.
	budgetWait atomicBool
}

// NewPartition starts the pipeline state of one claim. chanSize is the most
// items the owner hands over per Flush.
func (s *Scheduler[M, T]) NewPartition(chanSize int) *Partition[M, T] {
	p := &Partition[M, T]{
		s:       s,
		wake:    make(chan struct{}, 1),
		tracker: commit.New[*Item[M, T]](chanSize),
		pending: make([]*Item[M, T], 0, chanSize),
		lanes:   make(map[uint64]*lane[M, T]),
		sweepAt: minLaneSweep,
	}
	p.head.Store(-1)
	return p
}

// Wake is signalled when items finished (Advance may move the frontier) or
// budget was released (Acquire may succeed).
func (p *Partition[M, T]) Wake() <-chan struct{} { return p.wake }

// Alloc returns a zeroed item to fill in (Msg, Val, Lane) and Add or Skip.
func (p *Partition[M, T]) Alloc() *Item[M, T] {
	if it := p.free; it != nil {
		p.free = it.next
		it.next = nil
		return it
	}
	return &Item[M, T]{part: p}
}

// Add tracks it at offset and queues it for its lane at the next Flush. It
// uses one credit (see Acquire). On error (an offset that does not follow
// the previous one) the item is recycled and nothing is tracked.
func (p *Partition[M, T]) Add(it *Item[M, T], offset int64) error {
	if err := p.track(it, offset); err != nil {
		return err
	}
	it.lane = p.laneFor(it.Lane)
	p.pending = append(p.pending, it)
	return nil
}

// Skip tracks it at offset as already finished (a message that could not be
// decoded): the frontier moves past it without a Do call.
func (p *Partition[M, T]) Skip(it *Item[M, T], offset int64) error {
	if err := p.track(it, offset); err != nil {
		return err
	}
	atomic.StoreUint32(&it.done, 1)
	return nil
}

func (p *Partition[M, T]) track(it *Item[M, T], offset int64) error {
	it.offset = offset
	it.Attempt = 1
	empty := p.tracker.Pending() == 0
	if err := p.tracker.Add(it); err != nil {
		p.recycle(it)
		return err
	}
	if empty {
		p.head.Store(offset) // before any worker can see the item
	}
	p.credit--
	return nil
}

// Flush hands the items added since the last Flush to the scheduler.
func (p *Partition[M, T]) Flush() {
	if len(p.pending) == 0 {
		return
	}
	n := uint64(len(p.pending))
	stamp := p.s.stamps.Add(n) - n
	for _, it := range p.pending {
		it.stamp = stamp
		stamp++
	}
	p.outstanding.Add(int64(n))
	p.s.push(p, p.pending)
	clear(p.pending)
	p.pending = p.pending[:0]
}

// Room reports whether the in-flight budget has room; when it has not, the
// partition is registered to be woken when it may, and should not dispatch
// more. A partition that reads after Room said yes may overshoot
// MaxInFlight by the one message it reads before Acquire. Asking again
// while registered (a claim loop holding messages asks once per message)
// costs one atomic load: the filler was kicked when it registered.
func (p *Partition[M, T]) Room() bool {
	if p.s.budget.used.Load() < p.s.budget.max {
		return true
	}
	if !p.s.budget.wait(p.wake, &p.budgetWait.Bool) {
		return false // registered before and not woken yet: the filler was kicked then
	}
	if p.s.budget.used.Load() < p.s.budget.max {
		return true
	}
	p.s.kickFiller()
	return false
}

// Acquire takes credit for one message already read plus up to more
// further ones, and returns how many further messages it may read now.
func (p *Partition[M, T]) Acquire(more int) int {
	p.s.budget.used.Add(1)
	p.credit++
	g := p.s.budget.tryAcquire(int64(more))
	p.credit += g
	return int(g)
}

// Unused gives back credit taken by Acquire and not used by Add or Skip.
func (p *Partition[M, T]) Unused() {
	if p.credit > 0 {
		p.s.budget.release(p.credit)
		p.credit = 0
	}
}

// Advance releases the finished prefix of the partition, recycles its items
// and returns their budget. It returns how many messages it released; the
// offset to commit is then Next.
func (p *Partition[M, T]) Advance() int {
	n := 0
	for {
		n += p.tracker.Advance(p.recycle)
		h, ok := p.tracker.Head()
		if !ok {
			p.head.Store(-1)
			break
		}
		// Publish the new head, then look at it again: a worker that
		// finished it before the publish saw the old head and did not
		// wake us. (Both sides use sequentially consistent atomics.)
		p.head.Store(h.offset)
		if !h.Finished() {
			break
		}
	}
	p.s.budget.release(int64(n))
	return n
}

// Next is the offset to commit (one past the last finished message of the
// contiguous prefix), and false when nothing has finished yet.
func (p *Partition[M, T]) Next() (int64, bool) { return p.tracker.Next() }

// Finished returns the offset to commit and the finished offsets above it
// (see commit.Tracker.Finished), reusing dst.
func (p *Partition[M, T]) Finished(dst []commit.Range) (int64, []commit.Range, bool) {
	return p.tracker.Finished(dst)
}

// Last is the offset of the last message added or skipped, -1 before any.
func (p *Partition[M, T]) Last() int64 { return p.tracker.Last() }

// Pending is how many tracked messages are not yet behind the frontier.
func (p *Partition[M, T]) Pending() int { return p.tracker.Pending() }

// Outstanding is how many of the partition's items are queued, waiting in a
// batch or running, and so may still finish.
func (p *Partition[M, T]) Outstanding() int64 { return p.outstanding.Load() }

func (p *Partition[M, T]) recycle(it *Item[M, T]) {
	if p.s.reset != nil {
		p.s.reset(&it.Msg, &it.Val) // drop what the message refers to
	} else {
		var zm M
		var zt T
		it.Msg, it.Val = zm, zt
	}
	it.lane = nil
	it.done = 0
	it.next = p.free
	p.free = it
}

// finished records n items finished; wake says one of them was the head.
func (p *Partition[M, T]) finished(n int64, wake bool) {
	p.outstanding.Add(-n)
	switch {
	case p.draining.Load():
		signal(p.wake)
	case !wake:
	case p.s.wakeDelay <= 0:
		signal(p.wake)
	case !p.wakePending.Load() && !p.wakePending.Swap(true): // load first: usually already pending
		p.s.deferWake(p)
	}
}

func (p *Partition[M, T]) abandoned(n int64) { p.finished(n, false) }

// Drain makes every later completion wake the owner, which then waits for
// Outstanding to reach zero. Call it after Revoke and before reading
// Outstanding.
func (p *Partition[M, T]) Drain() { p.draining.Store(true) }

// Revoke stops dispatching the partition: its queued items and the items
// waiting in a partial or parked batch are dropped and will not run; items
// inside a Do call are left to finish (wait for Outstanding to reach 0).
// It returns how many unstarted items were dropped and how many items of
// failed batches awaiting retry were abandoned.
func (p *Partition[M, T]) Revoke() (dropped, abandoned int) {
	p.Flush()
	dropped, abandoned = p.s.revoke(p)
	p.outstanding.Add(-int64(dropped + abandoned))
	return dropped, abandoned
}

// Close fences the partition after Revoke and the final Advance: later
// completions cannot move its frontier. Its remaining budget is returned.
// It reports how many tracked messages were left behind the frontier.
func (p *Partition[M, T]) Close() int {
	if p.closed {
		return 0
	}
	p.closed = true
	left := p.tracker.Fence()
	p.s.budget.release(int64(left))
	p.Unused()
	p.free = nil
	return left
}

// laneFor returns key's lane, creating one (reusing an idle one) when the
// key has none, and counts an item on its way to it. Only the partition's
// goroutine touches the lane map, so this runs outside the scheduler lock;
// only the sweep of idle lanes, rare, takes it to read lane state.
func (p *Partition[M, T]) laneFor(key uint64) *lane[M, T] {
	l := p.lanes[key]
	if l == nil {
		if len(p.lanes) >= p.sweepAt {
			p.sweep()
		}
		if n := len(p.freeLanes); n > 0 {
			l = p.freeLanes[n-1]
			p.freeLanes[n-1] = nil
			p.freeLanes = p.freeLanes[:n-1]
			*l = lane[M, T]{}
		} else {
			l = new(lane[M, T])
		}
		l.part = p
		p.lanes[key] = l
	}
	l.pending++
	return l
}

// sweep drops idle lanes from the lane map, keeping some for reuse.
func (p *Partition[M, T]) sweep() {
	p.s.mu.Lock()
	for k, l := range p.lanes {
		if l.idle() {
			delete(p.lanes, k)
			if len(p.freeLanes) < minLaneSweep {
				p.freeLanes = append(p.freeLanes, l)
			}
		}
	}
	p.s.mu.Unlock()
	p.sweepAt = max(minLaneSweep, 2*len(p.lanes))
}
