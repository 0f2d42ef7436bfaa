// Package dispatch routes messages to ordering lanes and lanes to workers.
//
// Every claimed partition hands its decoded messages (Items) to one shared
// Scheduler. Items of a partition with equal Lane form a lane: a FIFO that is
// held by at most one batch at a time, so a lane's messages reach Do in
// offset order and never concurrently. Lanes with queued items and no holder
// sit in a ready queue; any idle worker takes from it. Nothing in dispatch
// ever blocks on a busy worker (the databus seed's consumeproc blocks on a
// full per-worker chan): queues are unbounded per lane and memory is bounded
// instead by each partition's share of the in-flight budget (MaxInFlight,
// MaxInFlightBytes), which pauses that partition's fetching.
//
// Batching (Size, Ticker): at most one partially filled batch exists at a
// time (the filler); new ready lanes feed it first, so batches fill up
// instead of spreading thin over idle workers. A worker whose batch is full
// leaves the filler role and wakes another worker if more is ready.
//
// Outcomes: a batch that ran settles item by item (Settle): finished items
// go back to their partitions; a failed item goes back to the front of its
// lane with the lane's later items of the batch behind it, and the lane is
// held (Options.Hold decides for how long, and calls Unhold), so a failure
// holds back only its own lane.
//
// Ownership: lanes, the ready queue, held lanes, batch membership and the
// idle list are guarded by the Scheduler's mutex. A Partition's tracker,
// free list and counts are owned by the partition's goroutine; workers hand
// finished items back through a lock-free stack and a non-blocking wake of
// that goroutine.
package dispatch

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Status is what Next decided for a worker's batch.
type Status int

const (
	// Empty: nothing ready; the worker is registered idle and should wait
	// for its wake channel.
	Empty Status = iota
	// Partial: the batch holds fewer than Size items and the worker is the
	// filler; wait for the wake channel or the Ticker deadline, then call
	// Next again (with flush once the deadline passed).
	Partial
	// Run: call Do with the batch, then Release or Settle it.
	Run
	// Stopped: the scheduler stopped; the worker should return.
	Stopped
)

// Options configure a Scheduler.
type Options[M, T any] struct {
	Size int // most items per batch
	// MaxInFlight and MaxInFlightBytes bound the messages fetched and not
	// yet finished, and their bytes; each claimed partition gets an equal
	// share (see shares). 0: unbounded.
	MaxInFlight      int
	MaxInFlightBytes int64
	// WakeDelay coalesces the wakes of a partition's claim loop for
	// finished items: they are delivered at most this late, in batches, by
	// RunWaker. With Size=1 and many workers, waking the claim loop for
	// each completion cost a goroutine switch per message. 0: wake at
	// once (RunWaker is then not needed).
	WakeDelay time.Duration
	// Reset, if set, clears what a recycled item's message and value refer
	// to (so that the free list does not pin fetch buffers), cheaper than
	// zeroing both whole; the caller overwrites every field when it reuses
	// the item. Default: zero them.
	Reset func(m *M, v *T)
	// ShowAttempt, if set, is called by BeginCall for each item of the
	// call that failed before (Attempt above 1), to show the attempt in
	// its message; and, under the scheduler's lock, for each item a
	// revoked partition hands over to the next owner at an attempt above
	// 1 (its final commit lists it), but for a held one, whose Hold hook
	// decides. BeginCall runs on the worker's goroutine before it numbers
	// the call, so whoever reads a running call's messages (Running, and
	// the owner copying an orphaned item) sees the write.
	ShowAttempt func(m *M, attempt int)
	// Window is how far (in stamps, see ready.go) a batch may look past a
	// lane's head for more of the same lane's items; default Size.
	// Oldest-first holds to within a window.
	Window int
	// Copied, if set, is called on the copy of an item Orphan gave up on,
	// after its message and value were copied: a value that points into
	// its item's own message (the message itself as the value) must be
	// made to point into the copy's.
	Copied func(m *M, v *T)
	// CopyError, if set, is the LastError of each such copy: why its
	// original's call failed (it hung), which a dead letter of the copy
	// gives if the copy is past its attempts.
	CopyError error
	// Backlog paces intake: while the workers have this many items or
	// more ready to take, Partition.Paced says the owner should turn no
	// more messages into items (see pace.go). 0: no pacing.
	Backlog int
	// Hold is told of every item Settle holds at its lane's front (Verdict
	// Hold), on the settling worker's goroutine, without the scheduler's
	// lock; the lane waits until Unhold is called for the item (at once,
	// or later, from any goroutine). Until then a revoke leaves the item
	// outstanding (Item.kept), also when it failed in its partition's
	// drain, so Hold settles it: Unhold at once, Waits before it waits
	// for a timer (which lets a revoke drop it), or Finishing before a
	// write that ends with Unhold(it, true). nil: the lane goes on at
	// once.
	Hold func(it *Item[M, T], o Outcome)
}

