package localqueue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/internal/pqueue"
	"go.uber.org/zap"
)

// Message is one delivery of a message. Treat it as read-only: the queue
// never changes a Message after handing it out, and Body may be shared with
// a later delivery of the same message.
type Message struct {
	// ID is assigned by Put and stays the same on every delivery.
	ID ID
	// Body is the payload given to Put.
	Body []byte
	// Timestamp is when Put accepted the message.
	Timestamp time.Time
	// Attempts counts deliveries, this one included: 1 on the first Get.
	// It survives Close/Open.
	Attempts int
	// Due is when the message became ready for delivery: the Put time, or
	// the end of the delay of PutDeferred or Requeue, or the moment a
	// timed-out delivery was handed back.
	Due time.Time
	// Deadline is when this delivery times out unless it is finished,
	// requeued or touched (a Touch moves the queue's deadline, not this
	// field).
	Deadline time.Time
}

// record is the queue's handle on a message: the Message it hands out and
// its place in the in-flight or deferred heap. A record handed out by Get is
// never reused; a redelivery gets a new record.
type record struct {
	m Message // m.Deadline minus MsgTimeout is when Get handed it out
	e pqueue.Entry[*record]
}

func newRecord(m Message) *record {
	r := &record{m: m}
	r.e.Value = r
	return r
}

// newReady is newRecord for a fresh message, built in place.
func newReady(id ID, body []byte, now, due time.Time) *record {
	r := new(record)
	r.m.ID = id
	r.m.Body = append([]byte(nil), body...)
	r.m.Timestamp = now
	r.m.Due = due
	r.e.Value = r
	return r
}

// Queue is a local at-least-once work queue: an nsqd channel with an
// acknowledgement layer. See the package documentation for the data flow
// and the durability guarantees. All methods are safe for concurrent use.
type Queue struct {
	opts     Options
	log      *zap.Logger
	now      func() time.Time
	memChan  chan *record // nil when MemQueueSize is 0
	backend  backend
	readChan <-chan []byte
	lock     *os.File // the DataPath lock, nil in memory mode
	idPrefix uint64
	idSeq    atomic.Uint64
	bufPool  sync.Pool // *[]byte envelope buffers
	// onBackend counts records written to the backend and not yet read
	// back (go-diskqueue's depth at Open to start with; never below 0).
	// While it is 0 Get takes the memory chan without a full select; a
	// count that is off (after a crash or a corrupt file) only costs that
	// shortcut or delays an uncounted record until the chan is empty.
	onBackend atomic.Int64

	// putMu is held shared by everything that adds to the memory chan or
	// the backend (Put, Requeue, the scanner), getMu by Get, which takes
	// from them; Close holds both exclusively, so when it flushes no
	// message is on its way in or between the backend and the in-flight
	// map. Two locks on their own cache lines keep producers and consumers
	// from contending.
	putMu    sync.RWMutex
	_        [64]byte
	getMu    sync.RWMutex
	_        [64]byte
	closing  atomic.Bool   // Close or Delete has begun
	closed   atomic.Bool   // set while Close holds putMu and getMu
	exitChan chan struct{} // closed when Close begins; wakes blocked Gets

	inFlightMu sync.Mutex
	inFlight   map[ID]*record         // guarded by inFlightMu
	inFlightPQ *pqueue.Queue[*record] // guarded by inFlightMu; by deadline

	deferredMu sync.Mutex
	deferredPQ *pqueue.Queue[*record] // guarded by deferredMu; by due time

	scanner        *Scanner
	ownScanner     bool
	scanActive     atomic.Bool // in scanner.active
	scanIndex      int         // guarded by scanner.activeMu
	scanRegistered bool        // guarded by scanner.activeMu

	stats counters
}

