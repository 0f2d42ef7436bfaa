package localqueue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	diskqueue "github.com/nsqio/go-diskqueue"
	"go.uber.org/zap"

	"github.com/orderly-go/orderly/internal/lograte"
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
	// damageCount is the number of those errors that may have lost
	// records: damaged or unreadable data, which go-diskqueue skips (see
	// upkeepError for the others).
	damageCount() uint64
	// metadataCorrupt is 1 if Open found the backend's metadata damaged
	// and rebuilt it from the data files, else 0.
	metadataCorrupt() uint64
	// afterRead is called after each record received from ReadChan.
	afterRead()
	// reusedMarker is the nonce of the dedup marker that Open found alone
	// in the write file, which go-diskqueue goes on writing to (see
	// ownWriteFile), or 0.
	reusedMarker() uint64
}

var _ backend = (*diskBackend)(nil)

// diskBackend is go-diskqueue v1.1.0 with its log lines routed to zap, the
// data file being read tracked for error messages, and, when SyncEvery is
// 1, Put made to wait for the fsync that follows the write.
type diskBackend struct {
	dq          diskqueue.Interface
	name        string
	log         *zap.Logger
	pattern     string // data file glob, for where() before any file was opened
	syncEach    bool
	dataPath    string
	metaBad     uint64 // 1: prepareMetadata rebuilt damaged metadata; set before use
	reusedNonce uint64 // ownWriteFile's marker nonce; set before use
	onDamage    func() // called (on go-diskqueue's goroutine) after each error counted in damage
	errs        atomic.Uint64
	damage      atomic.Uint64 // the errors of errs that may have lost records
	syncFails   atomic.Uint64 // go-diskqueue's "failed to sync" errors
	syncLog     lograte.Limit // their log lines
	rolled      rolledFiles
	readingMu   sync.Mutex
	reading     string // guarded by readingMu
}

// newDiskBackend opens go-diskqueue on o.DataPath, its metadata repaired
// (prepareMetadata) and its writes moved to a data file of their own
// (ownWriteFile). onDamage is called on go-diskqueue's goroutine after
// each error it reports that may have lost records (see damageCount); nil
// for none.
func newDiskBackend(o *Options, log *zap.Logger, onDamage func()) (*diskBackend, error) {
	b := &diskBackend{
		name:     o.Name,
		log:      log,
		pattern:  filepath.Join(o.DataPath, o.Name+".diskqueue.*.dat"),
		syncEach: o.SyncEvery == 1,
		dataPath: o.DataPath,
		onDamage: onDamage,
	}
	damaged, err := prepareMetadata(o.DataPath, o.Name, 4+envelopeOverhead, log)
	if err != nil {
		return nil, fmt.Errorf("localqueue %s: %w", o.Name, err)
	}
	if damaged {
		b.metaBad = 1
	}
	if b.reusedNonce, err = ownWriteFile(o.DataPath, o.Name); err != nil {
		return nil, fmt.Errorf("localqueue %s: %w", o.Name, err)
	}
	b.removeMetaTemps() // an earlier run's
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
	if b.rolled.note(b.log, f, args) {
		return
	}
	msg := fmt.Sprintf(f, args...)
	if lvl >= diskqueue.ERROR && strings.Contains(f, "failed to sync") {
		// Every write fails so on a full disk: a line a second. go-diskqueue
		// leaves behind the temporary file of metadata it failed to write,
		// named in the error.
		b.syncFails.Add(1)
		b.counted(false)
		b.syncLog.Error(b.log, msg)
		if len(args) == 2 {
			err, _ := args[1].(error)
			b.removeMetaTemp(err)
		}
		return
	}
	switch lvl {
	case diskqueue.DEBUG, diskqueue.INFO:
		b.log.Debug(msg)
	case diskqueue.WARN:
		b.log.Warn(msg)
	default:
		b.counted(!upkeepError(f))
		b.log.Error(msg)
	}
}

// counted counts an error go-diskqueue reported, and tells onDamage of
// one that may have lost records.
func (b *diskBackend) counted(damage bool) {
	b.errs.Add(1)
	if !damage {
		return
	}
	b.damage.Add(1)
	if b.onDamage != nil {
		b.onDamage()
	}
}

// upkeepError reports whether go-diskqueue's error line of format f is
// about the upkeep of its files, which loses no record: a failed removal
// of a file it is done with (a failed sync, the other such error, is
// handled before: logf). Any other error may have cost records: a file it
// could not read and skipped, or positions that do not fit the data (its
// lines say "corruption" or "data loss").
func upkeepError(f string) bool {
	return strings.Contains(strings.ToLower(f), "failed to remove")
}

// removeMetaTemps removes the temporary files go-diskqueue leaves behind
// when writing its metadata fails (each failure names a new one, so on a
// full disk they would pile up, an inode each). Call it only while
// go-diskqueue writes none: before it starts, or from its ioLoop.
func (b *diskBackend) removeMetaTemps() {
	temps, _ := filepath.Glob(filepath.Join(b.dataPath, b.name+".diskqueue.meta.dat.*.tmp"))
	for _, f := range temps {
		os.Remove(f)
	}
}

// removeMetaTemp removes the temporary metadata file a failed sync names
// (a failed write names it in an *fs.PathError, a failed rename in an
// *os.LinkError), if it is one.
func (b *diskBackend) removeMetaTemp(err error) {
	var name string
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		name = pe.Path
	case errors.As(err, &le):
		name = le.Old
	}
	if filepath.Dir(name) == filepath.Clean(b.dataPath) && strings.HasPrefix(filepath.Base(name), b.name+".diskqueue.meta.dat.") && strings.HasSuffix(name, ".tmp") {
		os.Remove(name)
	}
}

func (b *diskBackend) Put(data []byte) error {
	fails := b.syncFails.Load()
	err := b.dq.Put(data)
	b.rolled.remove()
	if err != nil {
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
func (b *diskBackend) afterRead()              { b.rolled.remove() }
func (b *diskBackend) Depth() int64            { return b.dq.Depth() }
func (b *diskBackend) Empty() error            { return b.dq.Empty() }
func (b *diskBackend) Close() error {
	err := b.dq.Close()
	b.rolled.remove()
	b.removeMetaTemps() // go-diskqueue's last sync, at Close, may have failed too
	return err
}
func (b *diskBackend) Delete() error {
	err := b.dq.Delete()
	b.rolled.remove()
	return err
}
func (b *diskBackend) errorCount() uint64      { return b.errs.Load() }
func (b *diskBackend) damageCount() uint64     { return b.damage.Load() }
func (b *diskBackend) metadataCorrupt() uint64 { return b.metaBad }
func (b *diskBackend) reusedMarker() uint64    { return b.reusedNonce }

func (b *diskBackend) where() string {
	b.readingMu.Lock()
	defer b.readingMu.Unlock()
	if b.reading == "" {
		return b.pattern
	}
	return b.reading
}
