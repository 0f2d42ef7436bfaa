package merge

import "time"

// watch is the watchdog: every tenth of Config.Timeout (between 10 ms and
// a second) it cancels the calls that ran past Timeout, and tells OnStuck
// of those that ran past Timeout plus Grace, once per call. Workers cost
// it nothing but an atomic store at each call's start and end.
func (p *Pool[M, T]) watch() {
	every := min(max(p.cfg.Timeout/10, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	cancelled := make([]uint64, len(p.workers)) // the call seq last cancelled, per worker
	stuck := make([]uint64, len(p.workers))     // the call seq last reported stuck
	for {
		select {
		case <-tick.C:
		case <-p.stop:
			return
		}
		now := time.Now().UnixNano()
		for i, wk := range p.workers {
			seq := wk.call.seq.Load()
			start := wk.call.start.Load()
			if start == 0 || seq != wk.call.seq.Load() {
				continue
			}
			ran := time.Duration(now - start)
			if ran >= p.cfg.Timeout && cancelled[i] != seq {
				cancelled[i] = seq
				p.s.CancelWorker(wk.w, p.cfg.TimeoutCause)
			}
			if ran >= p.cfg.Timeout+p.cfg.Grace && stuck[i] != seq {
				stuck[i] = seq
				p.stats.Stuck.Add(1)
				if p.cfg.OnStuck != nil {
					p.cfg.OnStuck(i, time.Unix(0, start))
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
	n, now := 0, time.Now().UnixNano()
	for _, wk := range p.workers {
		if start := wk.call.start.Load(); start != 0 && time.Duration(now-start) >= p.cfg.Timeout+p.cfg.Grace {
			n++
		}
	}
	return n
}
