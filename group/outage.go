package group

import (
	"sync"
	"sync/atomic"
	"time"
)

// outage notices when the dependency behind Do is down rather than some
// messages bad: most items fail, across many lanes at once. Then every
// lane retrying on its own backoff would hammer the dependency and spend
// every message's attempts. Instead the group backs off as a whole: it
// runs nothing for a probe delay (Retry.Backoff, doubling up to
// MaxBackoff), then one batch (the probe); a probe that fails starts the
// next delay. Failures do not count against the items while it lasts, and
// fetching pauses by itself as the partitions' shares fill. The first
// call that gets an item done ends the outage.
type outage struct {
	backoff, maxBackoff time.Duration

	watching atomic.Bool  // failures seen in the current window: count successes
	oks      atomic.Int64 // items done in the current window

	mu      sync.Mutex
	start   time.Time // of the current window
	fails   int
	lanes   map[uint64]struct{} // distinct failing lanes, up to outageLanes
	active  bool
	probing bool          // a probe may run now; its first failure starts the next delay
	delay   time.Duration // the next probe delay
	timer   *time.Timer   // ends the current delay
	onStart func()        // the outage began: log
	onEnd   func(d time.Duration)
	limit   func(n int) // the scheduler's SetLimit
	began   time.Time
	count   atomic.Int64 // outages so far
	probes  atomic.Int64
}

// An outage is when, within outageWindow, at least outageFails failed items
// over at least outageLanes lanes make up outageRatio of the items tried.
const (
	outageWindow = 2 * time.Second
	outageFails  = 16
	outageLanes  = 8
	outageRatio  = 0.9
)

func (o *outage) init(r Retry) {
	o.backoff, o.maxBackoff = r.Backoff, r.MaxBackoff
	o.lanes = make(map[uint64]struct{}, outageLanes)
}

// ok notes n items done by a call, and ends an outage.
func (o *outage) ok(n int) {
	if n <= 0 || !o.watching.Load() {
		return
	}
	o.oks.Add(int64(n))
	o.mu.Lock()
	active := o.active
	o.active, o.probing = false, false
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	d := time.Since(o.began)
	o.mu.Unlock()
	if active {
		o.limit(-1)
		if o.onEnd != nil {
			o.onEnd(d)
		}
	}
}

// failed notes an item's failure on lane and reports whether an outage is
// on (then the failure does not count against the item).
func (o *outage) failed(lane uint64) bool {
	now := time.Now()
	o.mu.Lock()
	if now.Sub(o.start) > outageWindow {
		o.start, o.fails = now, 0
		clear(o.lanes)
		o.oks.Store(0)
	}
	o.watching.Store(true)
	o.fails++
	if len(o.lanes) < outageLanes {
		o.lanes[lane] = struct{}{}
	}
	begin := false
	switch {
	case !o.active && o.fails >= outageFails && len(o.lanes) >= outageLanes &&
		float64(o.fails) >= outageRatio*float64(o.fails+int(o.oks.Load())):
		o.active, begin, o.began, o.delay = true, true, now, o.backoff
		o.count.Add(1)
		o.pauseLocked()
	case o.active && o.probing:
		o.pauseLocked() // the probe failed
	}
	active := o.active
	o.mu.Unlock()
	if begin && o.onStart != nil {
		o.onStart()
	}
	return active
}

// pauseLocked runs nothing for the current probe delay, then one batch.
func (o *outage) pauseLocked() {
	o.probing = false
	o.limit(0)
	d := o.delay
	o.delay = min(2*o.delay, o.maxBackoff)
	if o.timer != nil {
		o.timer.Stop()
	}
	o.timer = time.AfterFunc(d, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.active {
			o.probing = true
			o.probes.Add(1)
			o.limit(1)
		}
	})
}

// probeDelay is how long a message that failed during the outage waits
// before it may run again: the current probe delay.
func (o *outage) probeDelay() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.delay
}

// stop ends the probe timer (Run is over).
func (o *outage) stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	o.active = false
}

// on reports whether an outage is on.
func (o *outage) on() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.active
}
