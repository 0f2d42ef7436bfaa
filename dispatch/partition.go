package dispatch

import (
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/commit"
)

const minLaneSweep = 1024

// Partition is one claimed partition's side of the pipeline. Its owner
// goroutine (the Kafka claim loop) calls Alloc/Add/Skip/Flush to feed
// messages in, and Advance when Wake fires to take back finished items and
// move the commit frontier. A new claim of the same partition gets a new
// Partition, so completions from an older claim can never move the new
// claim's frontier.
type Partition[M, T any] struct {
	s    *Scheduler[M, T]
	wake chan struct{}
	// finished is a stack of finished items (a chain through Item.next)
	// that workers push and the owner takes whole in Advance. Once Seal
	// put sealMark on top, nothing more is pushed.
	finished atomic.Pointer[Item[M, T]]
	sealMark *Item[M, T] // set at creation, never pushed by a worker
	// waiting counts p's items with a waitAttempt, not yet recycled:
	// WaitingItems looks for them only while there are any.
	waiting atomic.Int64

	// owned by the partition goroutine
	tracker *commit.Tracker[*Item[M, T]]
	// free is a stack of recycled items, a slice rather than a chain
	// through Item.next: popping one reads only the slice, so taking an
	// item never waits for another item's cache line.
	free      []*Item[M, T]
	chanSize  int
	pending   []*Item[M, T]
	closed    bool
	side      bool  // NewSidePartition: no share, not among parts
	inflight  int64 // items added and not yet finished
	bytes     int64 // their sizes
	peak      int64 // most items in flight since the last Trim
	outOfRoom bool  // counted in shares.paused
	orphaned  int64 // items replaced by copies (replaceOrphans)

	// owned by the partition goroutine (lane fields themselves are guarded
	// by the scheduler mutex)
	lanes     laneTable[M, T]
	freeLanes []*lane[M, T]
	sweepAt   int
	sweep     laneSweep // what laneFor's sweeps learn about the keys (lanesweep.go)

	revoked bool // guarded by the scheduler mutex
	// sealed: Seal ran; atSeal is the stack it took off, for the final
	// Advance. Owner only.
	sealed bool
	atSeal *Item[M, T]
	// tag is the stamp of the partition's last pushed item (guarded by
	// the scheduler mutex): its next item's stamp is one past it, or past
	// the scheduler's virtual time if that is later (Scheduler.push).
	tag uint64
	// inPaced: in the scheduler's paced list. Written under the scheduler
	// mutex; atomic so that the owner can see without the lock whether it
	// is still listed (ListIfPaced, UnlistPaced).
	inPaced atomic.Bool
	held    int           // lanes held (Settle, Unhold); guarded by the scheduler mutex
	orphans []*Item[M, T] // items Orphan gave up on, for the owner to copy; guarded by the scheduler mutex
	// drained lists, for the final commit (DrainedWaiting), the items
	// with an attempt to hand over that were let go or held since the
	// revoke: those it took off their lanes with a waitAttempt (dropped,
	// or kept: Item.kept), the copies of orphans that push dropped unrun,
	// and those Settle held or found charged in the drain. Guarded by
	// the scheduler mutex.
	drained []WaitingItem[M, T]
	// hasOrphans is set, under the scheduler mutex, while orphans is not
	// empty: the owner's every Advance reads it instead of taking the lock.
	hasOrphans atomic.Bool
	gone       atomic.Bool // revoked, for readers without the lock

	// unsettled holds two counts in one word, so that one load reads both
	// at one instant (Unsettled): its low 32 bits count the items handed
	// to lanes (Flush, Track) and not yet taken back by the owner
	// (AdvanceFunc), dropped, abandoned or given up on (Orphan: its copy
	// counts instead): Outstanding; the bits above
	// count the items abandoned after the revoke (failed in the drain, or
	// let go once their hold was settled): Unsettled reads both.
	unsettled atomicInt
	// draining makes every completion wake the owner (it waits for
	// Outstanding to reach zero after Revoke).
	draining atomicBool
	// wakePending: a completion wake is waiting in the scheduler's waker
	// (see Options.WakeDelay).
	wakePending atomicBool
	inFlight    atomic.Int64 // inflight as of the last Advance, for Stats
}

