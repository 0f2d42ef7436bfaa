package merge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// callState is what the watchdog reads of a worker's call in progress,
// besides its number (dispatch.Worker.Call).
type callState struct {
	start atomic.Int64 // the pool's clock at the start of the call in progress, 0 between calls
	// timedOut is the number (dispatch.Worker.Call) of the worker's last
	// call counted in Stats.TimedOut: counted once, by the watchdog when
	// it cancels the call, or by the worker when the call returns past
	// Timeout first (countTimedOut).
	timedOut atomic.Uint64
}

// countTimedOut counts call in Stats.TimedOut unless it, or a later call
// of the worker, was counted: call numbers only grow, so a watchdog that
// comes late with an older call's number counts nothing.
func (p *Pool[M, T]) countTimedOut(cs *callState, call uint64) {
	for {
		last := cs.timedOut.Load()
		if last >= call {
			return
		}
		if cs.timedOut.CompareAndSwap(last, call) {
			p.stats.TimedOut.Add(1)
			return
		}
	}
}

// clock is a pool's monotonic clock: nanoseconds since the pool started,
// plus one, so that no reading is 0 (callState's "between calls"). A
// reading is one read of the runtime's monotonic clock, where time.Now
// reads the wall clock as well; a worker reads it once per Do call that
// follows straight on from its last, twice per other call (worker.ended).
type clock struct{ epoch time.Time }

func newClock() clock { return clock{epoch: time.Now()} }

func (c clock) now() int64 { return int64(time.Since(c.epoch)) + 1 }

// time is the time of reading t.
func (c clock) time(t int64) time.Time { return c.epoch.Add(time.Duration(t - 1)) }

// callCtx is a worker's context with the deadline of its call in
// progress: Deadline reports Config.Timeout from the call's start, and the
// watchdog cancels it when that passes. Made once per worker context, so a
// call allocates nothing.
type callCtx struct {
	context.Context
	call    *callState
	clock   clock
	timeout time.Duration
}

func (c *callCtx) Deadline() (time.Time, bool) {
	if start := c.call.start.Load(); start != 0 {
		return c.clock.time(start).Add(c.timeout), true
	}
	return c.Context.Deadline()
}

// context returns the worker's context for its next call: the same one
// until it has been cancelled, so a call allocates nothing.
func (p *Pool[M, T]) context(wk *worker[M, T]) context.Context {
	if wk.ctx == nil || wk.ctx.Err() != nil {
		ctx := p.s.WithCancel(wk.root, wk.w)
		if p.cfg.Context != nil {
			ctx = p.cfg.Context(ctx, wk.id)
		}
		if p.cfg.Timeout > 0 {
			ctx = &callCtx{Context: ctx, call: &wk.call, clock: p.clock, timeout: p.cfg.Timeout}
		}
		wk.ctx = ctx
	}
	return wk.ctx
}

// call runs the handler on items and reports whether it ran past
// Config.Timeout (then it failed, whatever it returned).
func (p *Pool[M, T]) call(wk *worker[M, T], items []*dispatch.Item[M, T]) (verdicts []Verdict, err error, timedOut bool) {
	ctx := p.context(wk)
	p.s.BeginCall(wk.w, items)
	start := wk.ended
	if start == 0 {
		start = p.clock.now()
	}
	wk.call.start.Store(start)
	verdicts, err = p.handle(ctx, wk.id, items)
	call := wk.w.Call()
	wk.call.start.Store(0)
	p.s.EndCall(wk.w) // from here on the watchdog leaves this call alone
	wk.ended = p.clock.now()
	took := time.Duration(wk.ended - start)
	wk.durations.Observe(took)
	if p.cfg.Timeout > 0 && took >= p.cfg.Timeout {
		p.countTimedOut(&wk.call, call)
		return nil, TimeoutError(p.cfg.TimeoutCause, err), true
	}
	return verdicts, err, false
}

// TimeoutError is the error of a call that ran past Config.Timeout: cause
// (context.DeadlineExceeded when none is configured), wrapping what the
// handler returned, if anything. A handler that returns its ctx's error
// (context.Canceled, as a cancel with a cause leaves it) still reports a
// timeout, so whoever decides from the error (the dead letter's reason, a
// tracing hook that sees the handler's own error) sees one whatever the
// handler made of it.
func TimeoutError(cause, err error) error {
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	switch {
	case err == nil:
		return cause
	case errors.Is(err, cause):
		return err
	}
	return fmt.Errorf("%w (%w)", cause, err)
}

