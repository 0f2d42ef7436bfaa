package group

import (
	"sync"
	"sync/atomic"
	"time"
)

// outage notices when the dependency behind Do is down rather than some
// messages bad: most calls fail, across many lanes at once. Then every
// lane retrying on its own backoff would hammer the dependency and spend
// every message's attempts. Instead the group backs off as a whole: the
// scheduler runs one batch at a time (the probe), failures do not count
// against the items (they wait a probe delay, doubling up to
// Retry.MaxBackoff, uncharged), and fetching pauses by itself as the
// partitions' shares fill. The first call that succeeds ends the outage.
type outage struct {
	backoff, maxBackoff time.Duration

	watching atomic.Bool  // failures seen in the current window: count successes
	oks      atomic.Int64 // items done in the current window

	mu      sync.Mutex
	start   time.Time // of the current window
	fails   int
	lanes   map[uint64]struct{} // distinct failing lanes, up to outageLanes
	active  bool
	delay   time.Duration // the next probe delay
	onStart func()        // the outage began: limit the scheduler, log
	onEnd   func(d time.Duration)
	began   time.Time
	count   atomic.Int64 // outages so far
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
	o.active = false
	d := time.Since(o.began)
	o.mu.Unlock()
	if active && o.onEnd != nil {
		o.onEnd(d)
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
	if !o.active && o.fails >= outageFails && len(o.lanes) >= outageLanes &&
		float64(o.fails) >= outageRatio*float64(o.fails+int(o.oks.Load())) {
		o.active, begin, o.began, o.delay = true, true, now, o.backoff
		o.count.Add(1)
	}
	active := o.active
	o.mu.Unlock()
	if begin && o.onStart != nil {
		o.onStart()
	}
	return active
}

// probeDelay is how long a message that failed during the outage waits:
// Retry.Backoff, doubling with each failure, up to Retry.MaxBackoff.
func (o *outage) probeDelay() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.delay
	o.delay = min(2*o.delay, o.maxBackoff)
	return d
}

// on reports whether an outage is on.
func (o *outage) on() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.active
}
