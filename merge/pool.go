// Package merge runs the workers: each takes a batch from the dispatch
// scheduler (up to Size items, or fewer once Ticker has passed), calls the
// handler and reports each item's outcome back to the scheduler.
//
// A call that succeeds finishes its whole batch. A call that names some of
// its items as failed finishes the others. A call that fails as a whole is
// retried at once, on the same worker and without backoff, on halves of the
// batch (split at lane boundaries, so each half keeps lane order; a single
// lane is split between its earlier and later items, and the later half
// runs only if the earlier one succeeded), halving again whatever fails,
// until the failing items stand alone: after about 2*log2(Size) calls only
// they are left, and their batch mates in other lanes have finished. An
// item is charged an attempt (and waits out a backoff) only when it fails
// alone or is named as failed; the scheduler puts it back at the front of
// its lane, so its lane waits and no other does. While NoSplit says so (a
// dependency is down) a call that fails as a whole is not halved; one
// whose error Rejected recognises is halved all the same, and an item
// rejected alone is dead-lettered rather than charged.
package merge

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/histogram"
)

// Config configures a Pool.
type Config struct {
	Num    int           // workers
	Ticker time.Duration // a partial batch waits at most this long; < 0: never waits
	// Timeout is how long a call may run: past it, its context is
	// cancelled with TimeoutCause (its Deadline says when), and the call
	// counts as failed when it returns, with TimeoutCause
	// (context.DeadlineExceeded if nil) wrapping what the handler
	// returned. 0: no limit.
	Timeout      time.Duration
	TimeoutCause error
	// Grace is how long past Timeout a call that ignores its context may
	// run before its worker counts as stuck (OnStuck, Stats.Stuck).
	Grace time.Duration
	// OnStuck, if set, is told once per call of a worker that became
	// stuck (its call started at since), on the watchdog's goroutine; the
	// worker is Pool.Worker(worker), and call names the call to the
	// scheduler's Orphan and Running, which act only while the worker is
	// still in it (it may have returned since the watchdog looked).
	OnStuck func(worker int, call uint64, since time.Time)
	// NoSplit, if set, is asked before a batch that failed as a whole is
	// split: true charges the first item of each of its lanes instead, the
	// later ones going back behind it uncharged (then the scheduler's Hold
	// decides, e.g. not to count the charge while a dependency is down,
	// rather than calling Do again on halves). It is asked too when Do
	// named failed items (Verdicts): true charges a failed item only when
	// no earlier item of its lane goes back (failed, deferred or
	// dead-lettered); the others go back behind it uncharged.
	NoSplit func() bool
	// Rejected, if set, reports whether the error of a call that failed
	// as a whole says that its items hold one that can never succeed,
	// without saying which: such a call is halved at once whatever
	// NoSplit says, until each rejected item stands alone, and an item
	// rejected alone is dead-lettered (as a DeadLettered verdict), with no
	// attempt charged. A call that ran past Timeout is a timeout, whatever
	// it returned.
	Rejected func(error) bool
	// Context, if set, wraps each context a worker makes for its calls
	// (one per worker, made again only after it was cancelled).
	Context func(ctx context.Context, worker int) context.Context
	// Exhausted, if set, reports whether an item whose next attempt is
	// attempt has used up its attempts (the caller's retry policy): such
	// an item of a batch (charged in calls that held it behind an earlier
	// item of its lane) is not handed to the handler again; it is held
	// with Kind Exhausted, and the items of its lane after it go back
	// behind it. nil: no limit.
	Exhausted func(attempt int) bool
}

// Kind is how an item failed, as Handle reports it; it is passed on to the
// scheduler's Hold as Outcome.Kind.
type Kind = uint8

const (
	// Failed: the item failed; it is charged an attempt.
	Failed Kind = iota + 1
	// Deferred: run the item again after Verdict.Delay, uncharged.
	Deferred
	// DeadLettered: the item is to be dead-lettered now.
	DeadLettered
	// Exhausted: the item had used up its attempts (Config.Exhausted)
	// and was not run again; Outcome.Err is its last call's error
	// (dispatch.Item.LastError), if kept.
	Exhausted
)

// Verdict names one item of a call that did not simply succeed.
type Verdict struct {
	Index int // into the items of the call
	Kind  Kind
	Delay time.Duration // Deferred
	Err   error
}

// Handle calls Do for items: a whole batch, or part of one in a split
// retry. worker is the calling worker's index (for per-worker scratch
// space). A nil error means every item is done. A non-nil error with no
// verdicts means the call failed as a whole; with verdicts, the items they
// name failed (or are deferred, or dead-lettered) and the others are done.
// Verdicts may come in any order; of two on one item, the first counts.
type Handle[M, T any] func(ctx context.Context, worker int, items []*dispatch.Item[M, T]) (verdicts []Verdict, err error)

