package localqueue

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// restoredFIFO holds the ready messages Open restored from the journal,
// in journal order, until Get takes them: for each only its ID, attempts
// and due time. The body stays in the journal's COPY record, which Get
// reads back when it takes the message (takeRestored), so a queue
// reopened with a backlog the journal holds (requeued messages, say)
// keeps 32 bytes of memory here for each of them, whatever their size,
// as MemQueueSize promises (0: no body waits in memory).
//
// Only Open adds to it, before any Get; Get and Close take from it, under
// mu.
type restoredFIFO struct {
	n    atomic.Int64 // entries waiting; read without mu by Depth and Get
	mu   sync.Mutex
	ents []restoredMsg // guarded by mu; ents[head:] wait
	head int           // guarded by mu
}

// restoredMsg is a restored message waiting in a restoredFIFO: where to
// find it in the journal (its ID, which journal.live maps to its COPY
// wherever compaction has moved it) and what the queue made of it at
// Open, which the journal holds too unless its write failed.
type restoredMsg struct {
	id       ID
	attempts uint32
	due      int64 // Unix nanoseconds
}

// push appends the restored message m (its body is dropped).
func (f *restoredFIFO) push(m *Message) {
	f.mu.Lock()
	f.ents = append(f.ents, restoredMsg{id: m.ID, attempts: clampAttempts(m.Attempts), due: m.Due.UnixNano()})
	f.n.Add(1)
	f.mu.Unlock()
}

// pop removes and returns the oldest entry; ok is false when none waits.
func (f *restoredFIFO) pop() (m restoredMsg, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.head == len(f.ents) {
		return restoredMsg{}, false
	}
	m = f.ents[f.head]
	f.head++
	f.n.Add(-1)
	if f.head == len(f.ents) {
		f.ents, f.head = nil, 0 // nothing is added after Open
	}
	return m, true
}

// len is the number of entries waiting.
func (f *restoredFIFO) len() int64 { return f.n.Load() }

// empty drops every entry and returns how many there were.
func (f *restoredFIFO) empty() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.ents) - f.head
	f.ents, f.head = nil, 0
	f.n.Store(0)
	return n
}

// takeRestored takes the oldest restored message and reads its body back
// from the journal (readBack), or returns nil when none waits.
func (q *Queue) takeRestored() *record {
	for {
		e, ok := q.restored.pop()
		if !ok {
			return nil
		}
		if r := q.readBack(e.id, int(e.attempts), time.Unix(0, e.due)); r != nil {
			return r
		}
	}
}

// readBack returns the journaled message id, whose body memory does not
// hold, read back from its COPY in the journal, with the attempts and due
// time the queue gave it; or nil. One the journal cannot read back is
// counted and logged, and stays in the journal for the next Open to try
// again (as Open does when it cannot read one); one the journal no longer
// holds (an Empty came first) is skipped.
func (q *Queue) readBack(id ID, attempts int, due time.Time) *record {
	m, held, err := q.journal.loadLive(id)
	switch {
	case err != nil:
		q.journal.counters.errors.Add(1)
		q.log.Error("cannot read a restored message back from the journal; the next Open tries again", zap.Stringer("id", id), zap.Error(err))
		return nil
	case !held:
		q.log.Debug("a restored message left the journal before the queue read it back", zap.Stringer("id", id))
		return nil
	}
	m.Attempts, m.Due = attempts, due
	r := newRecord(m)
	r.journaled = true
	return r
}