// Open opens (or creates) the queue described by opts. With a DataPath,
// messages left by an earlier Close (or crash) come back: ready ones in
// order, deferred ones at their due time.
func Open(opts Options) (*Queue, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	log := o.Logger.With(zap.String("queue", o.Name))
	if o.DataPath != "" {
		log = log.With(zap.String("path", o.DataPath))
	}
	q := &Queue{
		opts:       o,
		log:        log,
		now:        o.now,
		idPrefix:   rand.Uint64(),
		exitChan:   make(chan struct{}),
		inFlight:   make(map[ID]*record),
		inFlightPQ: pqueue.New[*record](0),
		deferredPQ: pqueue.New[*record](0),
	}
	if o.MemQueueSize > 0 {
		q.memChan = make(chan *record, o.MemQueueSize)
	}
	if o.DataPath != "" {
		if err := os.MkdirAll(o.DataPath, 0o755); err != nil {
			return nil, fmt.Errorf("localqueue %s: create DataPath: %w", o.Name, err)
		}
		lock, err := lockFile(o.DataPath, o.Name)
		if err != nil {
			return nil, err
		}
		q.lock = lock
		q.backend = newDiskBackend(&o, log)
	} else {
		q.backend = newMemBackend()
	}
	q.readChan = q.backend.ReadChan()
	q.onBackend.Store(q.backend.Depth())

	q.scanner = o.Scanner
	if q.scanner == nil {
		s, err := NewScanner(ScannerOptions{Logger: o.Logger})
		if err != nil {
			q.abort()
			return nil, err
		}
		q.scanner, q.ownScanner = s, true
	}
	if err := q.scanner.register(q); err != nil {
		q.abort()
		return nil, fmt.Errorf("localqueue %s: scanner: %w", o.Name, err)
	}
	log.Info("queue opened", zap.Int64("depth", q.backend.Depth()))
	return q, nil
}

// abort undoes a partly done Open.
func (q *Queue) abort() {
	q.backend.Close()
	if q.lock != nil {
		q.lock.Close()
	}
	if q.ownScanner {
		q.scanner.Close()
	}
}

// Name is Options.Name.
func (q *Queue) Name() string { return q.opts.Name }

func (q *Queue) newID() ID {
	var id ID
	binary.BigEndian.PutUint64(id[:8], q.idPrefix)
	binary.BigEndian.PutUint64(id[8:], q.idSeq.Add(1))
	return id
}

// Put adds a message that is ready now and returns its ID. body is copied.
// When Put returns nil the message is in the memory chan or written to the
// backend; see the package documentation for what survives a crash.
func (q *Queue) Put(body []byte) (ID, error) { return q.PutDeferred(body, 0) }

// PutDeferred adds a message that becomes ready after delay (0 is Put).
// The delay must be in [0, MaxReqTimeout].
func (q *Queue) PutDeferred(body []byte, delay time.Duration) (ID, error) {
	if len(body) > q.opts.MaxMsgSize {
		return ID{}, fmt.Errorf("%w: %d bytes, MaxMsgSize is %d", ErrTooLarge, len(body), q.opts.MaxMsgSize)
	}
	if err := q.checkDelay(delay); err != nil {
		return ID{}, err
	}
	q.putMu.RLock()
	defer q.putMu.RUnlock()
	if q.closed.Load() {
		return ID{}, ErrClosed
	}
	now := q.now()
	id := q.newID()
	switch {
	case delay > 0:
		q.pushDeferred(newReady(id, body, now, now.Add(delay)))
	case q.memChan != nil:
		r := newReady(id, body, now, now)
		select {
		case q.memChan <- r:
		default:
			if err := q.writeBackend(&r.m); err != nil {
				return ID{}, err
			}
		}
	default:
		m := Message{ID: id, Body: body, Timestamp: now, Due: now} // encoded, not retained
		if err := q.writeBackend(&m); err != nil {
			return ID{}, err
		}
	}
	q.stats.puts.Add(1)
	return id, nil
}

func (q *Queue) checkDelay(delay time.Duration) error {
	if delay < 0 || delay > q.opts.MaxReqTimeout {
		return fmt.Errorf("%w: %v, want 0 to MaxReqTimeout (%v)", ErrInvalidDelay, delay, q.opts.MaxReqTimeout)
	}
	return nil
}

// writeBackend encodes m and appends it to the backend.
func (q *Queue) writeBackend(m *Message) error {
	bp, _ := q.bufPool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	buf := appendEnvelope((*bp)[:0], m)
	err := q.backend.Put(buf)
	if cap(buf) <= 64<<10 {
		*bp = buf
		q.bufPool.Put(bp)
	}
	if err != nil {
		q.stats.writeErrors.Add(1)
		return fmt.Errorf("localqueue %s: write message %s: %w", q.opts.Name, m.ID, err)
	}
	q.onBackend.Add(1)
	return nil
}