// Stats are the pool's counters. Successful calls are counted per worker,
// each on its own cache line (a shared atomic per Do call showed up with
// Size=1), and summed when read.
type Stats struct {
	Failures atomic.Int64 // Do calls that failed (error or panic), split calls included; not a deferred call
	// DeferredCalls counts Do calls that returned verdicts, every one of
	// them Deferred, within Config.Timeout, and whose context was not
	// cancelled nor their batch given up on (Orphan): the handler asked for
	// those items later (a dependency not ready, a rate limit), which is no
	// failure of the call, and the call's other items are done. A
	// cancelled call's verdicts are not applied (its items go back): it
	// counts in Failures and Cancelled, whatever they say.
	DeferredCalls atomic.Int64
	Charged       atomic.Int64 // items charged a failed attempt (the hold hook decides: a retry, or a dead letter past MaxAttempts)
	Splits        atomic.Int64 // calls made on part of a batch that failed as a whole
	Cancelled     atomic.Int64 // failed calls that returned after their context was cancelled
	TimedOut      atomic.Int64 // calls that ran past Config.Timeout, hung or not: counted when the watchdog cancels one, or when one returns past Timeout first
	Stuck         atomic.Int64 // calls that ran past Timeout plus Grace (their worker was stuck)
	Deferred      atomic.Int64 // items deferred by their Do
	workers       []workerCount
}

type workerCount struct {
	_       [56]byte
	batches atomic.Int64 // successful Do calls
	handled atomic.Int64 // messages finished by Do calls and taken back by their partitions
	_       [48]byte
}

// NewStats returns counters for a pool of num workers.
func NewStats(num int) *Stats { return &Stats{workers: make([]workerCount, num)} }

// Batches is the number of successful Do calls.
func (s *Stats) Batches() int64 {
	var n int64
	for i := range s.workers {
		n += s.workers[i].batches.Load()
	}
	return n
}

// Handled is the number of messages finished by Do calls and taken back
// by their partitions: not those of a partition its owner had sealed by
// then (dispatch.Partition.Seal), which it counts, commits and releases
// without them.
func (s *Stats) Handled() int64 {
	var n int64
	for i := range s.workers {
		n += s.workers[i].handled.Load()
	}
	return n
}

// Pool is a set of workers on one scheduler.
type Pool[M, T any] struct {
	s       *dispatch.Scheduler[M, T]
	cfg     Config
	handle  Handle[M, T]
	stats   *Stats
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	workers []*worker[M, T] // each written by its goroutine; call state read by the watchdog
	clock   clock           // when calls start, for the watchdog and Workers
}

// Start starts cfg.Num workers. Each worker's calls run with a context
// derived from ctx, which the scheduler cancels (CancelRunning) when its
// batch's partition is revoked past its drain; cancel ctx to make every
// call give up (Stop does not). st must come from NewStats(cfg.Num).
func Start[M, T any](ctx context.Context, s *dispatch.Scheduler[M, T], cfg Config, h Handle[M, T], st *Stats) *Pool[M, T] {
	p := &Pool[M, T]{s: s, cfg: cfg, handle: h, stats: st, stop: make(chan struct{}), workers: make([]*worker[M, T], cfg.Num), clock: newClock()}
	for i := range p.workers { // made before any goroutine starts: the watchdog reads them
		wk := &worker[M, T]{id: i, root: ctx, w: s.NewWorker(), timer: time.NewTimer(time.Hour), count: &st.workers[i]}
		wk.timer.Stop()
		wk.b = s.NewBatch(wk.w)
		p.workers[i] = wk
	}
	for _, wk := range p.workers {
		p.wg.Go(func() { p.work(wk) })
	}
	p.wg.Go(func() { s.RunWaker(p.stop) })
	if cfg.Timeout > 0 {
		p.wg.Go(p.watch)
	}
	return p
}

// Stop stops the workers after their current Do calls and waits for them.
func (p *Pool[M, T]) Stop() {
	p.once.Do(func() {
		close(p.stop)
		p.s.Stop()
	})
	p.wg.Wait()
}

