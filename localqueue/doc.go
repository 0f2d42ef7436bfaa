// Package localqueue is a local, durable at-least-once work queue: an nsqd
// channel with the acknowledgement layer go-diskqueue lacks. Orderly's group
// package parks retries, deferred messages and dead letters in it; it is
// also usable on its own as an embedded work queue.
//
// # Data flow
//
//	Put ──► memory chan (MemQueueSize) ──┐
//	   └──► backend, when the chan is    ├──► Get ──► in flight ──► Finish
//	        full or MemQueueSize is 0 ───┘     ▲    (deadline heap)  (gone)
//	        (go-diskqueue, or an             │        │ Requeue(0) / timeout
//	         in-memory FIFO)                 │        ▼
//	PutDeferred, Requeue(d>0) ──► deferred heap ──► ready again at its due time
//	                              (due-time heap)
//
// Put stores a new message with a fresh ID. Ready messages go to the memory
// chan while it has room, otherwise to the backend as an envelope (version,
// ID, timestamp, attempts, due time, body length, body, CRC-32C; see
// envelope.go). Get takes the next ready message from either, counts the
// delivery in Attempts, and puts it in flight with a deadline of now plus
// MsgTimeout. Finish ends it; Requeue hands it back now or after a delay;
// Touch moves its deadline (at most MaxMsgTimeout past the Get). Backend
// records that do not decode are counted (Stats.DecodeErrors) and logged
// with the data file, never returned; go-diskqueue itself renames an
// unreadable file to .bad and moves on (Stats.BackendErrors).
//
// A Scanner, shared by many queues, does what nsqd's queueScanLoop does:
// every ScanInterval it samples SelectionCount queues at random, its
// workers time out the due in-flight messages (redelivered with the next
// attempt, or, after MaxAttempts deliveries, handed to DeadLetter and
// OnDead) and release the due deferred ones, and it samples again at once
// while more than DirtyPercent of the sample had work. Its pool is resized
// to a quarter of the registered queues, capped by WorkerPoolMax. Unlike
// nsqd it samples only queues that have something in flight or deferred,
// so idle queues cost nothing: no goroutine of their own in memory mode, no
// scanner work (go-diskqueue does run one goroutine and a SyncTimeout
// ticker per queue with a DataPath).
//
// # Who owns what
//
//   - The memory chan and the backend are FIFOs owned by their channels and
//     by go-diskqueue's ioLoop (or memBackend's loop); Put, Requeue and the
//     scanner add to them, Get takes from them.
//   - The in-flight map and deadline heap are guarded by inFlightMu, the
//     deferred heap by deferredMu: Get, Finish, Requeue and Touch come from
//     any number of goroutines, so a mutex is simpler than a goroutine.
//   - Each record handed out by Get belongs to that delivery and is never
//     changed or reused; a redelivery is a new record.
//   - putMu (shared by Put, Requeue, the scanner) and getMu (shared by Get)
//     are held exclusively only by Close, so that when Close flushes, no
//     message is half way in, and none has left go-diskqueue's ReadChan (at
//     which point go-diskqueue counts it consumed) without being in flight.
//   - The scanner's loop goroutine owns the worker pool; its active set is
//     guarded by activeMu.
//
// # Durability
//
// What survives depends on DataPath, MemQueueSize and SyncEvery:
//
//   - DataPath "": memory only, like an nsqd #ephemeral channel. Nothing
//     survives Close or a crash (Close logs how many messages it discards).
//     Unlike nsqd's ephemeral channels nothing is dropped while the queue
//     is open: overflow goes to an unbounded in-memory FIFO.
//
//   - Clean Close with a DataPath: everything not finished survives. Close
//     writes the memory chan, the in-flight messages (ready again, Attempts
//     kept) and the deferred ones (due time kept) to go-diskqueue, which
//     syncs on Close; Open on the same DataPath restores them. A message
//     that cannot be written is logged with its ID and Close returns an
//     error.
//
//   - Process crash (kill -9, panic, OOM) with a DataPath: a ready message
//     survives if its Put (or the redelivery that put it back) wrote it to
//     the backend, which is every message when MemQueueSize is 0, whatever
//     SyncEvery is: go-diskqueue has written the record with write(2)
//     before Put returns and the kernel keeps it. On Open go-diskqueue finds
//     its metadata behind the data file, starts a new file for writes and
//     reads the old one to its end; records consumed just before the crash
//     may be delivered again (at-least-once; a duplicate of a message in
//     flight is dropped), and Depth may be off until the queue drains.
//     Messages then in the memory chan, in flight, or deferred are lost:
//     they live in memory, and go-diskqueue's reads are destructive, so a
//     message taken from disk by Get is no longer on disk. Callers that
//     must not lose an in-flight or deferred message across a crash need
//     their own record (for group: do not commit past it until Finish).
//
//   - Machine crash or power loss: only what was fsynced survives. With
//     SyncEvery 1 each Put returns after its record and go-diskqueue's
//     metadata were fsynced (Put waits for the sync that go-diskqueue does
//     after every write; a failing fsync is logged by go-diskqueue, it
//     cannot reach Put). With SyncEvery N the last N-1 backend operations
//     (reads and writes count) or the last SyncTimeout of them may be lost;
//     go-diskqueue always syncs when it starts a new file.
//
// So MemQueueSize 0 with SyncEvery 1 is the setting for "a message whose Put
// returned is on disk": it survives kill -9 and power loss until it is
// delivered.
package localqueue
