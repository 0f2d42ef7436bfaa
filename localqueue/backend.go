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

// backend is where ready messages go when the memory chan is full: a FIFO
// of encoded envelopes with go-diskqueue's shape (diskqueue.Interface),
// plus where() for log lines. Reads are destructive: a record that has left
// ReadChan is gone from the backend, so the Queue owns it from then on.
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
}

var (
	_ backend = (*diskBackend)(nil)
	_ backend = (*memBackend)(nil)
)

// diskBackend is go-diskqueue v1.1.0 with its log lines routed to zap, the
// data file being read tracked for error messages, and, when SyncEvery is
// 1, Put made to wait for the fsync that follows the write.
type diskBackend struct {
	dq        diskqueue.Interface
	log       *zap.Logger
	pattern   string // data file glob, for where() before any file was opened
	syncEach  bool
	errs      atomic.Uint64
	readingMu sync.Mutex
	reading   string // guarded by readingMu
}

func newDiskBackend(o *Options, log *zap.Logger) (*diskBackend, error) {
	b := &diskBackend{
		log:      log,
		pattern:  filepath.Join(o.DataPath, o.Name+".diskqueue.*.dat"),
		syncEach: o.SyncEvery == 1,
	}
	if err := prepareMetadata(o.DataPath, o.Name, log); err != nil {
		return nil, fmt.Errorf("localqueue %s: %w", o.Name, err)
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
	if err := b.dq.Put(data); err != nil {
		return err
	}
	if b.syncEach {
		// ioLoop syncs at the top of the iteration after a write when
		// SyncEvery is reached, before it serves the next select, so a
		// depth request answered after our write is answered after that
		// fsync (data file and metadata).
		b.dq.Depth()
	}
	return nil
}

func (b *diskBackend) ReadChan() <-chan []byte { return b.dq.ReadChan() }
func (b *diskBackend) Depth() int64            { return b.dq.Depth() }
func (b *diskBackend) Empty() error            { return b.dq.Empty() }
func (b *diskBackend) Close() error            { return b.dq.Close() }
func (b *diskBackend) Delete() error           { return b.dq.Delete() }
func (b *diskBackend) errorCount() uint64      { return b.errs.Load() }

func (b *diskBackend) where() string {
	b.readingMu.Lock()
	defer b.readingMu.Unlock()
	if b.reading == "" {
		return b.pattern
	}
	return b.reading
}

// memBackend is the backend of a memory-only queue (DataPath ""): an
// unbounded FIFO owned by one goroutine, which starts on the first Put so
// that an idle queue costs no goroutine. Unlike nsqd's ephemeral channels
// it never drops a message while the queue is open.
type memBackend struct {
	readChan  chan []byte
	writeChan chan []byte
	depthChan chan int64
	emptyChan chan chan struct{}
	exitChan  chan struct{}
	wg        sync.WaitGroup

	stateMu sync.Mutex
	started bool // guarded by stateMu
	stopped bool // guarded by stateMu
}

func newMemBackend() *memBackend {
	return &memBackend{
		readChan:  make(chan []byte),
		writeChan: make(chan []byte),
		depthChan: make(chan int64),
		emptyChan: make(chan chan struct{}),
		exitChan:  make(chan struct{}),
	}
}

// running reports whether the loop is running, starting it if start is set.
func (b *memBackend) running(start bool) (bool, error) {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	if b.stopped {
		return false, ErrClosed
	}
	if !b.started && start {
		b.started = true
		b.wg.Add(1)
		go b.loop()
	}
	return b.started, nil
}

func (b *memBackend) Put(data []byte) error {
	if _, err := b.running(true); err != nil {
		return err
	}
	own := append([]byte(nil), data...)
	select {
	case b.writeChan <- own:
		return nil
	case <-b.exitChan:
		return ErrClosed
	}
}

func (b *memBackend) ReadChan() <-chan []byte { return b.readChan }

func (b *memBackend) Depth() int64 {
	if ok, _ := b.running(false); !ok {
		return 0
	}
	select {
	case d := <-b.depthChan:
		return d
	case <-b.exitChan:
		return 0
	}
}

func (b *memBackend) Empty() error {
	ok, err := b.running(false)
	if !ok {
		return err
	}
	done := make(chan struct{})
	select {
	case b.emptyChan <- done:
		<-done
		return nil
	case <-b.exitChan:
		return ErrClosed
	}
}

func (b *memBackend) Close() error {
	b.stateMu.Lock()
	if b.stopped {
		b.stateMu.Unlock()
		return ErrClosed
	}
	b.stopped = true
	b.stateMu.Unlock()
	close(b.exitChan)
	b.wg.Wait()
	return nil
}

func (b *memBackend) Delete() error      { return b.Close() }
func (b *memBackend) where() string      { return "memory" }
func (b *memBackend) errorCount() uint64 { return 0 }

func (b *memBackend) loop() {
	defer b.wg.Done()
	var items [][]byte
	head := 0
	for {
		var out chan []byte // nil (never ready) while there is nothing to read
		var next []byte
		if head < len(items) {
			out, next = b.readChan, items[head]
		}
		select {
		case out <- next:
			items[head] = nil
			head++
			switch {
			case head == len(items):
				items, head = items[:0], 0
			case head >= 1024 && head*2 >= len(items):
				n := copy(items, items[head:])
				clear(items[n:])
				items, head = items[:n], 0
			}
		case data := <-b.writeChan:
			items = append(items, data)
		case b.depthChan <- int64(len(items) - head):
		case done := <-b.emptyChan:
			items, head = nil, 0
			close(done)
		case <-b.exitChan:
			return
		}
	}
}
