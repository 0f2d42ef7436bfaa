package group

import (
	"time"

	"github.com/IBM/sarama"
)

// fetchPauser is what sarama's claims offer (through their
// PartitionConsumer) to stop fetching a partition without giving it up.
type fetchPauser interface {
	Pause()
	Resume()
}

// held is the FIFO of messages a claim loop received while the in-flight
// budget was exhausted. A paused claim loop must keep reading its claim:
// under the cooperative protocol the only sign that a partition was revoked
// is its Messages channel closing, behind whatever is buffered there, and
// sarama gives ConsumeClaim Rebalance.Timeout to notice before it gives up
// on the member (which then looks like a zombie to the rest of the group).
// A loop starts holding once it has waited holdAfter for credit (short
// waits, the common case under load, stay on sarama's side of the channel,
// which costs nothing per message). Fetching is paused meanwhile
// (fetchPauser), so held never exceeds what
// sarama had already fetched for the partition: its channel buffer and the
// rest of the fetch response in hand. Held messages are not in flight: they
// are not dispatched, not tracked and not counted against MaxInFlight until
// credit returns; on a revoke they are dropped like other unstarted work.
type held struct {
	q    []*sarama.ConsumerMessage
	head int
}

func (h *held) len() int { return len(h.q) - h.head }

func (h *held) push(m *sarama.ConsumerMessage) { h.q = append(h.q, m) }

// pop returns the oldest held message; the caller checks len first.
func (h *held) pop() *sarama.ConsumerMessage {
	m := h.q[h.head]
	h.q[h.head] = nil
	h.head++
	if h.head == len(h.q) {
		h.q, h.head = h.q[:0], 0
	}
	return m
}

// drop lets go of every held message and returns how many there were.
func (h *held) drop() int {
	n := h.len()
	clear(h.q)
	h.q, h.head = h.q[:0], 0
	return n
}

// holdAfter is how long a claim loop out of budget waits for credit before
// it pauses fetching and reads on into held: the most a revoke waits to be
// noticed, besides the channel's buffered messages.
const holdAfter = 50 * time.Millisecond

// holdTimer fires once holdAfter has passed since it was armed; c is nil
// unless it is armed and has not fired.
type holdTimer struct {
	t     *time.Timer
	c     <-chan time.Time
	armed bool
}

func newHoldTimer() *holdTimer { return &holdTimer{} }

// arm starts the wait unless it has started already.
func (h *holdTimer) arm() {
	if h.armed {
		return
	}
	if h.t == nil {
		h.t = time.NewTimer(holdAfter)
	} else {
		h.t.Reset(holdAfter)
	}
	h.c, h.armed = h.t.C, true
}

// fired records that c delivered; the timer stays armed until stop.
func (h *holdTimer) fired() { h.c = nil }

func (h *holdTimer) stop() {
	if h.t != nil {
		h.t.Stop()
	}
	h.c, h.armed = nil, false
}
