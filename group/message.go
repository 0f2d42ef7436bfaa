package group

import "time"

// Header is one Kafka record header.
type Header struct {
	Key   []byte
	Value []byte
}

// Message is one Kafka record as Orderly hands it to New, Split and Do.
//
// The *Message given to New and Split, and (when Handler.New is nil) the
// *Message values in a Do batch, are recycled once the message has
// finished: keep Key, Value and Headers' slices if you like (they are
// never reused), but do not keep the *Message itself after Do returns.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// Attempt is 1 on the first delivery and 1 more after each failure
	// charged to the message, across a restart or handoff (the commit
	// metadata carries it) and a parked copy; New, Split and Do see the
	// same value for one delivery.
	Attempt int
}
