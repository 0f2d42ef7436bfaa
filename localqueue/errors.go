package localqueue

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps one of these (or a
// context error from Get), so callers branch with errors.Is.
var (
	// ErrClosed is returned by every operation on a queue (or scanner)
	// after Close or Delete.
	ErrClosed = errors.New("localqueue: closed")
	// ErrTooLarge is returned by Put and PutDeferred for a body longer than
	// Options.MaxMsgSize.
	ErrTooLarge = errors.New("localqueue: message too large")
	// ErrNotInFlight is returned by Finish, Requeue and Touch for an ID that
	// is not in flight: never delivered, already finished or requeued, or
	// timed out and handed back to the queue. A late Finish after a timeout
	// is rejected this way until the message is redelivered (then it acts
	// on the new delivery: see Finish).
	ErrNotInFlight = errors.New("localqueue: message not in flight")
	// ErrTimedOut is returned by Finish, Requeue and Touch for a message
	// whose in-flight deadline has passed but which the scanner has not yet
	// redelivered. It wraps ErrNotInFlight: the message will be redelivered.
	ErrTimedOut = fmt.Errorf("%w: deadline passed", ErrNotInFlight)
	// ErrInvalidDelay is returned by PutDeferred and Requeue for a negative
	// delay or one above Options.MaxReqTimeout.
	ErrInvalidDelay = errors.New("localqueue: invalid delay")
	// ErrOptions wraps every error Open and NewScanner return for a bad
	// option; the message names the field.
	ErrOptions = errors.New("localqueue: invalid options")
	// ErrLocked is returned by Open when another Queue (in this process or
	// another) has the same Name open on the same DataPath; the message
	// names the lock file (<Name>.lock) and the holder: "process <pid>",
	// or "another process" where the ID is unknown (on Windows). A process
	// that is exiting, killed but not yet torn down by the kernel, is
	// waited for, up to 2 s, on Unix. On systems with neither flock nor
	// LockFileEx (js, wasip1) Open takes no lock and never returns
	// ErrLocked: two Queues on the same files must be prevented by the
	// caller.
	ErrLocked = errors.New("localqueue: queue is open elsewhere")
	// ErrNotSynced is returned by Put with a DataPath and SyncEvery 1 when
	// the message went to go-diskqueue and the fsync that must follow the
	// write, or one right after it, failed: the message is stored and will
	// be delivered, but may not survive a power loss. A caller that puts it
	// again may see it twice (at-least-once). Stats.BackendErrors counts
	// the failed fsync.
	ErrNotSynced = errors.New("localqueue: written but not synced")
	// ErrCorrupt wraps envelope decode errors (bad version, length or
	// checksum). Get never returns it: corrupt records are counted in
	// Stats.DecodeErrors, logged with the data file, and skipped.
	ErrCorrupt = errors.New("localqueue: corrupt envelope")
	// ErrCorruptJournal wraps journal decode errors (bad header, length,
	// checksum, version or kind, or a truncated record). Open never
	// returns it: it restores the good records, logs the damage with the
	// journal's path, counts it in Stats.JournalCorrupt and keeps a copy of
	// the damaged file as <path>.bad.
	ErrCorruptJournal = errors.New("localqueue: corrupt journal")
	// errTruncated marks a journal record cut short by the end of the file
	// (a torn write), as opposed to damage in the middle.
	errTruncated = fmt.Errorf("%w: truncated record", ErrCorruptJournal)
)

// ID identifies a message. It is assigned by Put, stays the same on every
// redelivery and across Close/Open, and is unique per queue: the first
// eight bytes are random per Open, the last eight count up.
type ID [16]byte

// String is the ID in lowercase hex (32 characters).
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText implements encoding.TextMarshaler (hex, as String).
func (id ID) MarshalText() ([]byte, error) {
	b := make([]byte, hex.EncodedLen(len(id)))
	hex.Encode(b, id[:])
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler (hex, as String).
func (id *ID) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(id) {
		return fmt.Errorf("localqueue: ID %q: want %d hex digits", b, 2*len(id))
	}
	var tmp ID
	if _, err := hex.Decode(tmp[:], b); err != nil {
		return fmt.Errorf("localqueue: ID %q: %w", b, err)
	}
	*id = tmp
	return nil
}