// PastTimeout reports whether a handler call with ctx (the ctx the pool
// gave it, or one derived from it) has run past Config.Timeout: ctx was
// cancelled with cause (the pool's TimeoutCause), or its deadline, the
// call's start plus Timeout, has passed, whether or not the watchdog has
// cancelled it yet. Whoever reports on a call before it returns (a log
// line, a tracing hook) uses it to say what the pool will: TimeoutError.
func PastTimeout(ctx context.Context, cause error) bool {
	if cause != nil && errors.Is(context.Cause(ctx), cause) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// cancelled reports whether the worker's context was cancelled for a
// reason other than a timeout (its partition revoked, or shutdown): then
// its items run again, uncharged.
func (p *Pool[M, T]) cancelled(wk *worker[M, T]) bool {
	return wk.ctx.Err() != nil && (p.cfg.TimeoutCause == nil || !errors.Is(context.Cause(wk.ctx), p.cfg.TimeoutCause))
}

// run calls the handler for b. It reports whether the call succeeded (the
// caller releases b); otherwise b has been settled item by item and is
// empty.
func (p *Pool[M, T]) run(wk *worker[M, T], b *dispatch.Batch[M, T]) bool {
	if p.cfg.Exhausted != nil && p.anyExhausted(b.Items) {
		p.runAroundExhausted(wk, b)
		return false
	}
	verdicts, err, timedOut := p.call(wk, b.Items)
	if err == nil {
		wk.count.batches.Add(1) // its items count as handled once released (Batch.Taken)
		return true
	}
	p.resetOut(wk, len(b.Items))
	if verdicts == nil && len(b.Items) > 1 && (timedOut || !p.cancelled(wk)) && !b.Orphaned() {
		// Before any outcome is recorded: splits, and an outage's charge
		// of each lane's first item, need lane order (a cancelled call
		// that also timed out is charged too).
		p.s.SortByLane(b)
	}
	p.failed(wk, b, 0, len(b.Items), verdicts, err, timedOut)
	n := p.s.Settle(b, wk.out)
	wk.count.handled.Add(int64(n))
	return false
}

// resetOut sizes wk.out to n outcomes, all Done.
func (p *Pool[M, T]) resetOut(wk *worker[M, T], n int) {
	if cap(wk.out) < n {
		wk.out = make([]dispatch.Outcome, n)
	} else {
		wk.out = wk.out[:n]
		clear(wk.out)
	}
}

// anyExhausted reports whether an item has used up its attempts
// (Config.Exhausted).
func (p *Pool[M, T]) anyExhausted(items []*dispatch.Item[M, T]) bool {
	for _, it := range items {
		if p.cfg.Exhausted(it.Attempt) {
			return true
		}
	}
	return false
}

// runAroundExhausted calls the handler for the items of b that come before
// the first item of their lane that has used up its attempts, and settles
// b: that item is held (Exhausted) and its lane's later items go back
// behind it.
func (p *Pool[M, T]) runAroundExhausted(wk *worker[M, T], b *dispatch.Batch[M, T]) {
	p.s.SortByLane(b)
	// Within each lane the items are in lane order: from its first
	// exhausted item on, a lane's items stay out of the call.
	out := false
	n := p.s.MoveBack(b, func(i int) bool {
		if i == 0 || !b.SameLane(i-1, i) {
			out = false
		}
		out = out || p.cfg.Exhausted(b.Items[i].Attempt)
		return out
	})
	p.resetOut(wk, len(b.Items))
	for i := n; i < len(b.Items); i++ {
		if i > n && b.SameLane(i-1, i) {
			wk.out[i].Verdict = dispatch.Return // behind its lane's held item
		} else {
			wk.out[i] = dispatch.Outcome{Verdict: dispatch.Hold, Kind: Exhausted, Err: b.Items[i].LastError()}
		}
	}
	if n > 0 {
		verdicts, err, timedOut := p.call(wk, b.Items[:n])
		if err != nil {
			p.failed(wk, b, 0, n, verdicts, err, timedOut)
		} else {
			wk.count.batches.Add(1)
		}
	}
	wk.count.handled.Add(int64(p.s.Settle(b, wk.out)))
}

// failed records the outcomes of b.Items[lo:hi] after a call on them
// failed with err, with verdicts on some of them or none.
func (p *Pool[M, T]) failed(wk *worker[M, T], b *dispatch.Batch[M, T], lo, hi int, verdicts []Verdict, err error, timedOut bool) {
	// Given up on while the call ran (Orphan, final once the call
	// ended), or cancelled (a cancelled call that also timed out is
	// charged): the verdicts are not applied, so the call is a failure
	// whatever they say. A call past Timeout has none.
	orphaned := b.Orphaned()
	cancelled := !timedOut && p.cancelled(wk)
	if !orphaned && !cancelled && OnlyDeferred(verdicts) {
		p.stats.DeferredCalls.Add(1)
	} else {
		p.stats.Failures.Add(1)
	}
	switch {
	case orphaned:
		// Copies of its items, one attempt on, run in their places, so
		// the items are not charged; Settle ignores them.
		p.returnRange(wk, lo, hi)
	case cancelled:
		// The items of a revoked partition are abandoned by Settle, the
		// others run again, uncharged.
		p.stats.Cancelled.Add(1)
		p.returnRange(wk, lo, hi)
	case verdicts != nil:
		noSplit := p.cfg.NoSplit != nil && p.cfg.NoSplit()
		byIndex := func(a, b Verdict) int { return cmp.Compare(a.Index, b.Index) }
		if !slices.IsSortedFunc(verdicts, byIndex) {
			// In item order: goesBack sees the lane mates before each
			// item, and of two verdicts on one item the first given wins.
			slices.SortStableFunc(verdicts, byIndex)
		}
		for _, v := range verdicts {
			i := lo + v.Index
			switch {
			case v.Index < 0 || i >= hi || wk.out[i].Verdict != dispatch.Done:
			case noSplit && v.Kind == Failed && goesBack(b, wk.out, lo, i):
				// As when a batch fails as a whole: only the lane's
				// first failed item is charged, for the hold hook to
				// decide on; this one waits behind it uncharged.
				wk.out[i].Verdict = dispatch.Return
			default:
				p.verdict(wk, b, i, v)
			}
		}
	case !timedOut && p.cfg.Rejected != nil && p.cfg.Rejected(err):
		if hi-lo == 1 {
			p.verdict(wk, b, lo, Verdict{Kind: DeadLettered, Err: err})
		} else {
			p.bisect(wk, b, lo, hi, err)
		}
	case hi-lo == 1:
		p.charge(wk, b, lo, err)
	case p.cfg.NoSplit != nil && p.cfg.NoSplit():
		// The batch failed as a whole (sorted by lane): each lane's
		// first item is charged, and the hold hook decides whether that
		// counts; the later ones go back behind it uncharged, since no
		// hook would see their charges.
		for i := lo; i < hi; i++ {
			if i > lo && b.SameLane(i-1, i) {
				wk.out[i].Verdict = dispatch.Return
				continue
			}
			p.charge(wk, b, i, err)
		}
	default:
		p.bisect(wk, b, lo, hi, err)
	}
}

// OnlyDeferred reports whether a call's verdicts are there and all
// Deferred: the call counts in Stats.DeferredCalls, not Failures, when
// they are applied (failed).
func OnlyDeferred(verdicts []Verdict) bool {
	if len(verdicts) == 0 {
		return false
	}
	for _, v := range verdicts {
		if v.Kind != Deferred {
			return false
		}
	}
	return true
}

// goesBack reports whether an item of b.Items[lo:i] in item i's lane goes
// back (out says Hold or Return): then item i does too, behind it, whatever
// its own outcome (Settle). A running batch keeps each lane's items in
// their order.
func goesBack[M, T any](b *dispatch.Batch[M, T], out []dispatch.Outcome, lo, i int) bool {
	for j := lo; j < i; j++ {
		if v := out[j].Verdict; (v == dispatch.Hold || v == dispatch.Return) && b.SameLane(j, i) {
			return true
		}
	}
	return false
}

// verdict records Do's verdict on b.Items[i].
func (p *Pool[M, T]) verdict(wk *worker[M, T], b *dispatch.Batch[M, T], i int, v Verdict) {
	switch v.Kind {
	case Deferred:
		p.stats.Deferred.Add(1)
		wk.out[i] = dispatch.Outcome{Verdict: dispatch.Hold, Kind: Deferred, Delay: v.Delay, Err: v.Err}
	case DeadLettered:
		wk.out[i] = dispatch.Outcome{Verdict: dispatch.Hold, Kind: DeadLettered, Err: v.Err}
	default:
		p.charge(wk, b, i, v.Err)
	}
}

// bisect calls the handler on the halves of b.Items[lo:hi], which failed
// as a whole with err, and records what becomes of each item.
func (p *Pool[M, T]) bisect(wk *worker[M, T], b *dispatch.Batch[M, T], lo, hi int, err error) {
	mid, oneLane := splitPoint(b, lo, hi)
	firstOK := false
	for _, h := range [2][2]int{{lo, mid}, {mid, hi}} {
		from, to := h[0], h[1]
		if oneLane && from == mid && !firstOK {
			p.returnRange(wk, from, hi) // waits behind the earlier half's failure
			return
		}
		if p.cancelled(wk) || b.Orphaned() || anyRevoked(b.Items[from:to]) {
			p.returnRange(wk, from, hi)
			return
		}
		p.stats.Splits.Add(1)
		verdicts, err, timedOut := p.call(wk, b.Items[from:to])
		if err != nil {
			p.failed(wk, b, from, to, verdicts, err, timedOut)
			continue
		}
		firstOK = true
		taken, ok := p.s.Finish(b, from, to)
		if !ok {
			p.returnRange(wk, from, hi) // given up on (Orphan): ignored
			return
		}
		for i := from; i < to; i++ {
			wk.out[i].Verdict = dispatch.Finished
		}
		wk.count.batches.Add(1)
		wk.count.handled.Add(int64(taken))
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

// charge counts a failed attempt of b.Items[i]: its lane is held (the
// scheduler's Hold decides when it runs again, or whether it is
// dead-lettered).
func (p *Pool[M, T]) charge(wk *worker[M, T], b *dispatch.Batch[M, T], i int, err error) {
	b.Items[i].Attempt++
	b.Items[i].NoteFailure(time.Now())
	wk.out[i] = dispatch.Outcome{Verdict: dispatch.Hold, Kind: Failed, Err: err}
	p.stats.Charged.Add(1)
}