// Scheduler is shared by all partitions and workers of a group.
type Scheduler[M, T any] struct {
	size        int
	window      uint64
	wakeDelay   time.Duration
	reset       func(m *M, v *T)
	showAttempt func(m *M, attempt int)
	copied      func(m *M, v *T)
	copyErr     error
	onHold      func(it *Item[M, T], o Outcome)
	shares      shares
	backlog     int
	ready       atomic.Int64 // readyItems, published for Paced and ListIfPaced

	wakeMu   sync.Mutex
	wakeList []*Partition[M, T] // completions waiting for RunWaker
	wakeKick chan struct{}

	partsMu sync.Mutex
	parts   map[*Partition[M, T]]struct{} // live partitions

	mu sync.Mutex
	// vtime is the scheduler's virtual time (see ready.go): the largest
	// stamp of a lane head taken from the ready queue so far, or of one
	// a worker carried on with, short of the oldest waiting head
	// (shortOfWaitingLocked).
	vtime      uint64
	freshLast  uint64             // the head stamp of the lane last pushed onto fresh
	fresh      laneList[M, T]     // ready lanes whose head just arrived, in stamp order (see ready.go)
	requeued   bucketQueue[M, T]  // ready lanes with older heads
	readyItems int                // sum of n over ready lanes
	paced      []*Partition[M, T] // partitions listed by ListIfPaced, woken as readyItems drops below backlog
	filler     *Batch[M, T]       // the one partially filled batch, if any
	idle       []*Worker[M, T]
	workers    []*Worker[M, T]
	held       int // lanes held, over all partitions
	running    int // batches handed out to run and not yet released or settled
	limit      int // most batches running at once; -1: no limit (SetLimit)
	stopped    bool
	revokeSeq  uint64
}

// Worker identifies one worker goroutine to the scheduler.
type Worker[M, T any] struct {
	wake chan struct{}
	idle bool // in Scheduler.idle; guarded by the scheduler mutex
	// running is the batch the worker has in Do; cancel cancels the
	// context it runs with. Both guarded by the scheduler mutex.
	running *Batch[M, T]
	cancel  context.CancelCauseFunc

	calls uint64 // calls begun (BeginCall); the worker goroutine's
	// call is the number of the call in progress, 0 between calls: written
	// by the worker (BeginCall, EndCall), read by anyone (Call) and, under
	// the scheduler mutex, by the acts that apply to one call only
	// (CancelCall, Orphan, Running).
	call atomic.Uint64
	// acting counts those acts under way; EndCall waits for them, so that
	// what the worker does after a call sees what they did to it.
	acting atomic.Int32
}

// Wake is signalled when the worker may have work.
func (w *Worker[M, T]) Wake() <-chan struct{} { return w.wake }

// Batch is a set of items handed to one Do call, with the lanes it holds.
type Batch[M, T any] struct {
	Items []*Item[M, T]

	w        *Worker[M, T]
	lanes    []*lane[M, T]
	filling  bool        // the scheduler's filler
	seen     uint64      // revoke dedup mark
	orphaned atomic.Bool // Orphan: its items run elsewhere; what it reports is ignored
	early    []bool      // items handed back by Finish while it runs; guarded by the scheduler mutex
	waits    bool        // took from a lane that waits (lane.waits): WaitingItems looks at its items
	taken    int         // Taken

	// scratch for Settle and SortByLane (failures only)
	done, gone, back, spent, scratch []*Item[M, T]
	held                             []heldItem[M, T]
	starts                           []int
	order                            map[*lane[M, T]]int
}

// New returns a scheduler.
func New[M, T any](o Options[M, T]) *Scheduler[M, T] {
	if o.Size <= 0 {
		o.Size = 1
	}
	if o.Window <= 0 {
		o.Window = o.Size
	}
	s := &Scheduler[M, T]{
		size: o.Size, window: uint64(o.Window), wakeDelay: o.WakeDelay, reset: o.Reset, showAttempt: o.ShowAttempt, copied: o.Copied, copyErr: o.CopyError, onHold: o.Hold,
		backlog:  o.Backlog,
		wakeKick: make(chan struct{}, 1),
		parts:    make(map[*Partition[M, T]]struct{}),
		limit:    -1,
	}
	s.shares.maxCount, s.shares.maxBytes = int64(o.MaxInFlight), o.MaxInFlightBytes
	if s.shares.maxCount <= 0 {
		s.shares.maxCount = 1 << 62
	}
	if s.shares.maxBytes <= 0 {
		s.shares.maxBytes = 1 << 62
	}
	return s
}

