package localqueue

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Defaults for zero Options fields (nsqd's defaults where nsqd has one).
const (
	DefaultMaxBytesPerFile = 100 << 20
	DefaultSyncEvery       = 2500
	DefaultSyncTimeout     = 2 * time.Second
	DefaultMaxMsgSize      = 1 << 20
	DefaultMsgTimeout      = 60 * time.Second
	DefaultMaxMsgTimeout   = 15 * time.Minute
	DefaultMaxReqTimeout   = time.Hour
	// DefaultMemQueueSize is nsqd's default memory chan size. It is not
	// applied automatically: MemQueueSize 0 means "every message through
	// the backend".
	DefaultMemQueueSize = 10000
	maxNameLen          = 64
)

// Options configures a Queue. Zero fields take the documented defaults;
// Open validates the result in one place and names the first bad field.
type Options struct {
	// Name identifies the queue in logs and names its files
	// (<Name>.diskqueue.*.dat, <Name>.journal, <Name>.lock). Required: 1-64
	// characters of [A-Za-z0-9._-].
	Name string
	// DataPath is the directory for the queue's files, created if missing:
	// go-diskqueue's data and metadata files, and the journal that keeps
	// in-flight and deferred messages across a crash (see the package
	// documentation; it cannot be turned off). "" means memory only (like
	// an nsqd #ephemeral channel): nothing touches disk and Close discards
	// what is left.
	DataPath string
	// MemQueueSize is the capacity of the memory chan that ready messages
	// take before they overflow to the backend. 0 (the zero value) means
	// every message goes through the backend: through disk when DataPath is
	// set, which is what Put durability needs, and the only setting with a
	// DataPath under which Get hands ready messages out in the order they
	// were put (with a memory chan beside go-diskqueue, Get takes from
	// whichever has one, as nsqd does). DefaultMemQueueSize (10000) is
	// nsqd's choice for speed.
	MemQueueSize int
	// MaxBytesPerFile is the size at which go-diskqueue starts a new data
	// file. Default 100 MiB. Must hold at least one maximal envelope.
	MaxBytesPerFile int64
	// SyncEvery is how many backend writes and reads go between fsyncs of
	// go-diskqueue, and how many journal records go between fsyncs of the
	// journal. Default 2500. 1 makes Put wait for the fsync of its own
	// write, and every journaled operation for the fsync of its record.
	SyncEvery int64
	// SyncTimeout is the longest a written record (backend or journal)
	// waits for an fsync when the queue is active. Default 2s.
	SyncTimeout time.Duration
	// MaxMsgSize is the largest body Put accepts. Default 1 MiB.
	MaxMsgSize int
	// MsgTimeout is how long a message stays in flight after Get (or a
	// Touch) before it is redelivered. Default 60s.
	MsgTimeout time.Duration
	// MaxMsgTimeout caps how far Touch can extend a delivery, counted from
	// Get. Default 15m; must be at least MsgTimeout.
	MaxMsgTimeout time.Duration
	// MaxReqTimeout is the longest delay PutDeferred and Requeue accept.
	// Default 1h.
	MaxReqTimeout time.Duration
	// MaxAttempts is the most deliveries a message gets: one whose
	// MaxAttempts-th delivery ends without Finish is dead-lettered instead
	// of delivered again. The rule is the same whatever MemQueueSize and
	// across restarts: every Get counts in Attempts, Attempts survives
	// Close and crashes, and a delivery that Close or a crash cut short
	// counts as one that failed, so a message in flight on its
	// MaxAttempts-th delivery then is dead-lettered by the next Open (a
	// message that crashes its consumer dies after MaxAttempts crashes).
	// A message that is memory-only at a crash is lost with its count (see
	// Durability in the package documentation); one that DeadLetter
	// refuses is delivered again. 0 (default) means unlimited. When set,
	// OnDead or DeadLetter is required so that nothing is dropped
	// silently.
	MaxAttempts int
	// OnDead, when set, is called with each dead message (after it was put
	// into DeadLetter, if that is set too); messages that time out in one
	// scan, in deadline order. It runs on a scanner worker, on the
	// goroutine that called Requeue, or in Open (for a MaxAttempts-th
	// delivery that Close or a crash cut short), and must not block for
	// long. No lock of this queue is held while it runs, so it may call
	// this queue's methods; Close and Delete too, unless the queue has a
	// private scanner (Scanner nil), whose Close waits for the worker that
	// may be running OnDead. Without DeadLetter, OnDead is where dead
	// messages go: with a DataPath the queue lets go of one (its journal
	// FIN) only after OnDead returned, so a crash while it runs brings the
	// message back and OnDead sees it again (at-least-once). So does a
	// Close that comes while OnDead runs on a message the journal holds
	// (one that left the backend; see Durability) on a goroutine Close does
	// not wait for (a Requeue's, or a shared scanner's worker): the FIN is
	// then not written, and the next Open dead-letters the message again.
	OnDead func(m *Message)
	// DeadLetter, when set, receives each dead message with its ID,
	// Timestamp and Attempts. If that Put fails the message is redelivered
	// here instead, so nothing is lost. With a DataPath, DeadLetter must
	// have a DataPath too (Open rejects a memory-only one): the dead
	// message is written straight to its backend, never to its memory
	// chan, before this queue lets go of it, so that a crash leaves it in
	// one queue or the other (or both). For power loss, give DeadLetter
	// SyncEvery 1 (see Durability in the package documentation).
	DeadLetter *Queue
	// Scanner times out in-flight messages and releases deferred ones. Many
	// queues should share one. nil means a private scanner with default
	// ScannerOptions, closed by Close.
	Scanner *Scanner
	// Logger receives errors and lifecycle events with queue, path, id and
	// attempts fields. Default zap.NewNop().
	Logger *zap.Logger

	// journalCompactBytes is the journal size below which it is never
	// compacted. Default DefaultJournalCompactBytes; tests make it small.
	journalCompactBytes int64
	// journalNoMap makes the journal append with pwrite(2) rather than
	// through a memory mapping, as on systems without one (tests).
	journalNoMap bool
	// noJournal leaves the journal out, as before it existed: in-flight
	// and deferred messages are then lost by a crash. Only the throughput
	// measurements set it, to report what the journal costs; it is not an
	// option users can set.
	noJournal bool
	// now is the clock; tests inject one. Default: the wall clock at Open
	// advanced by the monotonic clock: one clock read per call, and times
	// without a monotonic reading, which are cheaper to add and compare.
	now func() time.Time
}

// withDefaults returns a copy of o with zero fields set.
func (o Options) withDefaults() Options {
	if o.MaxBytesPerFile == 0 {
		o.MaxBytesPerFile = DefaultMaxBytesPerFile
	}
	if o.SyncEvery == 0 {
		o.SyncEvery = DefaultSyncEvery
	}
	if o.SyncTimeout == 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.MaxMsgSize == 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.MsgTimeout == 0 {
		o.MsgTimeout = DefaultMsgTimeout
	}
	if o.MaxMsgTimeout == 0 {
		o.MaxMsgTimeout = max(DefaultMaxMsgTimeout, o.MsgTimeout)
	}
	if o.MaxReqTimeout == 0 {
		o.MaxReqTimeout = DefaultMaxReqTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.journalCompactBytes == 0 {
		o.journalCompactBytes = DefaultJournalCompactBytes
	}
	if o.now == nil {
		epoch := time.Now()
		wall := epoch.UnixNano()
		o.now = func() time.Time { return time.Unix(0, wall+int64(time.Since(epoch))) }
	}
	return o
}

// validate reports the first invalid field of a defaulted Options.
func (o Options) validate() error {
	switch {
	case !validName(o.Name):
		return optionError("Name", "%q: want 1-%d characters of [A-Za-z0-9._-]", o.Name, maxNameLen)
	case o.MemQueueSize < 0:
		return optionError("MemQueueSize", "is %d: want 0 or more", o.MemQueueSize)
	case o.SyncEvery < 0:
		return optionError("SyncEvery", "is %d: want 1 or more (0 for the default)", o.SyncEvery)
	case o.SyncTimeout < 0:
		return optionError("SyncTimeout", "is %v: want a positive duration", o.SyncTimeout)
	case o.MaxMsgSize < 0 || o.MaxMsgSize > 1<<30:
		return optionError("MaxMsgSize", "is %d: want 1 byte to 1 GiB", o.MaxMsgSize)
	case o.MaxBytesPerFile < int64(envelopeSize(o.MaxMsgSize))+4:
		return optionError("MaxBytesPerFile", "is %d: want at least %d to hold one MaxMsgSize message", o.MaxBytesPerFile, envelopeSize(o.MaxMsgSize)+4)
	case o.MsgTimeout < 0:
		return optionError("MsgTimeout", "is %v: want a positive duration", o.MsgTimeout)
	case o.MaxMsgTimeout < o.MsgTimeout:
		return optionError("MaxMsgTimeout", "is %v: want at least MsgTimeout (%v)", o.MaxMsgTimeout, o.MsgTimeout)
	case o.MaxReqTimeout < 0:
		return optionError("MaxReqTimeout", "is %v: want a positive duration", o.MaxReqTimeout)
	case o.MaxAttempts < 0:
		return optionError("MaxAttempts", "is %d: want 0 (unlimited) or more", o.MaxAttempts)
	case o.MaxAttempts > 0 && o.OnDead == nil && o.DeadLetter == nil:
		return optionError("MaxAttempts", "is %d but neither OnDead nor DeadLetter is set: dead messages would be dropped", o.MaxAttempts)
	case o.DataPath != "" && o.DeadLetter != nil && o.DeadLetter.opts.DataPath == "":
		return optionError("DeadLetter", "is the memory-only queue %q (no DataPath) but DataPath is set: a crash would lose the dead letters it holds; give it a DataPath too", o.DeadLetter.Name())
	}
	return nil
}

// optionError is the error for an invalid option: ErrOptions, the field,
// and what is wrong with it.
func optionError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrOptions, field, fmt.Sprintf(format, args...))
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
