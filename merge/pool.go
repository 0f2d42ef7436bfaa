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
// its lane, so its lane waits and no other does.
package merge

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// Config configures a Pool.
type Config struct {
	Num        int           // workers
	Ticker     time.Duration // a partial batch waits at most this long; < 0: never waits
	Backoff    time.Duration // before an item's first retry; doubled per attempt
	MaxBackoff time.Duration // backoff cap
	// Context, if set, wraps each context a worker makes for its calls
	// (one per worker, made again only after it was cancelled).
	Context func(ctx context.Context, worker int) context.Context
}

// Handle calls Do for items: a whole batch, or part of one in a split
// retry. worker is the calling worker's index (for per-worker scratch
// space). A nil error means every item is done. A non-nil error with
// failed == nil means the call failed as a whole; otherwise failed lists
// the indexes (into items) of the items that failed, and the others are
// done.
type Handle[M, T any] func(ctx context.Context, worker int, items []*dispatch.Item[M, T]) (failed []int, err error)

// Stats are the pool's counters. Successful calls are counted per worker,
// each on its own cache line (a shared atomic per Do call showed up with
// Size=1), and summed when read.
type Stats struct {
	Failures  atomic.Int64 // Do calls that failed (error or panic), split calls included
	Retries   atomic.Int64 // items charged a failed attempt: they will be handed out again
	Splits    atomic.Int64 // calls made on part of a batch that failed as a whole
	Cancelled atomic.Int64 // failed calls that returned after their context was cancelled
	workers   []workerCount
}

