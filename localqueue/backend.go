package localqueue

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	diskqueue "github.com/nsqio/go-diskqueue"
	"go.uber.org/zap"
)

// backend is where ready messages of a queue with a DataPath go when the
// memory chan is full: a FIFO of encoded envelopes with go-diskqueue's
// shape (diskqueue.Interface), plus where() for log lines. Reads are
// destructive: a record that has left ReadChan is gone from the backend,
// so the Queue owns it from then on. (A memory-only queue keeps its
// overflow as records, in a memFIFO: nothing to encode.)
type backend interface {
	// Put appends data. data is not retained after Put returns.
	Put(data []byte) error
	// ReadChan delivers records in FIFO order; it is unbuffered.
	ReadChan() <-chan []byte
	// Depth is the number of records not yet read.
	Depth() int64
	// Empty drops every record not yet read.
	Empty() error
	// Close stops the backend, keeping its records (on disk).
	Close() error
	// Delete stops the backend. Call Empty first to drop the records.
	Delete() error
	// where names the data file the most recent record came from, for
	// log lines about a record that did not decode.
	where() string
	// errorCount is the number of errors the backend has reported itself
	// (corrupt or unreadable files, failed syncs).
	errorCount() uint64
	// metadataCorrupt is 1 if Open found the backend's metadata damaged
	// and rebuilt it from the data files, else 0.
	metadataCorrupt() uint64
}

var _ backend = (*diskBackend)(nil)

// diskBackend is go-diskqueue v1.1.0 with its log lines routed to zap, the
// data file being read tracked for error messages, and, when SyncEvery is
// 1, Put made to wait for the fsync that follows the write.
type diskBackend struct {
	dq        diskqueue.Interface
	log       *zap.Logger
	pattern   string // data file glob, for where() before any file was opened
	syncEach  bool
	dataPath  string
	metaBad   uint64 // 1: prepareMetadata rebuilt damaged metadata; set before use
	errs      atomic.Uint64
	syncFails atomic.Uint64 // go-diskqueue's "failed to sync" errors
	readingMu sync.Mutex
	reading   string // guarded by readingMu
}

func newDiskBackend(o *Options, log *zap.Logger) (*diskBackend, error) {
	b := &diskBackend{
		log:      log,
		pattern:  filepath.Join(o.DataPath, o.Name+".diskqueue.*.dat"),
		syncEach: o.SyncEvery == 1,
		dataPath: o.DataPath,
	}
	damaged, err := prepareMetadata(o.DataPath, o.Name, 4+envelopeOverhead, log)
	if err != nil {
		return nil, fmt.Errorf("localqueue %s: %w", o.Name, err)
	}
	if damaged {
		b.metaBad = 1
	}
	b.dq = diskqueue.New(o.Name, o.DataPath, o.MaxBytesPerFile,
		int32(envelopeOverhead), int32(envelopeSize(o.MaxMsgSize)),
		o.SyncEvery, o.SyncTimeout, b.logf)
	return b, nil
}

// logf adapts go-diskqueue's printf logging. File opens are debug lines;
// warnings and errors (a corrupt or truncated file is renamed to .bad and
// skipped, with the file named in the text) keep their level and are
// counted.
func (b *diskBackend) logf(lvl diskqueue.LogLevel, f string, args ...any) {
	if strings.Contains(f, "readOne() opened") && len(args) == 2 {
		if fn, ok := args[1].(string); ok {
			b.readingMu.Lock()
			b.reading = fn
			b.readingMu.Unlock()
		}
	}
	if lvl >= diskqueue.ERROR && strings.Contains(f, "failed to sync") {
		b.syncFails.Add(1)
	}
	msg := fmt.Sprintf(f, args...)
	switch lvl {
	case diskqueue.DEBUG, diskqueue.INFO:
		b.log.Debug(msg)
	case diskqueue.WARN:
		b.log.Warn(msg)
	default:
		b.errs.Add(1)
		b.log.Error(msg)
	}
}

func (b *diskBackend) Put(data []byte) error {
	fails := b.syncFails.Load()
	if err := b.dq.Put(data); err != nil {
		return err
	}
	if b.syncEach {
		// ioLoop syncs at the top of the iteration after a write when
		// SyncEvery is reached, before it serves the next select, so a
		// depth request answered after our write is answered after that
		// fsync (data file and metadata). go-diskqueue only logs a
		// failed fsync: one logged between our write and that answer
		// means ours failed, or one after it did (another Put's, or a
		// read's), which errs towards reporting a write unsynced.
		b.dq.Depth()
		if b.syncFails.Load() != fails {
			return fmt.Errorf("%w: go-diskqueue's fsync in %s after the write failed (logged)", ErrNotSynced, b.dataPath)
		}
	}
	return nil
}

func (b *diskBackend) ReadChan() <-chan []byte { return b.dq.ReadChan() }
func (b *diskBackend) Depth() int64            { return b.dq.Depth() }
func (b *diskBackend) Empty() error            { return b.dq.Empty() }
func (b *diskBackend) Close() error            { return b.dq.Close() }
func (b *diskBackend) Delete() error           { return b.dq.Delete() }
func (b *diskBackend) errorCount() uint64      { return b.errs.Load() }
func (b *diskBackend) metadataCorrupt() uint64 { return b.metaBad }

func (b *diskBackend) where() string {
	b.readingMu.Lock()
	defer b.readingMu.Unlock()
	if b.reading == "" {
		return b.pattern
	}
	return b.reading
}
