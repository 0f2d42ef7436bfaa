// Package deadletter is the dead-letter record format Orderly writes when a
// message cannot be handled (after Retry.MaxAttempts, on a dead-letter
// outcome, or when the decoder Handler.New fails), and the local
// dead-letter store that holds such records on disk when no
// DeadLetterTopic is configured. `orderly dlq` reads both.
//
// # Records and headers
//
// A dead letter is the original record (key, value, headers, timestamp)
// with text headers that say what happened, the same on a Kafka
// dead-letter topic and in a Store:
//
//	__orderly.errors.topic                    origin topic
//	__orderly.errors.partition                origin partition, decimal
//	__orderly.errors.offset                   origin offset, decimal
//	__orderly.errors.timestamp                when it was dead-lettered
//	__orderly.errors.group                    the consumer group
//	__orderly.errors.attempts                 attempts made, decimal
//	__orderly.errors.reason                   max_attempts, rejected, timeout or poison
//	__orderly.errors.message                  the error, at most 1 KiB of UTF-8 ("…" ends a cut one)
//	__orderly.errors.first.failure.timestamp  when its first attempt failed
//
// Timestamps are RFC 3339 in UTC with milliseconds, Kafka's precision
// (TimeFormat: 2026-01-02T15:04:05.123Z), so that `kcat -f '%h'` shows
// them as they are. Headers (the function) drops every
// __orderly.errors.* header the original carried before it appends the
// new ones: a message dead-lettered, replayed and dead-lettered again
// carries one set, about its last failure. Original removes them for a
// replay.
//
// A null key or a null value (a tombstone) stays null: nil in Record,
// distinct from an empty slice, both in the store's file and when
// produced to or read from Kafka (sarama writes nil as a null and reads a
// null back as nil). A dead-letter topic must therefore not be compacted
// (cleanup.policy=delete): compaction would remove a dead-lettered
// tombstone's key with it.
//
// # The store's file
//
// A Store is a directory (DirName under a consumer's DataPath) holding
// deadletters.dat, an append-only file, and deadletters.lock. Unlike a
// go-diskqueue FIFO, whose reads consume, the file can be listed and read
// any number of times while a consumer appends, and records are removed
// only by Rewrite (selectively) or Purge (all), which need the lock.
//
// The file starts with a 16-byte header: "ORDLYDLQ", the format version
// (uint32, 1), and the CRC-32C of those 12 bytes. Then come frames, one
// per record:
//
//	marker   4 bytes  D1 E7 0D 1E
//	length   uint32   the body's length (at most MaxRecordBytes)
//	crc      uint32   CRC-32C (Castagnoli) of the length field and the body
//	body     timestamp: Unix seconds int64, nanoseconds uint32
//	         key, value: optional bytes
//	         header count: uvarint; per header key, value: optional bytes
//
// Integers are big-endian; optional bytes are a uvarint 0 for nil, or
// len+1 followed by the bytes. A scan checks every frame's marker, length
// and checksum and decodes its body; a frame that fails is damage: the
// scan counts it, reports it with the file's path and byte offset
// (Options.OnDamage, Stats.Damaged), and resynchronises at the next
// marker whose frame checks out. A frame that runs past the end of the
// file is an Append not yet complete (a ReadOnly reader does not see it
// yet), or, when the writable Open finds it, one a crash cut short: no
// Append that returned wrote it, and Open cuts it off (Stats.TornBytes).
// Unless its checksum, which covers the length field, holds for the bytes
// up to the end of the file or up to a later frame marker (an Append cut
// short after it): then the length field is what is damaged, the frame is
// read with the length the checksum gives (Stats.Mended), and a writable
// Open writes that length back into the file.
// A header whose checksum holds but whose version is not 1 is ErrVersion.
//
// # Durability and locking
//
// Append returns once its records are written and fdatasync'ed (fsync
// off Linux). Appends that overlap share one write and one sync: the
// first becomes the writer and takes every record queued while it worked
// (Stats.Syncs counts the syncs). A new file and every Rewrite are
// written to deadletters.dat.tmp, fsynced, renamed over the file, and the
// directory fsynced, so the file is always complete.
//
// The consumer process opens its store writable and holds an exclusive
// flock on deadletters.lock (with its process ID inside) while it runs.
// A second writable Open anywhere fails with an error that names the
// directory and wraps a *flock.HeldError (matching flock.ErrHeld) naming
// the lock file and the holder: `orderly dlq purge` refuses to run beside
// a consumer. A holder that is exiting (killed, the kernel not yet done
// tearing it down) is waited for, up to 2 s, so that a consumer restarted
// at once after kill -9 gets the lock; a live holder is refused at once.
// ReadOnly opens take no lock and read what is complete. (Windows locks
// with LockFileEx; this is built there, not tested. See internal/flock.)
package deadletter