type workerCount struct {
	_       [56]byte
	batches atomic.Int64 // successful Do calls
	handled atomic.Int64 // messages finished by Do calls
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

// Handled is the number of messages finished by Do calls.
func (s *Stats) Handled() int64 {
	var n int64
	for i := range s.workers {
		n += s.workers[i].handled.Load()
	}
	return n
}

// Pool is a set of workers on one scheduler.
type Pool[M, T any] struct {
	s      *dispatch.Scheduler[M, T]
	cfg    Config
	handle Handle[M, T]
	stats  *Stats
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Start starts cfg.Num workers. Each worker's calls run with a context
// derived from ctx, which the scheduler cancels (CancelRunning) when its
// batch's partition is revoked past its drain; cancel ctx to make every
// call give up (Stop does not). st must come from NewStats(cfg.Num).
func Start[M, T any](ctx context.Context, s *dispatch.Scheduler[M, T], cfg Config, h Handle[M, T], st *Stats) *Pool[M, T] {
	p := &Pool[M, T]{s: s, cfg: cfg, handle: h, stats: st, stop: make(chan struct{})}
	for i := range cfg.Num {
		p.wg.Go(func() { p.work(ctx, i) })
	}
	p.wg.Go(func() { s.RunWaker(p.stop) })
	p.wg.Go(func() { s.RunRetries(p.stop) })
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
	id    int
	root  context.Context
	ctx   context.Context // this worker's calls; made again once cancelled
	w     *dispatch.Worker[M, T]
	b     *dispatch.Batch[M, T] // the batch being filled
	spare []*dispatch.Batch[M, T]
	out   []dispatch.Outcome
	timer *time.Timer
	count *workerCount
}

func (p *Pool[M, T]) work(root context.Context, id int) {
	wk := &worker[M, T]{
		id:    id,
		root:  root,
		w:     p.s.NewWorker(),
		timer: time.NewTimer(time.Hour),
		count: &p.stats.workers[id],
	}
	wk.timer.Stop()
	wk.b = p.s.NewBatch(wk.w)
	var done *dispatch.Batch[M, T] // succeeded, released by the next Next
	defer func() {
		wk.timer.Stop()
		if done != nil {
			p.s.Release(done)
		}
		p.s.Discard(wk.b)
	}()

	var fillStart time.Time // zero: not filling
	flush := p.cfg.Ticker < 0
	for {
		justRan := done != nil
		st := p.s.Next(wk.b, flush, done)
		if done != nil {
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
				// Yield once before parking: the claim loops are likely
				// mid-intake, and a worker that parks after every short
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

// context returns the worker's context for its next call: the same one
// until it has been cancelled, so a call allocates nothing.
func (p *Pool[M, T]) context(wk *worker[M, T]) context.Context {
	if wk.ctx == nil || wk.ctx.Err() != nil {
		wk.ctx = p.s.WithCancel(wk.root, wk.w)
		if p.cfg.Context != nil {
			wk.ctx = p.cfg.Context(wk.ctx, wk.id)
		}
	}
	return wk.ctx
}

// run calls the handler for b. It reports whether the call succeeded (the
// caller releases b); otherwise b has been settled item by item and is
// empty.
func (p *Pool[M, T]) run(wk *worker[M, T], b *dispatch.Batch[M, T]) bool {
	failed, err := p.handle(p.context(wk), wk.id, b.Items)
	if err == nil {
		wk.count.batches.Add(1)
		wk.count.handled.Add(int64(len(b.Items)))
		return true
	}
	if n := len(b.Items); cap(wk.out) < n {
		wk.out = make([]dispatch.Outcome, n)
	} else {
		wk.out = wk.out[:n]
		clear(wk.out)
	}
	if failed == nil && len(b.Items) > 1 && wk.ctx.Err() == nil {
		b.SortByLane() // before any outcome is recorded: splits keep lane order
	}
	p.failed(wk, b, 0, len(b.Items), failed, err)
	n := p.s.Settle(b, wk.out)
	wk.count.handled.Add(int64(n))
	return false
}

// failed records the outcomes of b.Items[lo:hi] after a call on them
// failed with err, naming failed (indexes into the range) or none.
func (p *Pool[M, T]) failed(wk *worker[M, T], b *dispatch.Batch[M, T], lo, hi int, failed []int, err error) {
	p.stats.Failures.Add(1)
	switch {
	case wk.ctx.Err() != nil:
		// Cancelled: the items of a revoked partition are abandoned by
		// Settle, the others run again, uncharged.
		p.stats.Cancelled.Add(1)
		p.returnRange(wk, lo, hi)
	case failed != nil:
		for _, i := range failed {
			if i >= 0 && i < hi-lo && wk.out[lo+i].Verdict == dispatch.Done {
				p.charge(wk, b, lo+i)
			}
		}
	case hi-lo == 1:
		p.charge(wk, b, lo)
	default:
		p.bisect(wk, b, lo, hi)
	}
}

// bisect calls the handler on the halves of b.Items[lo:hi], which failed
// as a whole, and records what becomes of each item.
func (p *Pool[M, T]) bisect(wk *worker[M, T], b *dispatch.Batch[M, T], lo, hi int) {
	mid, oneLane := splitPoint(b, lo, hi)
	firstOK := false
	for _, h := range [2][2]int{{lo, mid}, {mid, hi}} {
		from, to := h[0], h[1]
		if oneLane && from == mid && !firstOK {
			p.returnRange(wk, from, hi) // waits behind the earlier half's failure
			return
		}
		if wk.ctx.Err() != nil || anyRevoked(b.Items[from:to]) {
			p.returnRange(wk, from, hi)
			return
		}
		p.stats.Splits.Add(1)
		failed, err := p.handle(wk.ctx, wk.id, b.Items[from:to])
		if err != nil {
			p.failed(wk, b, from, to, failed, err)
			continue
		}
		firstOK = true
		p.s.Finish(b.Items[from:to])
		for i := from; i < to; i++ {
			wk.out[i].Verdict = dispatch.Finished
		}
		wk.count.batches.Add(1)
		wk.count.handled.Add(int64(to - from))
	}
}

// splitPoint is where to halve b.Items[lo:hi] (at least two items, sorted
// by lane): the lane boundary nearest the middle, or, when the range is one
// lane, the middle itself (oneLane: the later half depends on the earlier).
func splitPoint[M, T any](b *dispatch.Batch[M, T], lo, hi int) (mid int, oneLane bool) {
	mid = (lo + hi) / 2
	if b.SameLane(lo, hi-1) {
		return mid, true
	}
	for d := 0; ; d++ {
		if m := mid - d; m > lo && !b.SameLane(m-1, m) {
			return m, false
		}
		if m := mid + d; m < hi && !b.SameLane(m-1, m) {
			return m, false
		}
	}
}

func anyRevoked[M, T any](items []*dispatch.Item[M, T]) bool {
	for _, it := range items {
		if it.Revoked() {
			return true
		}
	}
	return false
}

func (p *Pool[M, T]) returnRange(wk *worker[M, T], lo, hi int) {
	for i := lo; i < hi; i++ {
		wk.out[i].Verdict = dispatch.Return
	}
}

// charge counts a failed attempt of b.Items[i]: it runs again after its
// backoff.
func (p *Pool[M, T]) charge(wk *worker[M, T], b *dispatch.Batch[M, T], i int) {
	it := b.Items[i]
	it.Attempt++
	wk.out[i] = dispatch.Outcome{Verdict: dispatch.Retry, Due: time.Now().Add(p.backoff(it.Attempt))}
	p.stats.Retries.Add(1)
}

// backoff is the wait before the given attempt (2 for the first retry):
// Backoff doubled per retry, capped at MaxBackoff.
func (p *Pool[M, T]) backoff(attempt int) time.Duration {
	d := p.cfg.Backoff << min(max(attempt-2, 0), 30)
	if d > p.cfg.MaxBackoff || d <= 0 {
		d = p.cfg.MaxBackoff
	}
	return d
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
