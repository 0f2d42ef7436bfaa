package group

import (
	"time"

	"github.com/orderly-go/orderly/dispatch"
)

// drainAndSeal lets go of a revoked partition's calls under way, for a
// claim and for the parked messages' side partition alike. After p.Drain
// it takes back, with advance, what finishes, until nothing is
// outstanding, timeout passes (timedOut) or stop closes; a tick, if not
// nil, calls onTick meanwhile. Then it seals p and takes back what
// finished before the seal: what finishes from then on is not the
// partition's, neither committed nor counted as handled. What is still
// outstanding is late, read with the items abandoned in the drain at one
// instant, so that each item counts once. A caller that cancels the late
// calls does so after this returns: a call that returns nil when
// cancelled must find the partition sealed.
func drainAndSeal[T any](p *dispatch.Partition[Message, T], timeout time.Duration, advance func(),
	tick <-chan struct{}, onTick func(), stop <-chan struct{}) (late, inDrain int64, timedOut bool) {
	p.Drain()
	advance() // what finished before Drain, whose wake may still be deferred
	if p.Outstanding() > 0 {
		timer := time.NewTimer(timeout)
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
	return late, inDrain, timedOut
}
