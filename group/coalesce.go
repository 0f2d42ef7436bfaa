package group

import "sync"

// coalesced runs one operation for many callers: a caller that finds no
// run under way leads one for itself and every caller that arrived
// meanwhile, and when it ends hands the lead to the first caller that
// arrived during it. So at most one run is under way, every caller is
// served by a run that began after it called, and none waits for more
// than the run under way when it came and its own. The claims use it for
// what they all do at once at a rebalance or a shutdown: commit
// (sessionCommits) and read their committed offsets (committedFetches).
type coalesced[W any] struct {
	mu      sync.Mutex
	running bool
	waiting []*coalescedWait[W]
}

type coalescedWait[W any] struct {
	w    W
	done chan struct{}
	lead bool // woken to lead the next run, not served
	ran  bool // the run of its batch returned (not a panic or Goexit)
}

// do runs run once for a batch holding w, and reports whether that run
// returned.
func (c *coalesced[W]) do(w W, run func(batch []W)) bool {
	me := &coalescedWait[W]{w: w, done: make(chan struct{})}
	c.mu.Lock()
	if c.running {
		c.waiting = append(c.waiting, me)
		c.mu.Unlock()
		<-me.done
		if !me.lead {
			return me.ran
		}
		me.lead, me.done = false, make(chan struct{}) // served below, with the rest
		c.mu.Lock()
	}
	c.running = true
	batch := append([]*coalescedWait[W]{me}, c.waiting...)
	c.waiting = nil
	c.mu.Unlock()
	c.lead(batch, run)
	return me.ran
}

// lead runs run for batch, then serves every caller of batch and hands the
// lead on, even when run panics or exits the goroutine.
func (c *coalesced[W]) lead(batch []*coalescedWait[W], run func([]W)) {
	ws := make([]W, len(batch))
	for i, b := range batch {
		ws[i] = b.w
	}
	ran := false
	defer func() {
		for _, b := range batch {
			b.ran = ran
			close(b.done)
		}
		c.handOn()
	}()
	run(ws)
	ran = true
}

// handOn wakes the first caller waiting to lead the next run, or ends the
// lead when none waits.
func (c *coalesced[W]) handOn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		c.running = false
		return
	}
	next := c.waiting[0]
	c.waiting = c.waiting[1:]
	next.lead = true
	close(next.done)
}
