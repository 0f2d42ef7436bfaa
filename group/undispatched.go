package group

import "github.com/IBM/sarama"

// fetchPauser is what sarama's claims offer (through their
// PartitionConsumer) to stop fetching a partition without giving it up.
type fetchPauser interface {
	Pause()
	Resume()
}

// undispatched is the FIFO of messages a claim loop received while its
// partition was out of its in-flight share, or paced (the workers had a
// ready backlog; dispatch/pace.go: paced, it holds as many as its share
// has room for before it pauses fetching). A claim loop out of budget must keep reading its
// claim, for two reasons. Under the cooperative protocol the only sign that
// a partition was revoked is its Messages channel closing, behind whatever
// is buffered there, and sarama gives ConsumeClaim Rebalance.Timeout to
// notice before it gives up on the member (which then looks like a zombie
// to the rest of the group). And sarama's fetch loop for a broker waits
// until every partition has taken its last response (or stalls for
// MaxProcessingTime between two messages), so a loop that reads in
// trickles as credit comes back holds up every partition of the broker,
// revoked ones' close included. Past Chan undispatched messages (paced: past what the
// share has room for, see claimLoop.holdLimit), fetching is paused
// (fetchPauser), so undispatched stays within what sarama had already fetched: a
// channel's worth and the rest of the responses in hand. Undispatched messages are
// not in flight: they are not dispatched, not tracked and not counted
// against MaxInFlight until credit returns; on a revoke they are dropped
// like other unstarted work.
type undispatched struct {
	q     []*sarama.ConsumerMessage
	head  int
	bytes int64 // msgSize of the messages in q
}

func (h *undispatched) len() int { return len(h.q) - h.head }

// push appends m. When the array is full and at least half of it is
// popped slots, it moves what is held to the front instead of growing: a
// claim that stays paced pushes and pops without the FIFO ever emptying,
// and an array that only grew would keep a slot for every message that
// went through it.
func (h *undispatched) push(m *sarama.ConsumerMessage) {
	if len(h.q) == cap(h.q) && 2*h.head >= len(h.q) && h.head > 0 {
		n := copy(h.q, h.q[h.head:])
		clear(h.q[n:])
		h.q, h.head = h.q[:n], 0
	}
	h.q = append(h.q, m)
	h.bytes += msgSize(m)
}

// pop returns the oldest undispatched message and its msgSize; the caller
// checks len first.
func (h *undispatched) pop() (*sarama.ConsumerMessage, int64) {
	m := h.q[h.head]
	h.q[h.head] = nil
	h.head++
	size := msgSize(m)
	h.bytes -= size
	if h.head == len(h.q) {
		h.reset()
	}
	return m, size
}

// reset empties h, keeping its array unless it grew past a few bursts
// (a long stall can hold a whole fetch response per partition).
func (h *undispatched) reset() {
	if cap(h.q) > maxKeptHeld {
		h.q, h.head = nil, 0
		return
	}
	h.q, h.head = h.q[:0], 0
}

const maxKeptHeld = 4096

// drop lets go of every undispatched message and returns how many there were.
func (h *undispatched) drop() int {
	n := h.len()
	clear(h.q)
	h.reset()
	h.bytes = 0
	return n
}
