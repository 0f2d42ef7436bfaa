package group

import (
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// drainAndSeal lets go of a revoked partition's calls under way, for a
// claim and for the parked messages' side partition alike. After p.Drain
// it takes back, with advance, what finishes, until nothing is
// outstanding, DrainTimeout passes (timedOut) or stop closes; a tick, if
// not nil, calls onTick meanwhile. Then it seals p and takes back what
// finished before the seal: what finishes from then on is not the
// partition's, neither committed nor counted as handled. What is still
// outstanding is late, read with the items abandoned in the drain at one
// instant, so that each item counts once. Past DrainTimeout it then
// cancels the late calls' context with cause (CancelRunning), and reports
// how many it cancelled: after the seal, so that a call that returns nil
// when cancelled finds the partition sealed.
func (g *Group[T]) drainAndSeal(p *dispatch.Partition[Message, T], cause error, advance func(),
	tick <-chan struct{}, onTick func(), stop <-chan struct{}) (late, inDrain int64, cancelled int, timedOut bool) {
	p.Drain()
	advance() // what finished before Drain, whose wake may still be deferred
	if p.Outstanding() > 0 {
		timer := time.NewTimer(g.cfg.DrainTimeout)
	wait:
		for p.Outstanding() > 0 {
			select {
			case <-p.Wake():
				advance()
			case <-tick:
				onTick()
			case <-timer.C:
				timedOut = true
				break wait
			case <-stop:
				break wait
			}
		}
		timer.Stop()
	}
	p.Seal()
	advance()
	late, inDrain = p.Unsettled()
	if timedOut {
		cancelled = g.sched.CancelRunning(p, cause)
	}
	return late, inDrain, cancelled, timedOut
}
