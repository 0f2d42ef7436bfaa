package main

import (
	"sync"
	"time"
)

// gate pauses every call to the endpoint at once: a 429 or 503 (for its
// Retry-After) or an endpoint error (for the endpoint backoff) closes it.
// While it is closed the group is paused (Group.Pause: no batch is handed
// to a worker), and a call that had started before the pause took effect
// defers its items, uncharged, without sending anything. A later close
// only ever extends the pause; when it ends the group resumes.
type gate struct {
	pause, resume func() // the group's Pause and Resume

	mu     sync.Mutex
	until  time.Time
	timer  *time.Timer
	paused bool
	closed bool // stop was called
	total  time.Duration
}

// remaining is how long the gate stays closed, 0 if open.
func (g *gate) remaining() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(time.Until(g.until), 0)
}

// close closes the gate for d from now, unless it already is for longer,
// and reports how long it stays closed.
func (g *gate) close(d time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closeLocked(d)
}

// closeIfOpen closes the gate for next() from now if it is open, and
// reports how long it stays closed. Calls in flight when the first error
// came, answered while the gate is closed, do not call next: the endpoint
// backoff doubles once for them, however close together they come back
// (checking remaining and then calling close let two of them both find
// the gate open).
func (g *gate) closeIfOpen(next func() time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if left := time.Until(g.until); left > 0 {
		return left
	}
	return g.closeLocked(next())
}

func (g *gate) closeLocked(d time.Duration) time.Duration {
	now := time.Now()
	until := now.Add(d)
	if !until.After(g.until) {
		return g.until.Sub(now)
	}
	if g.until.After(now) {
		g.total += until.Sub(g.until)
	} else {
		g.total += d
	}
	g.until = until
	if g.closed {
		return d
	}
	if !g.paused && g.pause != nil {
		g.paused = true
		g.pause()
	}
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.reopen)
	} else {
		g.timer.Reset(d)
	}
	return d
}

// reopen resumes the group once the gate's time is up.
func (g *gate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || !g.paused {
		return
	}
	if left := time.Until(g.until); left > 0 {
		g.timer.Reset(left) // extended since the timer was set
		return
	}
	g.paused = false
	g.resume()
}

// pausedFor is the time the gate was closed, in all.
func (g *gate) pausedFor() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total - max(time.Until(g.until), 0)
}

// stop ends the gate's timer (the run is over).
func (g *gate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
	}
}