// NewPartition starts the pipeline state of one claim. chanSize is the most
// items the owner hands over per Flush. The in-flight shares of every
// partition shrink to make room for it.
func (s *Scheduler[M, T]) NewPartition(chanSize int) *Partition[M, T] {
	p := s.newPartition(chanSize)
	s.partsMu.Lock()
	s.parts[p] = struct{}{}
	s.partsMu.Unlock()
	s.shares.claimed.Add(1)
	return p
}

// NewSidePartition starts a partition that feeds the workers without a
// Kafka claim behind it (messages redelivered from a local queue): it
// takes no share of the in-flight budget (its owner bounds what it adds),
// and its frontier means nothing.
func (s *Scheduler[M, T]) NewSidePartition(chanSize int) *Partition[M, T] {
	p := s.newPartition(chanSize)
	p.side = true
	return p
}

func (s *Scheduler[M, T]) newPartition(chanSize int) *Partition[M, T] {
	p := &Partition[M, T]{
		s:        s,
		sealMark: new(Item[M, T]),
		wake:     make(chan struct{}, 1),
		tracker:  commit.New[*Item[M, T]](),
		chanSize: chanSize,
		pending:  make([]*Item[M, T], 0, chanSize),
		sweepAt:  minLaneSweep,
	}
	return p
}

// Wake is signalled when items finished (Advance takes them back) or the
// partition's share grew (Room may say yes again).
func (p *Partition[M, T]) Wake() <-chan struct{} { return p.wake }

// Alloc returns an item to fill in (Msg, Val, Lane) and Add or Skip.
func (p *Partition[M, T]) Alloc() *Item[M, T] {
	if n := len(p.free); n > 0 {
		it := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return it
	}
	return &Item[M, T]{part: p}
}

// Add tracks it at offset, counts it and its size (bytes) against the
// partition's share, and queues it for its lane at the next Flush. On
// error (an offset that does not follow the previous one) the item is
// recycled and nothing is tracked.
func (p *Partition[M, T]) Add(it *Item[M, T], offset, size int64) error {
	it.offset = offset
	if err := p.tracker.Add(it); err != nil {
		p.recycle(it)
		return err
	}
	it.Attempt, it.size = 1, int32(size)
	it.clearFirstFailure()
	p.inflight++
	p.bytes += size
	p.peak = max(p.peak, p.inflight)
	it.lane = p.laneFor(it.Lane)
	p.pending = append(p.pending, it)
	return nil
}

// AddHeld is Add for an item that must wait before it runs (a message a
// previous owner left waiting for its retry, as the commit metadata says):
// when it reaches its lane, first, the lane is held for it and
// Options.Hold is told, with o. If its lane has items queued ahead of it,
// it just waits its turn.
func (p *Partition[M, T]) AddHeld(it *Item[M, T], offset, size int64, o Outcome) error {
	if err := p.Add(it, offset, size); err != nil {
		return err
	}
	o.Verdict = Hold
	it.arrival = &o
	return nil
}

// Track records it at offset as received and unfinished, counted against
// the partition's share like Add, without queueing it for a lane:
// something else finishes it with Complete (a message that could not be
// decoded, once its dead letter is written).
func (p *Partition[M, T]) Track(it *Item[M, T], offset, size int64) error {
	it.offset = offset
	if err := p.tracker.Add(it); err != nil {
		p.recycle(it)
		return err
	}
	it.Attempt, it.size = 1, int32(size)
	it.clearFirstFailure()
	p.inflight++
	p.bytes += size
	p.peak = max(p.peak, p.inflight)
	p.unsettled.Add(1)
	return nil
}

// Complete hands back an item taken with Track as finished, from any
// goroutine; nothing may touch it afterwards. It reports whether p took
// it back: not once its owner has sealed p (Seal: its drain gave up on
// the item, and counted it so).
func (p *Partition[M, T]) Complete(it *Item[M, T]) (taken bool) {
	return finish([]*Item[M, T]{it}) == 1
}

// Released is how many messages the frontier has passed since the
// partition was made: finished, and skipped (Skip releases at once what
// the frontier may pass, outside AdvanceFunc).
func (p *Partition[M, T]) Released() uint64 { return p.tracker.Released() }

// Skip records the message at offset as finished without a Do call (one
// that could not be decoded, or that a previous owner finished) and
// recycles it: the frontier moves past it.
func (p *Partition[M, T]) Skip(it *Item[M, T], offset int64) error {
	err := p.tracker.Skip(offset)
	p.recycle(it)
	return err
}

