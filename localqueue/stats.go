package localqueue

import "sync/atomic"

// Stats is a snapshot of a queue's state and counters.
type Stats struct {
	Name string
	// Depth is the number of ready messages (MemDepth + BackendDepth):
	// MemDepth those in the memory chan (at most MemQueueSize), whose
	// bodies are in memory; BackendDepth those beyond it: in the backend,
	// and the ready messages Open restored from the journal, whose bodies
	// stay in the journal until Get reads them back (memory holds their
	// IDs, attempts and due times).
	Depth        int64
	MemDepth     int64
	BackendDepth int64
	// InFlight is the number of delivered messages awaiting Finish,
	// Requeue or their deadline.
	InFlight int
	// Deferred is the number of messages waiting for their due time on
	// the deferred heap; those Open restored from the journal wait there
	// without their bodies, which stay in the journal until they are due.
	// Deferred records in the backend that Get has not read yet are in
	// BackendDepth.
	Deferred int

	Puts      uint64 // accepted by Put, PutDeferred, Replace (its new body) and as a dead-letter queue
	Delivered uint64 // handed out by Get
	Finished  uint64 // ended by Finish or Replace
	Requeued  uint64
	Touched   uint64
	TimedOut  uint64 // deliveries whose deadline passed
	Dead      uint64 // messages that used up MaxAttempts
	// Duplicates counts backend records dropped as copies of a message
	// the queue has elsewhere: go-diskqueue hands out records again after
	// a crash (it persists its read position only when it syncs), and a
	// copy of a message in flight, or of one the journal restored or
	// finished, is dropped.
	Duplicates uint64
	// DecodeErrors counts backend records that did not decode (bad
	// version, length or checksum); they are logged with the file and
	// dropped.
	DecodeErrors uint64
	// BackendErrors counts errors go-diskqueue reported itself: corrupt or
	// truncated data files (renamed to .bad and skipped), failed syncs.
	BackendErrors uint64
	// MetadataCorrupt is 1 when Open found go-diskqueue's metadata file
	// damaged (it did not parse, or its positions did not fit the data
	// files) and rebuilt it from the data files, logged at error level
	// with its path; else 0.
	MetadataCorrupt uint64
	// WriteErrors counts failed backend writes. Put returns them; a
	// redelivery that fails is retried a second later.
	WriteErrors uint64

	// The journal of journaled messages (with a DataPath; zero otherwise).
	// Journaled is the number of messages it holds: in flight after a
	// Get from the backend, deferred, or handed back after either and not
	// yet finished. JournalBytes is its file size.
	Journaled    int
	JournalBytes int64
	// JournalCorrupt counts damaged regions Open found in the journal
	// (logged with its path; the records around them were restored).
	JournalCorrupt uint64
	// JournalErrors counts failed journal writes, fsyncs and compactions
	// (each logged with the message ID or the path).
	JournalErrors      uint64
	JournalCompactions uint64
}

// counters are grouped by who bumps them, each group on its own cache
// line: producers (Put), consumers (Get, Finish), the rest.
type counters struct {
	puts                                  atomic.Uint64
	_                                     [56]byte
	delivered, finished                   atomic.Uint64
	_                                     [48]byte
	requeued, touched, timedOut, dead     atomic.Uint64
	duplicates, decodeErrors, writeErrors atomic.Uint64
}

// Stats returns a snapshot; the fields are read one at a time, not
// atomically together.
func (q *Queue) Stats() Stats {
	mem, be := q.memDepth(), q.backendDepth()
	st := Stats{
		Name:         q.opts.Name,
		Depth:        mem + be,
		MemDepth:     mem,
		BackendDepth: be,
		InFlight:     q.inFlightLen(),
		Deferred:     q.deferredLen(),
		Puts:         q.stats.puts.Load(),
		Delivered:    q.stats.delivered.Load(),
		Finished:     q.stats.finished.Load(),
		Requeued:     q.stats.requeued.Load(),
		Touched:      q.stats.touched.Load(),
		TimedOut:     q.stats.timedOut.Load(),
		Dead:         q.stats.dead.Load(),
		Duplicates:   q.stats.duplicates.Load(),
		DecodeErrors: q.stats.decodeErrors.Load(),
		WriteErrors:  q.stats.writeErrors.Load(),
	}
	if q.backend != nil {
		st.BackendErrors = q.backend.errorCount()
		st.MetadataCorrupt = q.backend.metadataCorrupt()
	}
	if j := q.journal; j != nil {
		st.JournalBytes, st.Journaled = j.stats()
		st.JournalCorrupt = j.counters.corrupt.Load()
		st.JournalErrors = j.counters.errors.Load()
		st.JournalCompactions = j.counters.compactions.Load()
	}
	return st
}
