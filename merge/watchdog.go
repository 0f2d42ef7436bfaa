package merge

import "time"

// watch is the watchdog: every tenth of Config.Timeout (between 10 ms and
// a second) it cancels the calls that ran past Timeout (counting them in
// Stats.TimedOut), and tells OnStuck of those that ran past Timeout plus
// Grace, once per call. Workers cost it nothing but an atomic store at
// each call's start and end.
func (p *Pool[M, T]) watch() {
	every := min(max(p.cfg.Timeout/10, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	cancelled := make([]uint64, len(p.workers)) // the call last cancelled, per worker (dispatch.Worker.Call)
	stuck := make([]uint64, len(p.workers))     // the call last reported stuck
	for {
		select {
		case <-tick.C:
		case <-p.stop:
			return
		}
		now := p.clock.now()
		for i, wk := range p.workers {
			call := wk.w.Call()
			start := wk.call.start.Load()
			if call == 0 || start == 0 || call != wk.w.Call() {
				continue // between calls, or start is another call's
			}
			ran := time.Duration(now - start)
			if ran >= p.cfg.Timeout && cancelled[i] != call {
				cancelled[i] = call
				p.s.CancelCall(wk.w, call, p.cfg.TimeoutCause) // a no-op once the call returned
				// Counted now, not only when it returns: a call that
				// never returns has run past Timeout too.
				p.countTimedOut(&wk.call, call)
			}
			if ran >= p.cfg.Timeout+p.cfg.Grace && stuck[i] != call {
				stuck[i] = call
				p.stats.Stuck.Add(1)
				if p.cfg.OnStuck != nil {
					p.cfg.OnStuck(i, call, p.clock.time(start))
				}
			}
		}
	}
}

// StuckNow is how many workers are in a call that has run past Timeout
// plus Grace.
func (p *Pool[M, T]) StuckNow() int {
	if p.cfg.Timeout <= 0 {
		return 0
	}
	n, now := 0, p.clock.now()
	for _, wk := range p.workers {
		if start := wk.call.start.Load(); start != 0 && time.Duration(now-start) >= p.cfg.Timeout+p.cfg.Grace {
			n++
		}
	}
	return n
}