// readBackend accounts for a record received from the backend.
func (q *Queue) readBackend() {
	for {
		v := q.onBackend.Load()
		if v <= 0 || q.onBackend.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// Get waits for a ready message, puts it in flight with a deadline of now
// plus MsgTimeout, and returns it. It returns ctx.Err() when ctx ends and
// ErrClosed when the queue closes. Call Finish, Requeue or Touch with its
// ID before the deadline.
func (q *Queue) Get(ctx context.Context) (*Message, error) {
	q.getMu.RLock()
	defer q.getMu.RUnlock()
	for {
		if q.closed.Load() {
			return nil, ErrClosed
		}
		if q.onBackend.Load() == 0 {
			// Nothing of ours in the backend: the memory chan alone, without
			// a full select.
			select {
			case r := <-q.memChan:
				if q.startInFlight(r, q.now()) {
					return &r.m, nil
				}
				continue
			default:
			}
		}
		var r *record
		select {
		case r = <-q.memChan:
		case b := <-q.readChan:
			q.readBackend()
			r = q.fromBackend(b)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.exitChan:
			return nil, ErrClosed
		}
		if r != nil && q.startInFlight(r, q.now()) {
			return &r.m, nil
		}
	}
}

// fromBackend decodes a record read from the backend. A record that does
// not decode is counted, logged with its data file and dropped; one that
// is not due yet goes to the deferred heap. Either way it returns nil.
func (q *Queue) fromBackend(b []byte) *record {
	r := new(record)
	if err := decodeEnvelope(b, &r.m); err != nil {
		q.stats.decodeErrors.Add(1)
		q.log.Error("dropping a record that does not decode", zap.String("file", q.backend.where()), zap.Int("bytes", len(b)), zap.Error(err))
		return nil
	}
	r.e.Value = r
	if r.m.Due.After(r.m.Timestamp) && r.m.Due.After(q.now()) { // only deferred records need the clock
		q.pushDeferred(r)
		return nil
	}
	return r
}

// startInFlight records r as in flight. It reports false for a duplicate:
// a record whose ID is already in flight (go-diskqueue can replay records
// after a crash), which is dropped because the delivery in flight covers it.
func (q *Queue) startInFlight(r *record, now time.Time) bool {
	r.m.Attempts++
	r.m.Deadline = now.Add(q.opts.MsgTimeout)
	r.e.Deadline = r.m.Deadline
	q.inFlightMu.Lock()
	if _, dup := q.inFlight[r.m.ID]; dup {
		q.inFlightMu.Unlock()
		q.stats.duplicates.Add(1)
		q.log.Debug("dropping a duplicate of a message in flight", zap.Stringer("id", r.m.ID))
		return false
	}
	q.inFlight[r.m.ID] = r
	q.inFlightPQ.Push(&r.e)
	q.inFlightMu.Unlock()
	q.scanner.activate(q)
	q.stats.delivered.Add(1)
	return true
}

func (q *Queue) pushDeferred(r *record) {
	r.e.Deadline = r.m.Due
	q.deferredMu.Lock()
	q.deferredPQ.Push(&r.e)
	q.deferredMu.Unlock()
	q.scanner.activate(q)
}

// putReady hands r to the memory chan or the backend. It never loses r: if
// the backend write fails, r is deferred for retryDelay and tried again.
func (q *Queue) putReady(r *record) {
	select {
	case q.memChan <- r:
		return
	default:
	}
	if err := q.writeBackend(&r.m); err != nil {
		q.log.Error("requeue failed, retrying later", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts), zap.Error(err))
		r.m.Due = q.now().Add(retryDelay)
		q.pushDeferred(r)
	}
}

// retryDelay is how long a message waits after a failed backend write.
const retryDelay = time.Second

// Depth is the number of ready messages: in the memory chan plus in the
// backend. In-flight and deferred messages are not counted (see Stats).
// After a crash go-diskqueue's count can be off until the queue drains.
func (q *Queue) Depth() int64 {
	return int64(len(q.memChan)) + q.backend.Depth()
}

// Empty drops every message: ready, in flight and deferred.
func (q *Queue) Empty() error {
	q.putMu.RLock()
	defer q.putMu.RUnlock()
	if q.closed.Load() {
		return ErrClosed
	}
drain:
	for range cap(q.memChan) { // bounded: Puts may go on meanwhile
		select {
		case <-q.memChan:
		default:
			break drain
		}
	}
	q.inFlightMu.Lock()
	clear(q.inFlight)
	q.inFlightPQ = pqueue.New[*record](0)
	q.inFlightMu.Unlock()
	q.deferredMu.Lock()
	q.deferredPQ = pqueue.New[*record](0)
	q.deferredMu.Unlock()
	if err := q.backend.Empty(); err != nil {
		return fmt.Errorf("localqueue %s: empty backend: %w", q.opts.Name, err)
	}
	q.onBackend.Store(0)
	q.log.Info("queue emptied")
	return nil
}

// Close stops the queue. With a DataPath it first writes the memory chan,
// the in-flight messages (as ready, attempts kept) and the deferred
// messages (due time kept) to disk and syncs, so that Open restores all of
// them. In memory mode what is left is discarded (and counted in the log).
// Blocked Gets return ErrClosed. A second Close returns ErrClosed.
func (q *Queue) Close() error { return q.shutdown(false) }

// Delete stops the queue and removes its messages and files (data files
// that go-diskqueue renamed to .bad are kept for inspection).
func (q *Queue) Delete() error { return q.shutdown(true) }

func (q *Queue) shutdown(deleting bool) error {
	if !q.closing.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(q.exitChan)
	q.getMu.Lock()
	q.putMu.Lock()
	q.closed.Store(true)
	q.putMu.Unlock()
	q.getMu.Unlock()
	q.scanner.unregister(q)

	var errs []error
	switch {
	case deleting:
		if err := q.backend.Empty(); err != nil {
			errs = append(errs, fmt.Errorf("empty backend: %w", err))
		}
		if err := q.backend.Delete(); err != nil {
			errs = append(errs, fmt.Errorf("delete backend: %w", err))
		}
		if q.lock != nil {
			os.Remove(q.lock.Name())
		}
		q.log.Info("queue deleted")
	case q.opts.DataPath == "":
		left := len(q.memChan) + q.inFlightLen() + q.deferredLen() + int(q.backend.Depth())
		if left > 0 {
			q.log.Warn("memory-only queue closed with messages left; they are discarded", zap.Int("messages", left))
		}
		errs = append(errs, q.backend.Close())
	default:
		if err := q.flush(); err != nil {
			errs = append(errs, err)
		}
		if err := q.backend.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close backend: %w", err))
		}
		q.log.Info("queue closed")
	}
	if q.lock != nil {
		q.lock.Close()
	}
	if q.ownScanner {
		q.scanner.Close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("localqueue %s: %w", q.opts.Name, err)
	}
	return nil
}