// Flush hands the items added since the last Flush to the scheduler.
func (p *Partition[M, T]) Flush() {
	if len(p.pending) == 0 {
		return
	}
	p.unsettled.Add(int64(len(p.pending)))
	p.inFlight.Store(p.inflight)
	p.s.push(p, p.pending)
	clear(p.pending)
	p.pending = p.pending[:0]
}

// Room reports whether the partition may read more: its unfinished
// messages are below its share of MaxInFlight and their bytes below its
// share of MaxInFlightBytes (see shares). Once it has said no, the
// partition's own completions wake the owner (Wake), and so does a share
// that grows.
func (p *Partition[M, T]) Room() bool {
	room := p.inflight < p.s.shares.count() && (p.inflight == 0 || p.bytes < p.s.shares.bytes())
	if room == p.outOfRoom {
		p.outOfRoom = !room
		if room {
			p.s.shares.paused.Add(-1)
		} else {
			p.s.shares.paused.Add(1)
			p.s.kickFiller() // nothing more comes from here for now
		}
	}
	return room
}

// Quota is how many more messages, and how many more bytes, the partition
// may read before Room says no. After Room said yes it may read one
// message whatever the quota says.
func (p *Partition[M, T]) Quota() (count int, bytes int64) {
	return int(max(p.s.shares.count()-p.inflight, 0)), max(p.s.shares.bytes()-p.bytes, 0)
}

// Advance takes back the items workers finished, recycles them, returns
// their share and moves the frontier. It returns how many messages passed
// the frontier; the offset to commit is then Next.
func (p *Partition[M, T]) Advance() int { return p.AdvanceFunc(nil) }

// AdvanceFunc is Advance, calling fn (if not nil) with each finished item
// before it is recycled.
func (p *Partition[M, T]) AdvanceFunc(fn func(*Item[M, T])) int {
	if p.closed {
		return 0
	}
	before := p.tracker.Released()
	p.replaceOrphans()
	var it *Item[M, T]
	if p.sealed {
		it, p.atSeal = p.atSeal, nil
	} else {
		it = p.finished.Swap(nil)
	}
	taken := int64(0)
	for it != nil {
		next := it.next
		if it.orphan.Load() {
			// A hung call came back: its copy runs, or has run, in
			// its place (replaceOrphans), and Orphan took it off
			// Outstanding.
			if it.replaced {
				p.recycle(it)
			} else {
				it.returned = true // recycled once replaced
			}
			it = next
			continue
		}
		taken++
		if p.tracker.Finish(it) {
			p.inflight--
			p.bytes -= int64(it.size)
		}
		if fn != nil {
			fn(it)
		}
		p.recycle(it)
		it = next
	}
	if taken > 0 {
		p.unsettled.Add(-taken) // one atomic per Advance, none per completion
	}
	p.inFlight.Store(p.inflight)
	return int(p.tracker.Released() - before)
}

// replaceOrphans makes a copy of each item Orphan gave up on, one attempt
// on, puts it in the item's place in the tracker and queues it on its lane.
func (p *Partition[M, T]) replaceOrphans() {
	if !p.hasOrphans.Load() {
		return
	}
	p.s.mu.Lock()
	orphans := p.orphans
	p.orphans = nil
	p.hasOrphans.Store(false)
	p.s.mu.Unlock()
	for _, old := range orphans {
		c := p.Alloc()
		c.offset, c.size, c.Lane, c.Val, c.Msg = old.offset, old.size, old.Lane, old.Val, old.Msg
		if p.s.copied != nil {
			p.s.copied(&c.Msg, &c.Val)
		}
		c.Attempt = old.Attempt + 1
		c.firstFailure.Store(old.firstFailure.Load())
		c.NoteFailure(time.Now())
		if p.s.copyErr != nil {
			c.arrival = &Outcome{Err: p.s.copyErr} // for LastError
		}
		if !p.tracker.Replace(old, c) {
			p.recycle(c) // finished meanwhile, or fenced
			continue
		}
		old.replaced = true
		c.lane = p.laneFor(c.Lane)
		p.pending = append(p.pending, c)
		p.orphaned++
		if old.returned {
			p.recycle(old)
		}
	}
	p.Flush()
}

