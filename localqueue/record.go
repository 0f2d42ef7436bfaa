package localqueue

import (
	"time"

	"github.com/orderly-go/orderly/internal/pqueue"
)

// Message is one delivery of a message. Treat it as read-only: the queue
// never changes a Message after handing it out, and Body may be shared with
// a later delivery of the same message.
type Message struct {
	// ID is assigned by Put and stays the same on every delivery.
	ID ID
	// Body is the payload given to Put.
	Body []byte
	// Timestamp is when Put accepted the message.
	Timestamp time.Time
	// Attempts counts deliveries, this one included: 1 on the first Get.
	// It survives Close/Open, and a delivery that Close or a crash cut
	// short counts (see Options.MaxAttempts). In a DeadLetter queue it goes
	// on from the source's count: the first Get there shows the source's
	// attempts plus one, and the dead-letter queue's own MaxAttempts
	// counts from there.
	Attempts int
	// Due is when the message became ready for delivery: the Put time, or
	// the end of the delay of PutDeferred or Requeue, or the moment a
	// timed-out delivery was handed back.
	Due time.Time
	// Deadline is when this delivery times out unless it is finished,
	// requeued or touched (a Touch moves the queue's deadline, not this
	// field).
	Deadline time.Time
}

// record is the queue's handle on a message: the Message it hands out and
// its place in the in-flight or deferred heap. A record handed out by Get is
// never reused; a redelivery gets a new record.
type record struct {
	m Message // m.Deadline minus MsgTimeout is when Get handed it out
	e pqueue.Entry[*record]
	// journaled is set when the journal holds (or must hold from its next
	// state change on) this message: it came from the backend or the
	// journal, or was deferred. Records Put into the memory chan are not
	// journaled until they are deferred: they are memory-only.
	journaled bool
	// bodyOnDisk is set on a deferred message Open restored from the
	// journal: m holds its ID, attempts and due time, not its body, which
	// stays in the journal's COPY until the message is due and
	// processDeferred reads it back.
	bodyOnDisk bool
	// readOp is the journal's backendOps count when this record was read
	// from the backend (0: it was not).
	readOp uint64
}

func newRecord(m Message) *record {
	r := &record{m: m}
	r.e.Value = r
	return r
}

// newReady is newRecord for a fresh message, built in place with body, or
// a copy of it unless owned. A small copy shares the record's allocation
// (see withBody).
func newReady(id ID, body []byte, owned bool, now, due time.Time) *record {
	var r *record
	switch n := len(body); {
	case owned:
		r = new(record)
		r.m.Body = body
	case n <= len(withBody112{}.body):
		w := new(withBody112)
		r = &w.r
		r.m.Body = w.body[:n:n]
	case n <= len(withBody336{}.body):
		w := new(withBody336)
		r = &w.r
		r.m.Body = w.body[:n:n]
	case n <= len(withBody848{}.body):
		w := new(withBody848)
		r = &w.r
		r.m.Body = w.body[:n:n]
	default:
		r = new(record)
		r.m.Body = make([]byte, n)
	}
	if !owned {
		copy(r.m.Body, body)
	}
	r.m.ID = id
	r.m.Timestamp = now
	r.m.Due = due
	r.e.Value = r
	return r
}

// withBody types put a record and a small body in one allocation that
// fills a size class (176 bytes of record plus the body: 288, 512, 1024
// bytes): one malloc per Put instead of two. The body slice points into
// the same object, which keeps it alive as long as either is used.
type (
	withBody112 struct {
		r    record
		body [112]byte
	}
	withBody336 struct {
		r    record
		body [336]byte
	}
	withBody848 struct {
		r    record
		body [848]byte
	}
)