// worker is one worker goroutine's state.
type worker[M, T any] struct {
	id        int
	root      context.Context
	ctx       context.Context // this worker's calls; made again once cancelled
	w         *dispatch.Worker[M, T]
	b         *dispatch.Batch[M, T] // the batch being filled
	spare     []*dispatch.Batch[M, T]
	out       []dispatch.Outcome
	timer     *time.Timer
	count     *workerCount
	call      callState
	durations histogram.H // of its calls
	// ended is the clock's reading at the end of the worker's last call
	// while the worker goes straight on from it to its next (0 once it
	// waits, yields, or settles a failure): that call then starts at
	// this reading, saving a clock read (about 65 ns on a 2-vCPU VM; with
	// Size 1 a read per message). A call's duration and its Timeout
	// then include the worker's hand-off between the two calls, under a
	// microsecond unless the scheduler's lock is contended; the duration
	// histogram's first bound is half a millisecond.
	ended int64
}

func (p *Pool[M, T]) work(wk *worker[M, T]) {
	var done *dispatch.Batch[M, T] // succeeded, released by the next Next
	defer func() {
		wk.timer.Stop()
		if done != nil {
			p.s.Release(done)
			wk.count.handled.Add(int64(done.Taken()))
		}
		p.s.Discard(wk.b)
	}()

	var fillStart time.Time // zero: not filling
	flush := p.cfg.Ticker < 0
	for {
		justRan := done != nil
		st := p.s.Next(wk.b, flush, done)
		if st != dispatch.Run || !justRan {
			// Not straight on from a call that succeeded: the worker
			// waits or yields now, or settled a failure (the hold hook).
			wk.ended = 0
		}
		if done != nil {
			wk.count.handled.Add(int64(done.Taken()))
			wk.spare, done = append(wk.spare, done), nil
		}
		switch st {
		case dispatch.Stopped:
			return
		case dispatch.Run:
			fillStart = time.Time{}
			flush = p.cfg.Ticker < 0
			if p.run(wk, wk.b) {
				done = wk.b
				wk.b = p.batch(wk)
			}
		case dispatch.Partial:
			now := time.Now()
			if fillStart.IsZero() {
				fillStart = now
			}
			deadline := fillStart.Add(p.cfg.Ticker)
			if !now.Before(deadline) {
				flush = true
				continue
			}
			if p.wait(wk, deadline.Sub(now)) {
				return
			}
			flush = flush || !time.Now().Before(deadline)
		case dispatch.Empty:
			fillStart = time.Time{}
			if justRan {
				// Yield once before blocking: the claim loops are likely
				// mid-intake, and a worker that blocks after every short
				// Do call is woken again for the next message, a futex
				// round trip per message. A wake that arrives meanwhile
				// stays in the channel and costs one spare Next. With
				// Size=1 and a no-op Do at Num=64 this took the
				// in-memory pipeline from ~2.7 to ~1.1 µs/msg.
				runtime.Gosched()
				continue
			}
			if p.wait(wk, -1) {
				return
			}
		}
	}
}

// wait blocks until the worker is woken, d passes (d < 0: no deadline), or
// the pool stops; it reports whether the pool stopped.
func (p *Pool[M, T]) wait(wk *worker[M, T], d time.Duration) bool {
	var timeout <-chan time.Time
	if d >= 0 {
		wk.timer.Reset(d)
		timeout = wk.timer.C
	}
	select {
	case <-wk.w.Wake():
	case <-timeout:
	case <-p.stop:
		return true
	}
	if timeout != nil {
		wk.timer.Stop()
	}
	return false
}

// batch returns an empty batch for wk to fill, reusing spare ones.
func (p *Pool[M, T]) batch(wk *worker[M, T]) *dispatch.Batch[M, T] {
	if n := len(wk.spare); n > 0 {
		b := wk.spare[n-1]
		wk.spare[n-1] = nil
		wk.spare = wk.spare[:n-1]
		return b
	}
	return p.s.NewBatch(wk.w)
}

// Worker is worker i's handle in the scheduler.
func (p *Pool[M, T]) Worker(i int) *dispatch.Worker[M, T] { return p.workers[i].w }

// CallDurations adds the durations of every worker's calls to s.
func (p *Pool[M, T]) CallDurations(s *histogram.Snapshot) {
	for _, wk := range p.workers {
		wk.durations.AddTo(s)
	}
}

// WorkerState is what a worker is doing now.
type WorkerState struct {
	Busy  bool
	Since time.Time // the current call's start
	Stuck bool      // past Timeout plus Grace
}

// Workers appends every worker's state to dst.
func (p *Pool[M, T]) Workers(dst []WorkerState) []WorkerState {
	now := p.clock.now()
	for _, wk := range p.workers {
		var ws WorkerState
		if start := wk.call.start.Load(); start != 0 {
			ws.Busy, ws.Since = true, p.clock.time(start)
			ws.Stuck = p.cfg.Timeout > 0 && time.Duration(now-start) >= p.cfg.Timeout+p.cfg.Grace
		}
		dst = append(dst, ws)
	}
	return dst
}