// Orphaned is how many items' hung calls were given up on (their copies
// ran in their place); owner only.
func (p *Partition[M, T]) Orphaned() int64 { return p.orphaned }

// Trim lets go of free items beyond what the partition needed since the
// last Trim (at least two channels' worth), so that the memory of a stall
// or a burst is given back once it is over, and sweeps idle lanes when
// they are at least half the lane table, so that the lanes of keys that
// stopped coming are given back without waiting for new keys to trigger
// laneFor's sweep. Call it now and then (the claim loop does at each
// commit interval).
func (p *Partition[M, T]) Trim() {
	// A lane that is not idle has an unfinished item (queued, pending, in
	// a batch or held), so at least len - inflight lanes are idle: a sweep
	// runs only when that is half the table or more, so that its pass
	// over the slots under the scheduler lock is paid for by the lanes it
	// frees. A backlog deeper than half the lanes defers it.
	if n := p.lanes.len(); int64(n)-p.inflight >= int64(max(minLaneSweep, n/2)) {
		p.sweepLanes(false)
	}
	keep := int(max(p.peak, 2*int64(p.chanSize)))
	if n := len(p.free); n > keep {
		// Keep the most recently freed (the top of the stack), in a
		// slice of their size, so the stack's own array shrinks too.
		kept := make([]*Item[M, T], keep)
		copy(kept, p.free[n-keep:])
		clear(p.free)
		p.free = kept
	}
	p.peak = p.inflight
}

// Next is the offset to commit: the oldest unfinished message's, or one
// past the last message received when all have finished; false before any
// message was received.
func (p *Partition[M, T]) Next() (int64, bool) { return p.tracker.Next() }

// Finished returns the offset to commit and the finished offsets above it
// (see commit.Tracker.Finished), reusing dst.
func (p *Partition[M, T]) Finished(dst []commit.Range) (int64, []commit.Range, bool) {
	return p.tracker.Finished(dst)
}

// FinishedAbove is how many received messages above the frontier have
// finished.
func (p *Partition[M, T]) FinishedAbove() int64 { return int64(p.tracker.FinishedAbove()) }

// Last is the offset of the last message added or skipped, -1 before any.
func (p *Partition[M, T]) Last() int64 { return p.tracker.Last() }

// Unfinished is how many messages were added and have not finished (as of
// the last Advance); owner only.
func (p *Partition[M, T]) Unfinished() int64 { return p.inflight }

// InFlight is Unfinished as of the last Advance, for any goroutine.
func (p *Partition[M, T]) InFlight() int64 { return p.inFlight.Load() }

// Bytes is the size of the unfinished messages; owner only.
func (p *Partition[M, T]) Bytes() int64 { return p.bytes }

// Outstanding is how many of the partition's items are queued, waiting in a
// batch, running, or finished and not yet taken back (AdvanceFunc). After
// Seal and the final Advance, those the partition gave up on: their calls
// may still return, and count for nothing.
func (p *Partition[M, T]) Outstanding() int64 {
	n, _ := p.Unsettled()
	return n
}

// Unsettled is Outstanding and the items abandoned since the revoke,
// besides those Revoke reported (items that failed while the partition
// drained, or whose hold was settled with a timed wait (Waits), left for
// the next owner), read at one instant: an item abandoned meanwhile
// counts in one of them, never in both nor in neither.
func (p *Partition[M, T]) Unsettled() (outstanding, abandonedInDrain int64) {
	v := p.unsettled.Load()
	// The low half signed: a count that went below zero (a bug) reads
	// as negative, and ends a drain, rather than as 2^32 items to wait for.
	outstanding = int64(int32(v))
	return outstanding, (v - outstanding) / abandonedUnit
}

// abandonedUnit is one abandoned item in Partition.unsettled: the bits
// below count the outstanding items, read as a signed 32-bit count. A
// partition has fewer than 2^31 of them as long as its in-flight share is
// bounded below that: group bounds it by MaxMaxInFlight (2^30) and a
// channel's worth; Options.MaxInFlight 0 (no bound) is for callers that
// bound what they add themselves.
const abandonedUnit = 1 << 32