// InFlight is the number of items fetched and not yet finished, over all
// partitions (as of their last Advance).
func (s *Scheduler[M, T]) InFlight() int64 {
	s.partsMu.Lock()
	defer s.partsMu.Unlock()
	var n int64
	for p := range s.parts {
		n += p.InFlight()
	}
	return n
}

// Share is each claimed partition's share of MaxInFlight now.
func (s *Scheduler[M, T]) Share() int64 { return s.shares.count() }

// NewWorker registers a worker.
func (s *Scheduler[M, T]) NewWorker() *Worker[M, T] {
	w := &Worker[M, T]{wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.workers = append(s.workers, w)
	s.mu.Unlock()
	return w
}

// SetCancel records the cancel function of the context w runs its batches
// with, for CancelRunning.
func (s *Scheduler[M, T]) SetCancel(w *Worker[M, T], cancel context.CancelCauseFunc) {
	s.mu.Lock()
	w.cancel = cancel
	s.mu.Unlock()
}

// Runs reports whether w's running batch holds items of p.
func (s *Scheduler[M, T]) Runs(w *Worker[M, T], p *Partition[M, T]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := w.running; b != nil {
		for _, l := range b.lanes {
			if l.part == p {
				return true
			}
		}
		for _, it := range b.Items { // an orphaned batch has let its lanes go
			if it.part == p {
				return true
			}
		}
	}
	return false
}

// BeginCall numbers the call to Do that w is about to make on items of its
// running batch (the whole batch, or part of one in a split retry) and
// returns the number, which identifies the call to CancelCall, Orphan and
// Running. Before that it shows each retried item's attempt in its message
// (Options.ShowAttempt). Only w's goroutine calls it.
func (s *Scheduler[M, T]) BeginCall(w *Worker[M, T], items []*Item[M, T]) uint64 {
	if s.showAttempt != nil {
		for _, it := range items {
			if it.Attempt > 1 { // a first delivery leaves the message's cache lines alone
				s.showAttempt(&it.Msg, it.Attempt)
			}
		}
	}
	w.calls++
	w.call.Store(w.calls)
	return w.calls
}

// EndCall marks w's call over; only w's goroutine calls it. Once it
// returns, nothing acts on that call any more: an act that found w in the
// call has finished (EndCall waits for it), and a later one finds the call
// over and does nothing. So a cancel meant for a late call never reaches
// the worker's next call, and after EndCall the worker reads whether the
// call's batch was orphaned without a race.
func (s *Scheduler[M, T]) EndCall(w *Worker[M, T]) {
	w.call.Store(0)
	if w.acting.Load() > 0 {
		s.mu.Lock() // an act under way holds it: wait for the act to end
		s.mu.Unlock()
	}
}

// Call is the number of w's call in progress, 0 between calls.
func (w *Worker[M, T]) Call() uint64 { return w.call.Load() }

// lockCall takes the scheduler mutex for an act on w's call and reports
// whether w is still in it. An act counts itself in w.acting before it
// looks at w.call: a worker that ends the call after the act looked waits
// in EndCall until unlockCall, and one that ended it before is seen to
// have.
func (s *Scheduler[M, T]) lockCall(w *Worker[M, T], call uint64) bool {
	w.acting.Add(1)
	s.mu.Lock()
	return call != 0 && w.call.Load() == call
}

func (s *Scheduler[M, T]) unlockCall(w *Worker[M, T]) {
	s.mu.Unlock()
	w.acting.Add(-1)
}

// Running returns a copy of the first message of w's running batch, its
// lane and how many items the batch has, read under the lock, while w is in
// call (n is 0 once the call is over): for a stuck worker's log line.
func (s *Scheduler[M, T]) Running(w *Worker[M, T], call uint64) (first M, lane uint64, n int) {
	inCall := s.lockCall(w, call)
	defer s.unlockCall(w)
	if b := w.running; inCall && b != nil && len(b.Items) > 0 {
		first, lane, n = b.Items[0].Msg, b.Items[0].Lane, len(b.Items)
	}
	return first, lane, n
}

// Orphan gives up on w's running batch, whose call hangs: copies of its
// items run in their place (their partitions' owners make them at their
// next Advance, and the copies take the items' places in the trackers, one
// attempt on), its lanes are let go at once, and whatever the hung call
// reports when it returns is ignored: its items never count as done, and
// are charged nothing. For lanes that hold one message each (Unordered):
// otherwise a copy could run while its lane mates wait behind the hung
// call. It acts only while w is still in call (the call judged hung), and
// returns how many items it gave up on. They leave Outstanding at once: a
// drain waits for their copies, not for the hung call.
func (s *Scheduler[M, T]) Orphan(w *Worker[M, T], call uint64) int {
	inCall := s.lockCall(w, call)
	defer s.unlockCall(w)
	b := w.running
	if !inCall || b == nil || b.orphaned.Load() {
		return 0
	}
	b.orphaned.Store(true)
	for i, l := range b.lanes {
		b.lanes[i] = nil
		l.holder = nil
	}
	b.lanes = b.lanes[:0]
	n := 0
	for i, it := range b.Items {
		p := it.part
		if p.revoked || (i < len(b.early) && b.early[i]) {
			continue // its partition let go of its lanes (Settle judges it), or handed back already
		}
		it.orphan.Store(true)
		if it.waitAttempt != 0 { // its copy is listed in its place (push notes it)
			it.waitAttempt = 0
			p.waiting.Add(-1)
		}
		// Its copy stands for it from now on: a drain waits for the copy,
		// not for the hung call (Advance takes the item back uncounted).
		p.unsettled.Add(-1)
		p.orphans = append(p.orphans, it)
		p.hasOrphans.Store(true)
		signal(p.wake)
		n++
	}
	return n
}

// Orphaned reports whether Orphan gave up on b.
func (b *Batch[M, T]) Orphaned() bool { return b.orphaned.Load() }

// SetLimit makes at most limit batches run at once: 0 runs none (a pause),
// 1 one at a time (a probe), -1 any number (the default). Batches already
// running go on.
func (s *Scheduler[M, T]) SetLimit(limit int) {
	s.mu.Lock()
	s.limit = limit
	if limit != 0 { // wake the idle: what is ready may run again
		for _, w := range s.idle {
			w.idle = false
			signal(w.wake)
		}
		s.idle = s.idle[:0]
	}
	s.mu.Unlock()
}

// CancelCall cancels the context w runs its batches with, with cause (the
// call ran past its deadline), if w is still in call: a call that returned
// meanwhile is left alone, and so is the context the worker's next call
// runs with. It reports whether it cancelled.
func (s *Scheduler[M, T]) CancelCall(w *Worker[M, T], call uint64, cause error) bool {
	inCall := s.lockCall(w, call)
	defer s.unlockCall(w)
	if !inCall || w.cancel == nil {
		return false
	}
	w.cancel(cause)
	return true
}

// NewBatch returns an empty batch filled by w.
func (s *Scheduler[M, T]) NewBatch(w *Worker[M, T]) *Batch[M, T] {
	return &Batch[M, T]{w: w, Items: make([]*Item[M, T], 0, s.size)}
}

// push queues pending items of p on their lanes. Caller holds no lock.
func (s *Scheduler[M, T]) push(p *Partition[M, T], items []*Item[M, T]) {
	s.mu.Lock()
	if p.revoked {
		// Copies of orphans made in the drain (replaceOrphans): dropped
		// with the partition unrun, abandoned (Unsettled) as a
		// message waiting for its retry is at a revoke: each stands for
		// its original, which Orphan took off Outstanding. Each is
		// noted for the final commit at its attempt, as revoke notes
		// the retries it drops (DrainedWaiting): the next owner goes
		// on at that attempt, so the hung call stays charged.
		for _, it := range items {
			it.lane.pending--
			if it.Attempt > 1 {
				noteDrainedLocked(it, it.Attempt)
				s.showHandedOverLocked(it, it.Attempt)
			}
		}
		s.mu.Unlock()
		p.abandoned(int64(len(items)))
		return
	}
	var held []heldItem[M, T]
	for _, it := range items {
		// Start-time fair queuing (ready.go): one past the partition's
		// last item, or past the virtual time if the partition had fallen
		// behind it.
		p.tag = max(p.tag, s.vtime) + 1
		it.stamp = p.tag
		l := it.lane
		l.pending--
		if it.arrival != nil || it.Attempt > 1 {
			noteWaitLocked(it) // a message a previous owner left waiting, or an orphan's copy
		}
		if o := it.arrival; o != nil && o.Verdict == Hold { // AddHeld's, not a LastError
			it.arrival = nil
			if l.n == 0 && l.holder == nil && !l.blocked {
				// First in its lane: it waits before it runs
				// (Partition.AddHeld).
				l.push(it)
				l.blocked = true
				p.held++
				s.held++
				held = append(held, heldItem[M, T]{it, *o})
				continue
			}
		}
		l.push(it)
		switch {
		case l.inReady:
			s.readyItems++
		case l.blocked:
			// held for its head (Unhold makes it ready)
		case l.holder == nil || l.holder.filling:
			l.inReady = true
			s.readyItems += l.n
			if l.n == 1 && (s.fresh.head == nil || it.stamp >= s.freshLast) {
				s.fresh.push(l)
				s.freshLast = it.stamp
			} else {
				s.requeued.push(l, l.head.stamp)
			}
		}
	}
	s.wakeLocked()
	s.ready.Store(int64(s.readyItems))
	s.mu.Unlock()
	for _, h := range held {
		s.hold(h.it, h.o)
	}
}

// wakeFanout is how many idle workers one wake may rouse.
const wakeFanout = 2

// wakeLocked wakes the filler, and up to wakeFanout idle workers while more
// is ready than the filler has room for. Wakes cascade: a woken worker that
// takes a full batch and leaves more behind wakes the next ones (Next's
// Run case). Fanning out by two brings Num workers up in log2(Num) steps
// (waking one at a time took 256 goroutine switches in a row before the
// last worker of a large pool started), while a burst that one worker can
// handle does not rouse the whole pool.
func (s *Scheduler[M, T]) wakeLocked() {
	extra := s.readyItems
	if f := s.filler; f != nil {
		signal(f.w.wake)
		extra -= s.size - len(f.Items)
	}
	for i := 0; i < wakeFanout && extra > 0 && len(s.idle) > 0; i++ {
		w := s.idle[len(s.idle)-1]
		s.idle[len(s.idle)-1] = nil
		s.idle = s.idle[:len(s.idle)-1]
		w.idle = false
		signal(w.wake)
		extra -= s.size
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// requeue makes a lane with older items queued ready again.
func (s *Scheduler[M, T]) requeue(l *lane[M, T]) {
	l.inReady = true
	s.requeued.push(l, l.head.stamp)
	s.readyItems += l.n
}

// nextReady removes and returns the ready lane with the oldest head.
func (s *Scheduler[M, T]) nextReady() *lane[M, T] {
	f, r := s.fresh.head, s.requeued.front()
	switch {
	case f == nil && r == nil:
		return nil
	case r == nil || (f != nil && stampOf(f) <= stampOf(r)):
		s.fresh.pop()
		return f
	default:
		s.requeued.pop()
		return r
	}
}

// stampOf is a lane's head stamp; a lane emptied by a revoke sorts first
// so that it is dropped at once.
func stampOf[M, T any](l *lane[M, T]) uint64 {
	if l.head == nil {
		return 0
	}
	return l.head.stamp
}

// take moves ready items into b, oldest first, up to Size, holding their
// lanes. Items go one at a time: after each, a lane with more items
// competes again with its next item's age, so a lane's newer items do not
// jump ahead of older items of other lanes.
func (s *Scheduler[M, T]) take(b *Batch[M, T]) {
	for len(b.Items) < s.size {
		l := s.nextReady()
		if l == nil {
			return
		}
		l.inReady = false
		s.readyItems -= l.n
		if l.part.revoked || l.blocked || (l.holder != nil && l.holder != b) {
			continue // dead, held, or running elsewhere: requeued when free
		}
		// A worker carrying on with a lane it just finished
		// (continueLocked) moves the virtual time only to just short of
		// the oldest waiting head: it may take a head newer than those.
		s.vtime = max(s.vtime, l.head.stamp)
		s.takeFrom(b, l)
	}
}

// takeFrom moves l's items into b: those that arrived within window of its
// head (typically the rest of the same intake burst) in one go, so that
// oldest-first holds to within one window and a lane costs one queue
// operation per window rather than per item. A lane with more left is
// requeued, still held by b.
func (s *Scheduler[M, T]) takeFrom(b *Batch[M, T], l *lane[M, T]) {
	if l.holder == nil {
		l.holder = b
		b.lanes = append(b.lanes, l)
	}
	limit := l.head.stamp + s.window
	for len(b.Items) < s.size && l.n > 0 && l.head.stamp < limit {
		b.Items = append(b.Items, l.pop())
	}
	if l.waits {
		b.waits = true
		l.waits = l.n > 0
	}
	if l.n > 0 {
		s.requeue(l)
	}
}

// Next fills b from the ready lanes and decides what the worker does with
// it; see Status. flush makes a partial batch run now (its Ticker expired).
// done, if not nil, is a batch whose Do call succeeded: it is released as by
// Release, in the same critical section, and is empty afterwards.
// Next never blocks.
func (s *Scheduler[M, T]) Next(b *Batch[M, T], flush bool, done *Batch[M, T]) Status {
	s.mu.Lock()
	if done != nil {
		s.continueLocked(done, b)
	}
	st := s.nextLocked(b, flush)
	if done != nil && st != Run {
		s.wakeLocked() // done's lanes may be ready for the filler or others
	}
	s.mu.Unlock()
	if done != nil {
		s.finishBatch(done)
	}
	return st
}

func (s *Scheduler[M, T]) nextLocked(b *Batch[M, T], flush bool) Status {
	if s.stopped {
		s.leaveFiller(b)
		return Stopped
	}
	if s.limit >= 0 && s.running >= s.limit && len(b.Items) == 0 {
		s.leaveFiller(b) // limited (SetLimit): wait as if nothing were ready
		if !b.w.idle {
			b.w.idle = true
			s.idle = append(s.idle, b.w)
		}
		return Empty
	}
	if s.filler == nil || s.filler == b {
		s.take(b)
		s.pacedLocked()
	}
	switch n := len(b.Items); {
	case n == 0:
		s.leaveFiller(b)
		if !b.w.idle {
			b.w.idle = true
			s.idle = append(s.idle, b.w)
		}
		return Empty
	case n >= s.size || flush || s.shares.paused.Load() > 0:
		// Full, or its Ticker passed, or a partition is out of its
		// in-flight share: then nothing more comes from it until its
		// work finishes, and waiting would only stall it.
		s.leaveFiller(b)
		s.wakeLocked()
		b.w.running = b
		s.running++
		return Run
	default:
		s.filler = b
		b.filling = true
		return Partial
	}
}

func (s *Scheduler[M, T]) leaveFiller(b *Batch[M, T]) {
	if s.filler == b {
		s.filler = nil
	}
	b.filling = false
}

// Release ends a batch whose Do call succeeded: its lanes are let go (and
// requeued when they have more), its items finish, and their partitions are
// woken to take them back (b.Taken says how many did). b is empty and
// reusable afterwards.
func (s *Scheduler[M, T]) Release(b *Batch[M, T]) {
	s.mu.Lock()
	s.unholdLocked(b)
	s.wakeLocked()
	s.mu.Unlock()
	s.finishBatch(b)
}

func (s *Scheduler[M, T]) finishBatch(b *Batch[M, T]) {
	taken := finish(b.Items)
	clear(b.Items)
	b.Items = b.Items[:0]
	b.reset()
	b.taken = taken
}

// Taken is how many items of b, when Release or Next (as its done) last
// ended it, their partitions took back: not those of a partition sealed
// by then (Partition.Seal: its claim let go of it without them).
func (b *Batch[M, T]) Taken() int { return b.taken }

// reset readies an emptied batch for reuse.
func (b *Batch[M, T]) reset() {
	clear(b.early)
	b.waits = false
	b.orphaned.Store(false)
}

// Finish ends b.Items[from:to] while b still runs (the part of a split
// retry that succeeded): they go back to their partitions now, while the
// batch keeps holding their lanes until it settles (give them Finished
// there). It returns how many of them their partitions took back (not
// those of a sealed partition, Partition.Seal). It reports false, and
// finishes nothing, when Orphan gave up on b meanwhile.
func (s *Scheduler[M, T]) Finish(b *Batch[M, T], from, to int) (taken int, ok bool) {
	s.mu.Lock()
	if b.orphaned.Load() {
		s.mu.Unlock()
		return 0, false
	}
	if len(b.early) < len(b.Items) {
		b.early = make([]bool, cap(b.Items))
	}
	for i := from; i < to; i++ {
		b.early[i] = true
	}
	s.mu.Unlock()
	return finish(b.Items[from:to]), true
}

// finishChains is how many partitions' chains finish gathers at once.
const finishChains = 8

// finish hands items back to their partitions, one chain per partition of
// up to finishChains at a time: a batch interleaves the items of the
// partitions whose work is ready together (fair queuing, ready.go), and
// each chain is one push onto its partition's stack, whose line the owner
// shares. After that nothing may read them: their partition may recycle
// them. It returns how many their partitions took back: a sealed
// partition takes none (Partition.Seal).
func finish[M, T any](items []*Item[M, T]) (taken int) {
	var chains [finishChains]struct {
		p          *Partition[M, T]
		head, tail *Item[M, T]
		n          int64
	}
	k := 0
	completeAll := func() {
		for _, c := range chains[:k] {
			if c.p.complete(c.head, c.tail) {
				taken += int(c.n)
			}
		}
	}
	for _, it := range items {
		i := 0
		for i < k && chains[i].p != it.part {
			i++
		}
		if i == k { // a partition not chained yet
			if k == finishChains {
				completeAll()
				i, k = 0, 0
			}
			chains[i].p, chains[i].head, chains[i].n = it.part, it, 0
			k++
		} else {
			chains[i].tail.next = it
		}
		chains[i].tail = it
		chains[i].n++
	}
	completeAll()
	return taken
}

// unholdLocked lets go of b's lanes, requeueing those with items queued.
func (s *Scheduler[M, T]) unholdLocked(b *Batch[M, T]) { s.continueLocked(b, nil) }

// continueLocked releases done's lanes, handing those with more items
// queued straight to b (when not nil) if b may take: the worker carries on with the
// lanes it just finished. Under skew this keeps the hot lane, the one that
// bounds throughput, running back to back instead of waiting for its turn
// in the ready queue; it does not break oldest-first in practice, since a
// lane with a backlog holds old items.
func (s *Scheduler[M, T]) continueLocked(done, b *Batch[M, T]) {
	if done.w.running == done {
		done.w.running = nil
		s.running--
	}
	canTake := b != nil && (s.filler == nil || s.filler == b)
	short := uint64(0) // the virtual time's bound while carrying on, once needed (shortOfWaitingLocked)
	for i, l := range done.lanes {
		done.lanes[i] = nil
		l.holder = nil
		switch {
		case l.part.revoked || l.n == 0 || l.inReady || l.blocked:
		case canTake && len(b.Items) < s.size:
			if short == 0 {
				// The same for every lane carried on: they carry on
				// before any is requeued, so the ready queue's fronts
				// do not change meanwhile.
				short = s.shortOfWaitingLocked()
			}
			s.vtime = max(s.vtime, min(l.head.stamp, short))
			s.takeFrom(b, l)
		default:
			s.requeue(l)
		}
	}
	done.lanes = done.lanes[:0]
}

// shortOfWaitingLocked is one less than the oldest head stamp waiting in
// the ready queue (the largest uint64 when none waits): a worker carrying
// on with a lane moves the virtual time to the lane's head stamp, but no
// further than this. Served items move the virtual time, or a partition
// whose lane runs as an unbroken chain (an item arriving during each
// call) would stamp one past the last each time while the virtual time
// stood still, and once the chain broke its next item would wait behind
// every item another partition pushed meanwhile, stamped from the
// virtual time (TestCarryOnChainDoesNotRunAhead). Short of the oldest
// waiting head: items arriving now are not stamped behind the work that
// waits (TestCarryingOnStopsShortOfWaitingHeads).
func (s *Scheduler[M, T]) shortOfWaitingLocked() uint64 {
	t := uint64(math.MaxUint64)
	if f := s.fresh.head; f != nil && f.head != nil {
		t = min(t, f.head.stamp-1)
	}
	if r := s.requeued.front(); r != nil && r.head != nil {
		t = min(t, r.head.stamp-1)
	}
	return t
}

// abandon counts items that will never finish out of their partitions'
// outstanding work (waking draining ones). Nothing is committed past them.
func abandon[M, T any](items []*Item[M, T]) {
	var last *Partition[M, T]
	n := int64(0)
	for _, it := range items {
		if it.part != last {
			if last != nil {
				last.abandoned(n)
			}
			last, n = it.part, 0
		}
		n++
	}
	if last != nil {
		last.abandoned(n)
	}
}

// Discard lets go of a batch that will never run (the worker is
// stopping): its items stay unfinished, so nothing is committed past them.
func (s *Scheduler[M, T]) Discard(b *Batch[M, T]) {
	s.mu.Lock()
	s.leaveFiller(b)
	s.unholdLocked(b)
	s.mu.Unlock()
	abandon(b.Items)
	clear(b.Items)
	b.Items = b.Items[:0]
	b.reset()
}

// deferWake queues p for RunWaker.
func (s *Scheduler[M, T]) deferWake(p *Partition[M, T]) {
	s.wakeMu.Lock()
	s.wakeList = append(s.wakeList, p)
	first := len(s.wakeList) == 1
	s.wakeMu.Unlock()
	if first {
		signal(s.wakeKick)
	}
}

// RunWaker delivers coalesced completion wakes (Options.WakeDelay) until
// stop is closed, then delivers what is pending and returns. Run it in one
// goroutine when WakeDelay > 0.
func (s *Scheduler[M, T]) RunWaker(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []*Partition[M, T]
	deliver := func() {
		s.wakeMu.Lock()
		batch, s.wakeList = s.wakeList, batch[:0]
		s.wakeMu.Unlock()
		for i, p := range batch {
			p.wakePending.Store(false)
			signal(p.wake)
			batch[i] = nil
		}
	}
	defer deliver()
	for {
		select {
		case <-s.wakeKick:
		case <-stop:
			return
		}
		timer.Reset(s.wakeDelay)
		select {
		case <-timer.C:
		case <-stop:
			timer.Stop()
			return
		}
		deliver()
	}
}

// kickFiller wakes the filler so it re-evaluates (a partition just ran out
// of its share: its partial batch should run now).
func (s *Scheduler[M, T]) kickFiller() {
	s.mu.Lock()
	if s.filler != nil {
		signal(s.filler.w.wake)
	}
	s.mu.Unlock()
}

// Stop makes every Next return Stopped and wakes all waiting workers.
func (s *Scheduler[M, T]) Stop() {
	s.mu.Lock()
	s.stopped = true
	for _, w := range s.idle {
		w.idle = false
		signal(w.wake)
	}
	s.idle = nil
	if s.filler != nil {
		signal(s.filler.w.wake)
	}
	s.pacedLocked() // Paced says no once stopped: wake every listed partition
	s.mu.Unlock()
}

// hold tells Options.Hold of a held item, or lets its lane go on.
func (s *Scheduler[M, T]) hold(it *Item[M, T], o Outcome) {
	if s.onHold != nil {
		s.onHold(it, o)
		return
	}
	s.Unhold(it, false)
}

// showHandedOverLocked shows attempt in the message of it, which its
// revoked partition's final commit hands over to the next owner at that
// attempt (Options.ShowAttempt): the next owner shows it from the commit
// metadata, so a retry charged here and never handed out is counted here.
// Under the lock: the item is not in a call.
func (s *Scheduler[M, T]) showHandedOverLocked(it *Item[M, T], attempt int) {
	if s.showAttempt != nil && attempt > 1 {
		s.showAttempt(&it.Msg, attempt)
	}
}

// revoke drops p's queued items (waiting to run, or held) and the items a
// filling batch holds for it. Items already inside a Do call are left to
// finish, and so is a held item kept (Item.kept). It returns how many of
// the dropped items never failed and how many had (Attempt above 1).
func (s *Scheduler[M, T]) revoke(p *Partition[M, T]) (dropped, abandoned int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.revoked {
		return 0, 0
	}
	p.revoked = true
	p.gone.Store(true)
	s.forgetPacedLocked(p)
	s.revokeSeq++
	seq := s.revokeSeq
	var holders []*Batch[M, T]
	p.lanes.each(func(l *lane[M, T]) {
		if l.inReady {
			s.readyItems -= l.n
		}
		for l.n > 0 {
			d, a := s.dropQueuedLocked(l.pop())
			dropped, abandoned = dropped+d, abandoned+a
		}
		l.blocked = false
		if h := l.holder; h != nil && h.filling && h.seen != seq {
			h.seen = seq
			holders = append(holders, h)
		}
	})
	for _, h := range holders {
		kept := h.Items[:0]
		for _, it := range h.Items {
			if it.part != p {
				kept = append(kept, it)
				continue
			}
			d, a := s.dropQueuedLocked(it)
			dropped, abandoned = dropped+d, abandoned+a
		}
		clear(h.Items[len(kept):])
		h.Items = kept
	}
	s.held -= p.held
	p.held = 0
	p.lanes = laneTable[M, T]{}
	s.pacedLocked()
	return dropped, abandoned
}

// dropQueuedLocked lets go of it, an item of a revoked partition taken
// off its lane or out of a filling batch, and counts it: dropped (1, 0)
// if it never failed, abandoned (0, 1) if it waited for a retry, neither
// if it is kept (its hold is not settled, or its dead letter or park is
// being written: it stays outstanding, and Waits or Unhold lets it go,
// see Item.kept). One held or retried since the owner last listed it is
// noted for the final commit at its attempt, wherever it waited.
func (s *Scheduler[M, T]) dropQueuedLocked(it *Item[M, T]) (dropped, abandoned int) {
	if it.waitAttempt != 0 {
		noteDrainedLocked(it, int(it.waitAttempt))
		if !it.kept { // a kept item's hold hook decides what becomes of it
			s.showHandedOverLocked(it, int(it.waitAttempt))
		}
	}
	switch {
	case it.kept:
		return 0, 0
	case it.Attempt > 1:
		return 0, 1
	}
	return 1, 0
}