// flush writes everything held in memory to the backend. Only Close calls
// it, after closed is set, so nothing else touches the queue's state.
func (q *Queue) flush() error {
	now := q.now()
	var failed int
	write := func(m *Message) {
		if err := q.writeBackend(m); err != nil {
			failed++
			q.log.Error("message lost at close", zap.Stringer("id", m.ID), zap.Int("attempts", m.Attempts), zap.Error(err))
		}
	}
	var mem, inFlight, deferred int
	for len(q.memChan) > 0 {
		r := <-q.memChan
		write(&r.m)
		mem++
	}
	q.inFlightMu.Lock()
	for e := q.inFlightPQ.Pop(); e != nil; e = q.inFlightPQ.Pop() {
		m := e.Value.m
		m.Due, m.Deadline = now, time.Time{}
		write(&m)
		inFlight++
	}
	clear(q.inFlight)
	q.inFlightMu.Unlock()
	q.deferredMu.Lock()
	for e := q.deferredPQ.Pop(); e != nil; e = q.deferredPQ.Pop() {
		write(&e.Value.m)
		deferred++
	}
	q.deferredMu.Unlock()
	q.log.Debug("flushed to disk", zap.Int("memory", mem), zap.Int("in_flight", inFlight), zap.Int("deferred", deferred))
	if failed > 0 {
		return fmt.Errorf("%d messages could not be written at close", failed)
	}
	return nil
}