func (p *Partition[M, T]) recycle(it *Item[M, T]) {
	if p.s.reset != nil {
		p.s.reset(&it.Msg, &it.Val) // drop what the message refers to
	} else {
		var zm M
		var zt T
		it.Msg, it.Val = zm, zt
	}
	it.lane, it.arrival = nil, nil
	it.orphan.Store(false)
	it.replaced, it.returned, it.kept = false, false, false
	it.Fate = 0
	it.next = nil
	if it.waitAttempt != 0 {
		it.waitAttempt = 0
		p.waiting.Add(-1)
	}
	p.free = append(p.free, it)
}

// complete pushes the finished chain head..tail for the owner to take
// back, and wakes it unless a wake is on its way already. It reports
// false, and pushes nothing, once the partition is sealed (Seal): its
// owner takes nothing more back, and the chain stays Outstanding (the
// owner counts it as given up on). The push is the one place a completion
// is decided: the owner takes the chain off Outstanding when it takes it
// back, so an item is either taken back or counted outstanding at the
// seal, never both, never neither.
func (p *Partition[M, T]) complete(head, tail *Item[M, T]) bool {
	var old *Item[M, T]
	for {
		old = p.finished.Load()
		if old == p.sealMark {
			return false
		}
		tail.next = old
		if p.finished.CompareAndSwap(old, head) {
			break
		}
	}
	switch {
	case p.draining.Load():
		signal(p.wake)
	case old != nil:
		// Whoever pushed onto the empty stack woke the owner, which has
		// not taken the stack yet: it takes these too.
	case p.s.wakeDelay <= 0:
		signal(p.wake)
	case !p.wakePending.Load() && !p.wakePending.Swap(true): // load first: usually already pending
		p.s.deferWake(p)
	}
	return true
}

// Seal ends what the partition takes back from the workers: an item
// finished from now on (its call returned after the drain gave up on it)
// is not the partition's to count or commit, and whoever finished it is
// told so (Batch.Taken, Settle, Finish). The owner calls it when its drain
// ends, before the final Advance, which takes back what finished before:
// Unsettled read after that Advance counts every other item once, as
// given up on (outstanding) or abandoned in the drain, whatever their
// calls do afterwards.
func (p *Partition[M, T]) Seal() {
	if p.sealed {
		return
	}
	p.sealed = true
	p.atSeal = p.finished.Swap(p.sealMark)
}

// abandoned lets go of n items that will not finish, counting those of a
// revoked partition (Unsettled) in the same atomic add that takes
// them off Outstanding.
func (p *Partition[M, T]) abandoned(n int64) {
	if p.gone.Load() {
		p.settle(n*abandonedUnit - n)
		return
	}
	p.settle(-n)
}

// settle adds d to unsettled, waking a draining owner.
func (p *Partition[M, T]) settle(d int64) {
	p.unsettled.Add(d)
	if p.draining.Load() {
		signal(p.wake)
	}
}

// Drain makes every later completion wake the owner, which then waits for
// Outstanding to reach zero. Call it after Revoke and before reading
// Outstanding.
func (p *Partition[M, T]) Drain() { p.draining.Store(true) }

// Revoke stops dispatching the partition: its queued items (waiting to run,
// or waiting for a retry) and the items waiting in a partial batch are
// dropped and will not run; items inside a Do call, and a held item whose
// hold is not settled yet or ends in a write (Finishing: a dead letter, a
// park), are left to finish (wait for Outstanding to reach 0). It returns
// how many items were dropped that never failed, and how many that were
// waiting for a retry (abandoned).
func (p *Partition[M, T]) Revoke() (dropped, abandoned int) {
	p.Flush()
	dropped, abandoned = p.s.revoke(p)
	p.unsettled.Add(-int64(dropped + abandoned))
	return dropped, abandoned
}

// Close fences the partition after Revoke and the final Advance: later
// completions cannot move its frontier, and its share goes back to the
// other partitions. It reports how many tracked messages were left
// unfinished.
func (p *Partition[M, T]) Close() int {
	if p.closed {
		return 0
	}
	p.closed = true
	left := p.tracker.Fence()
	p.free = nil
	if p.outOfRoom {
		p.outOfRoom = false
		p.s.shares.paused.Add(-1)
	}
	if p.side {
		return left
	}
	p.s.partsMu.Lock()
	delete(p.s.parts, p)
	p.s.shares.claimed.Add(-1)
	for q := range p.s.parts { // every share grew
		signal(q.wake)
	}
	p.s.partsMu.Unlock()
	return left
}
