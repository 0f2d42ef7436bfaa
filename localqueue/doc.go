// Package localqueue is a local, durable at-least-once work queue: an nsqd
// channel with the acknowledgement layer go-diskqueue lacks. It is usable
// on its own as an embedded work queue, and it knows nothing of Kafka or
// of Orderly's other packages: a queue holds bodies, with an ID,
// timestamps and a delivery count. Orderly's group package times its held
// messages' retries and deferrals with a memory-only queue, and parks
// Unordered messages on disk in one; what ties a body to a Kafka message
// lives in group.
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
// chan while it has room, otherwise to the backend: with a DataPath to
// go-diskqueue as an envelope (version, ID, timestamp, attempts, due time,
// body length, body, CRC-32C; see envelope.go), in memory mode to a FIFO of
// records (memfifo.go; while it holds messages new ones queue behind them,
// so the memory chan does not overtake them). Get takes the next ready message from either, counts the
// delivery in Attempts, and puts it in flight with a deadline of now plus
// MsgTimeout. Finish ends it; Requeue hands it back now or after a delay;
// Replace ends it and adds a new body in its place, in one journal record;
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
// ticker per queue with a DataPath; the journal opens its file and starts
// its background goroutine only when it first holds a message).
//
// # Who owns what
//
//   - The memory chan and the backend are FIFOs owned by their channels and
//     by go-diskqueue's ioLoop (the memory FIFO by its mutex); Put, Requeue
//     and the scanner add to them, Get takes from them. The ready messages
//     Open restored from the journal wait, as IDs whose bodies Get reads
//     back from the journal, in a FIFO of their own (restored.go, guarded
//     by its mutex) that only Open adds to (see The journal); the deferred
//     ones it restored wait on the deferred heap, their bodies likewise
//     left in the journal until they are due.
//   - The in-flight table and deadline heap are guarded by inFlightMu, the
//     deferred heap by deferredMu: Get, Finish, Requeue and Touch come from
//     any number of goroutines, so a mutex is simpler than a goroutine.
//   - Each record handed out by Get belongs to that delivery and is never
//     changed or reused; a redelivery is a new record.
//   - putMu (shared by Put, Requeue, the scanner) and getMu (shared by Get,
//     and by Finish with a DataPath) are held exclusively only by Close, so
//     that when Close flushes, no message is half way in, none has left
//     go-diskqueue's ReadChan (at which point go-diskqueue counts it
//     consumed) without being in flight, and no FIN is on its way to the
//     journal. Memory-only queues flush nothing, so their Put and Get skip
//     them.
//   - A dead message leaves the in-flight table (or the journal's replay)
//     under putMu, goes to DeadLetter and gets its FIN there; OnDead is
//     called after putMu is released, so it may call the queue's methods,
//     and without a DeadLetter queue the FIN follows it, under putMu
//     again (see afterDead).
//   - Journal writes (COPY, MOVE, FIN) are made without inFlightMu: the
//     record leaves (or enters) the in-flight table under it, the journal
//     call comes after (or before), so an fsync never holds up the
//     in-flight table.
//   - The journal (with a DataPath) is guarded by its mu; its background
//     goroutine does the fsyncs SyncEvery and SyncTimeout call for and the
//     compactions, and Close stops it and waits for it.
//   - The scanner's loop goroutine owns the worker pool; its active set is
//     guarded by activeMu.
//
// # The journal
//
// go-diskqueue's reads are destructive: a record is consumed once it has
// left ReadChan. So with a DataPath the queue keeps its own crash-safe
// record, <DataPath>/<Name>.journal, of every message that has left the
// backend (or never entered it) and is not finished: a message taken from
// the backend by Get, one deferred by PutDeferred, Requeue or a failed
// write, and one handed back ready after either. A message that has been
// in the journal stays there until it is finished or dead-lettered, even
// while it waits in the memory chan or the backend again.
//
// The journal is a sequence of length-prefixed, versioned, CRC-32C-checked
// records (journal_format.go): COPY (the whole message, state in flight,
// deferred or ready, attempts, due time) when the journal first takes a
// message, MOVE (state, attempts, due) when it changes state, FIN when it
// is finished or dead-lettered, and SWAP (Replace: a COPY of the new
// message and the FIN of the one it replaces, in one record). Each is
// appended before the operation
// returns: on Linux by a copy into a shared memory mapping of the file,
// which is the kernel's page cache the moment the copy completes (space is
// reserved ahead by writing zeros, so a full disk is an error, never a
// SIGBUS), elsewhere by one pwrite(2). Either way the record survives the
// death of the process. Its fsyncs follow SyncEvery and SyncTimeout (see
// journal_sync.go and below).
//
// When the file has grown past 32 MiB and is more than half dead, the
// journal's background goroutine compacts it while the queue goes on: the
// live records are rewritten to <journal>.tmp, the records appended
// meanwhile are copied after them, and the file is fsynced and renamed
// over the journal (journal_compact.go). A crash before the rename leaves
// the old journal, after it the new one; each holds every live record, so
// a crash at any step loses nothing. Compaction keeps the FINs of messages
// read from the backend in the last SyncEvery backend operations (up to
// 65536), which Open needs to recognise go-diskqueue's stale copies.
//
// Open replays the journal: a message with a COPY (or SWAP) and no FIN
// (or SWAP replacing it) comes back,
// once: a deferred one on the deferred heap with its due time, and without
// its body, which the scanner reads back from the journal's COPY
// (wherever compaction has moved it) when the message is due, so memory
// holds no body of the deferred messages a queue reopens with
// (TestRestoredDeferredBodiesStayOnDisk); one that was
// in flight ready again at once, Attempts kept (the delivery cut short
// counts: if it was the MaxAttempts-th, the message is dead-lettered); one
// handed back ready with its due time. Close journals the in-flight
// messages the journal does not hold yet (those Get took from the memory
// chan) as in flight, so this is the one rule for every delivery cut short
// by Close or a crash, whatever MemQueueSize (see Options.MaxAttempts).
// Open then rewrites the journal (and keeps a damaged one as
// <journal>.bad). The ready messages it restored wait for Get, which
// takes them after the backend's records from before this Open, as a list
// of IDs: the bodies stay in the journal, and Get reads each back from the
// COPY the journal holds (wherever compaction has moved it), so memory
// holds no body of theirs, whatever MemQueueSize
// (TestRestoredBodiesStayOnDisk, TestRestoredReadBackAfterCompaction).
// They are not written to the backend again, so restarting a queue again
// and again, with messages it does not get to, does not grow its data
// files (TestRestartsKeepDataFilesBounded). Because go-diskqueue persists its
// read position only when it syncs, after a crash it hands out again
// records that were read before; and a journaled message may also have a
// copy in the backend from a requeue. So when the backend holds records
// from before this Open, Open writes a marker to the backend (or takes as
// its own an earlier Open's marker that is the backend's last record, so
// that restarts with nothing written in between add none), and until Get
// reads it, a backend record whose ID the journal knew (restored or
// finished) is a stale copy and is dropped (Stats.Duplicates); the
// restored messages go once Get has read it. Records after the marker
// were written since Open and are never dropped. Damage the backend
// reports once Open has chosen the marker may take the marker with it: the
// check stops at the next record Get reads, so that a stale copy may be
// delivered twice rather than a live one dropped, and the restored
// messages go as soon as the damage is reported
// (TestStaleCheckStopsAfterDamage, TestDamageAfterMarkerReleasesRestored).
// Damage go-diskqueue reports while Open starts it, before then, cannot
// have taken the marker, which goes after what it skipped: the check goes
// on and the restored messages wait for the marker
// (TestDamageBeforeMarkerKeepsRestoredOrder). An error that loses no
// record, such as a failed sync on a full disk, does neither
// (TestFailedSyncIsNoDamage).
//
// Damage in the journal (a torn tail, a bad checksum, garbage) is logged
// at error level with the journal's path, counted in Stats.JournalCorrupt,
// and skipped: replay resumes at the next whole record, so the records
// around the damage are restored. A message whose COPY was damaged is
// lost unless the backend still has it; one whose FIN was damaged comes
// back.
//
// Open also repairs go-diskqueue's metadata after a crash (diskmeta.go):
// without it, go-diskqueue v1.1.0 loses every message of a new or emptied
// queue killed before its first sync, overwrites what a second run wrote
// after a crash if that run is killed before it syncs, and keeps a stale
// depth. A metadata file that is damaged (it does not parse, or its
// positions do not fit the data files) would make go-diskqueue write over
// file 0, skip files or read garbage; Open rebuilds it from the data files
// instead (logged at error level with its path, Stats.MetadataCorrupt),
// so nothing is lost or overwritten. If the read position cannot be
// trusted, reading starts again at the first data file: of the records
// already read from it, copies of messages the journal holds are dropped
// as stale, but finished ones may be delivered again (at-least-once).
//
// # Durability
//
// What survives depends on DataPath, MemQueueSize and SyncEvery (and
// SyncTimeout):
//
//   - DataPath "": memory only, like an nsqd #ephemeral channel. Nothing
//     survives Close or a crash (Close logs how many messages it discards).
//     Unlike nsqd's ephemeral channels nothing is dropped while the queue
//     is open: overflow goes to an unbounded in-memory FIFO.
//
//   - Clean Close with a DataPath: everything not finished survives. Close
//     writes the memory chan to the backend and syncs it, journals the
//     in-flight messages the journal does not hold yet (as in flight, with
//     their Attempts), and fsyncs the journal, which holds the rest; Open
//     restores all of them. An in-flight message the journal cannot take
//     goes to the backend (ready, Attempts kept); a message that cannot be
//     written there either is logged with its ID and Close returns an
//     error.
//
//   - Process crash (kill -9, panic, OOM killer) with a DataPath, whatever
//     SyncEvery is: a message whose Put (or PutDeferred) returned survives
//     until Finish returns for it, whether it is ready, in flight or
//     deferred at the crash, and comes back exactly once, except while it
//     is memory-only: with MemQueueSize above 0, a message Put into the
//     memory chan is memory-only there and in flight after a Get took it
//     from there, until it is deferred or requeued for later (then it is
//     journaled). A message that comes back after the restart had its
//     Finish under way, or (logged and counted) a journal write that
//     failed; nothing finished comes back otherwise, as long as SyncEvery
//     is at most 65536. One narrow window remains: a Get that has received
//     a record from go-diskqueue but not yet stored its COPY (a few hundred
//     nanoseconds of work, no I/O wait) loses that message if the process
//     dies right then and go-diskqueue has already persisted its read
//     position past the record (it does so when it syncs, and when it
//     finishes a data file, which it deletes); otherwise go-diskqueue
//     hands the record out again after the restart.
//
//   - Dead letters (MaxAttempts with a DeadLetter queue): a queue with a
//     DataPath needs a DeadLetter queue with one too (Open rejects a
//     memory-only one). A dead message is written straight to the
//     dead-letter queue's backend, whatever its MemQueueSize, and only
//     once that write has returned does the source append its FIN. So a
//     process crash leaves it in one of the two queues, or in both if it
//     struck in between. A power loss cannot leave it in neither if the
//     dead-letter queue's SyncEvery is 1: its write then returns after
//     the fsync (a failed fsync is logged, and the dead letter is then as
//     durable as the next one that succeeds). With SyncEvery above 1 it
//     is fsynced on the dead-letter queue's schedule, like its Puts (see
//     below), and a power loss before
//     that can lose it even though the source's FIN survived. Without a
//     DeadLetter queue, OnDead is where a dead message goes, so the FIN
//     comes after OnDead returned: a crash while OnDead runs brings the
//     message back, and OnDead sees it again.
//
//   - Machine crash or power loss: only what was fsynced survives. The
//     backend and the journal are fsynced separately, each on SyncEvery
//     and SyncTimeout. With SyncEvery 1 each Put returns after its record
//     and go-diskqueue's metadata were fsynced (or with ErrNotSynced, when
//     that fsync failed: the message is written, not known durable; a
//     failed fsync of the journal is logged and counted in Stats but not
//     returned to the operation it follows), and each journaled
//     operation (Get from the backend, PutDeferred, Requeue, Finish of a
//     journaled message, a timeout) after its journal record was fsynced
//     (fdatasync on Linux); the window of the Get above is then as long as
//     that fsync, as go-diskqueue syncs its read position right after the
//     read. With SyncEvery N above 1, the last N-1 backend operations
//     (reads and writes count) or the last SyncTimeout of them may be lost
//     (go-diskqueue always syncs when it starts a new file), and the
//     journal is fsynced in the background after every N COPY and MOVE
//     records or SyncTimeout after the first record not yet fsynced, so a
//     power loss can lose the journal records since the start of the last
//     fsync that completed: at most about 2N COPY and MOVE records (and
//     the FINs among them), or SyncTimeout plus one fsync. A lost COPY or
//     MOVE loses that message or brings it back in its older state; a lost
//     FIN brings a finished message back.
//
//   - Full disk with a DataPath: a Put the backend cannot store returns
//     its error (ENOSPC, naming the data file), and so do a PutDeferred
//     and a Replace the journal cannot store. The journal records of
//     other operations (a Get's COPY, a Requeue, a FIN) are logged (a
//     line a second) and counted in Stats.JournalErrors instead, and the
//     message concerned is then not crash-safe (see the process crash
//     above). While the queue runs, nothing it took is lost or torn, and
//     it goes on once there is room again (TestFullDisk); a Close on a
//     full disk can lose what only memory holds (it says which, and
//     returns an error). What makes that so:
//     go-diskqueue leaves the head of a write that failed part way past
//     its last record, and its reader, having read ahead into it, hands
//     out the next record written there torn
//     (TestDiskqueueTearsAfterFailedWrite); so after a failed write the
//     queue first writes a filler, the failed record with its checksum
//     spoilt, which Get skips whole or torn (backendwrite.go). The
//     journal's dead records may be what fills the disk: a write of the
//     queue's that meets a full disk asks for a compaction whatever the
//     journal's size (if more than half of it is dead; at most one a
//     second after one failed), and the journal keeps the last 64 KiB of
//     its reserved space (which it reserves 1 to 16 MiB ahead, and only
//     the pages a record needs when that fails) to give that compaction
//     room (TestJournalDeadRecordsFillingTheDisk). go-diskqueue's
//     temporary metadata files, which it leaves behind when writing them
//     fails, are removed.
//
//   - Data files read whole: go-diskqueue renames a data file to .bad
//     when its reader, having caught up with the writer at the file's
//     end, tries one more record there after the writer has moved on; the
//     file (up to MaxBytesPerFile) would stay on disk for good. The queue
//     removes such a file (every record in it was read) and does not count
//     it as a backend error (diskroll.go, TestFileRollLeavesNothingBehind);
//     a file go-diskqueue sets aside for real damage stays, and counts.
//
//   - Damaged data files: go-diskqueue sets a file aside whole when its
//     reader meets damage in it, and if that is the file it writes to, it
//     sets aside with the damage every record written there since. So Open
//     has go-diskqueue write to a new data file, unless the one it wrote
//     to last is empty or holds only an earlier Open's marker, which it
//     keeps (see The journal): what a run writes never shares a file with
//     an earlier run's data, and damage in that data loses only what was
//     there (TestRestoredIntoDamagedDataFile). A write file that an
//     earlier run read whole is removed when the reader moves on from it,
//     as the next Open starts.
//
// So MemQueueSize 0 is the setting for "a message whose Put returned
// survives kill -9 until it is finished", and SyncEvery 1 adds power loss.
package localqueue
