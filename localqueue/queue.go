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

	"github.com/orderly-go/orderly/internal/lograte"
	"github.com/orderly-go/orderly/internal/pqueue"
	"go.uber.org/zap"
)

// Queue is a local at-least-once work queue: an nsqd channel with an
// acknowledgement layer. See the package documentation for the data flow
// and the durability guarantees. All methods are safe for concurrent use.
type Queue struct {
	opts     Options
	log      *zap.Logger
	now      func() time.Time
	memChan  chan *record // nil when MemQueueSize is 0
	mem      *memFIFO     // the overflow of a memory-only queue; nil with a DataPath
	backend  backend      // go-diskqueue, with a DataPath; nil in memory mode
	readChan <-chan []byte
	lock     *os.File // the DataPath lock, nil in memory mode
	journal  *journal // the record of journaled messages, nil in memory mode
	idPrefix uint64
	idSeq    atomic.Uint64
	bufPool  sync.Pool // *[]byte envelope buffers
	// onBackend counts records written to the backend and not yet read
	// back (go-diskqueue's depth at Open to start with; never below 0).
	// While it is 0 Get takes the memory chan without a full select; a
	// count that is off (after a crash or a corrupt file) only costs that
	// shortcut or delays an uncounted record until the chan is empty.
	onBackend atomic.Int64
	// marker is set while the dedup marker this Open wrote to the backend
	// (with markerNonce) has not been read by Get; Depth leaves it out.
	marker      atomic.Bool
	markerNonce uint64
	// markerDamage is 1 more than the backend's damage count when Open
	// chose its dedup marker, and 0 until then: damage counted beyond it
	// may have taken the marker with it (see damagedSinceMarker). Errors
	// that lose no record (a failed sync) are not damage.
	markerDamage atomic.Uint64
	writer       backendWriter
	// journalErrLog holds back the lines of journal writes that failed
	// after the first each second: on a full disk every one fails
	// (Stats.JournalErrors counts them all).
	journalErrLog lograte.Limit
	// requeueErrLog does the same for messages due again that the backend
	// cannot take (each is tried again after retryDelay).
	requeueErrLog lograte.Limit
	// fillers counts the fillers written to the backend and not yet read
	// (see backendWriter); Depth leaves them out. It starts at 0 at Open:
	// an earlier run's unread filler counts in Depth until Get passes it.
	fillers atomic.Int64
	// restored lists the ready messages Open restored from the journal
	// (nil in memory mode), without their bodies: Get reads each back
	// from the journal, which holds them, rather than Open writing them
	// to the backend again. They come after the backend's records from
	// before this Open, so Get takes them once restoredOpen is set
	// (restoredGate is then closed): at Open when the backend holds
	// nothing from before it, else when Get has read this Open's dedup
	// marker, or when the backend reports damage that may have taken the
	// marker with it (damagedSinceMarker).
	restored     *restoredFIFO
	restoredOpen atomic.Bool
	restoredGate chan struct{}

	// putMu is held shared by everything that adds to the memory chan or
	// the backend (Put, Requeue, the scanner), getMu by Get, which takes
	// from them, and by Finish of a journaled message, which appends its
	// FIN; Close holds both exclusively, so when it flushes no message is
	// on its way in or between the backend and the in-flight map, and no
	// FIN is on its way to the journal it closes. Two locks on their own
	// cache lines keep producers and consumers from contending. In memory
	// mode (no DataPath) Close flushes nothing, so Put and Get skip them:
	// one that overlaps Close finds ErrClosed or leaves its message to be
	// discarded with the rest.
	putMu    sync.RWMutex
	_        [64]byte
	getMu    sync.RWMutex
	_        [64]byte
	closing  atomic.Bool   // Close or Delete has begun
	closed   atomic.Bool   // set while Close holds putMu and getMu
	exitChan chan struct{} // closed when Close begins; wakes blocked Gets

	inFlightMu sync.Mutex
	inFlight   *idTable               // guarded by inFlightMu
	inFlightPQ *pqueue.Queue[*record] // guarded by inFlightMu; by deadline
	// startMu serializes the deliveries of journaled records from the check
	// that the ID is not in flight already to its insertion, across the
	// journal write in between (see startInFlight).
	startMu sync.Mutex

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
// messages left by an earlier Close (or crash) come back: ready ones in the
// order they were put with MemQueueSize 0, then those the journal holds
// (in flight at Close, or requeued); with a memory chan, Close puts what
// the chan held behind the backend's records; deferred ones at their due
// time.
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
		inFlight:   newIDTable(),
		inFlightPQ: pqueue.New[*record](0),
		deferredPQ: pqueue.New[*record](0),
	}
	if o.MemQueueSize > 0 {
		q.memChan = make(chan *record, o.MemQueueSize)
	}
	var restore []restoreEntry
	if o.DataPath != "" {
		q.restored, q.restoredGate = new(restoredFIFO), make(chan struct{})
		if err := os.MkdirAll(o.DataPath, 0o755); err != nil {
			return nil, fmt.Errorf("localqueue %s: create DataPath: %w", o.Name, err)
		}
		lock, err := lockFile(o.DataPath, o.Name)
		if err != nil {
			return nil, err
		}
		q.lock = lock
		if !o.noJournal {
			if q.journal, restore, err = openJournal(&o, log); err != nil {
				lock.Close()
				return nil, err
			}
		}
		if q.backend, err = newDiskBackend(&o, log, q.backendDamaged); err != nil {
			if q.journal != nil {
				q.journal.close()
			}
			lock.Close()
			return nil, err
		}
		q.readChan = q.backend.ReadChan()
		q.onBackend.Store(q.backend.Depth())
	} else {
		q.mem = newMemFIFO()
	}

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
	if q.journal != nil {
		if err := q.recover(restore); err != nil {
			q.scanner.unregister(q)
			q.abort()
			return nil, err
		}
	}
	log.Info("queue opened", zap.Int64("depth", q.Depth()))
	return q, nil
}

// abort undoes a partly done Open.
func (q *Queue) abort() {
	if q.backend != nil {
		q.backend.Close()
	}
	if q.journal != nil {
		q.journal.close()
	}
	if q.lock != nil {
		q.lock.Close()
	}
	if q.ownScanner {
		q.scanner.Close()
	}
}

// Sync makes what the journal holds durable now (an fsync, fdatasync on
// Linux), whatever SyncEvery says, and returns once it is: a caller that
// makes many PutDeferred or Requeue calls and then one Sync gets each of
// them on disk for one fsync (a group commit). With no DataPath it does
// nothing.
func (q *Queue) Sync() error {
	if q.closed.Load() {
		return ErrClosed
	}
	if q.journal == nil {
		return nil
	}
	return q.journal.sync()
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
// backend; see the package documentation for what survives a crash. With
// SyncEvery 1, an error wrapping ErrNotSynced comes with the message's ID:
// it is written, but its fsync failed.
func (q *Queue) Put(body []byte) (ID, error) { return q.put(body, 0, false) }

// PutOwned is Put without the copy: the queue takes body over, and the
// caller must not change it afterwards (Messages handed out by Get share
// it, as they share the copy Put makes). It saves the copy, and for a body
// of more than 848 bytes its allocation (Put gives smaller copies a place
// in the record's own allocation). A message that goes to the backend is
// encoded, that is copied, either way.
func (q *Queue) PutOwned(body []byte) (ID, error) { return q.put(body, 0, true) }

// PutDeferred adds a message that becomes ready after delay (0 is Put).
// The delay must be in [0, MaxReqTimeout]. body is copied. With a DataPath
// the message is journaled before PutDeferred returns (see Durability in
// the package documentation).
func (q *Queue) PutDeferred(body []byte, delay time.Duration) (ID, error) {
	return q.put(body, delay, false)
}

func (q *Queue) put(body []byte, delay time.Duration, owned bool) (ID, error) {
	if len(body) > q.opts.MaxMsgSize {
		return ID{}, fmt.Errorf("%w: %d bytes, MaxMsgSize is %d", ErrTooLarge, len(body), q.opts.MaxMsgSize)
	}
	if err := q.checkDelay(delay); err != nil {
		return ID{}, err
	}
	if q.lock != nil { // see putMu: memory mode flushes nothing at Close
		q.putMu.RLock()
		defer q.putMu.RUnlock()
	}
	if q.closed.Load() {
		return ID{}, ErrClosed
	}
	now := q.now()
	id := q.newID()
	var err error
	switch {
	case delay > 0:
		r := newReady(id, body, owned, now, now.Add(delay))
		if q.journal != nil {
			if _, err := q.journal.write(&r.m, stateDeferred, 0); err != nil {
				return ID{}, fmt.Errorf("localqueue %s: journal message %s: %w", q.opts.Name, id, err)
			}
			r.journaled = true
		}
		q.pushDeferred(r)
	case q.recordless():
		m := Message{ID: id, Body: body, Timestamp: now, Due: now} // encoded, not retained
		err = q.writeBackend(&m)
	default:
		err = q.enqueue(newReady(id, body, owned, now, now))
	}
	if err != nil && !errors.Is(err, ErrNotSynced) {
		return ID{}, err
	}
	q.stats.puts.Add(1) // stored, even if not synced
	return id, err
}

func (q *Queue) checkDelay(delay time.Duration) error {
	if delay < 0 || delay > q.opts.MaxReqTimeout {
		return fmt.Errorf("%w: %v, want 0 to MaxReqTimeout (%v)", ErrInvalidDelay, delay, q.opts.MaxReqTimeout)
	}
	return nil
}

// recordless reports that a ready message would go straight to
// go-diskqueue (a DataPath, and no room in the memory chan): it is then
// encoded from a Message and no record is allocated for it. A memory chan
// that fills up between this check and the send only costs that record.
func (q *Queue) recordless() bool {
	return q.mem == nil && len(q.memChan) == cap(q.memChan)
}

// enqueue hands a ready record to the memory chan while it has room, else
// to the backend (encoded) or, in memory mode, to the memory FIFO. In
// memory mode the chan is skipped while the FIFO holds records, so that
// those go first and cannot be starved by a chan that Get prefers.
func (q *Queue) enqueue(r *record) error {
	if q.memChan != nil && (q.mem == nil || q.mem.len() == 0) {
		select {
		case q.memChan <- r:
			return nil
		default:
		}
	}
	if q.mem == nil {
		return q.writeBackend(&r.m)
	}
	if err := q.mem.push(r); err != nil {
		return q.writeFailed(r.m.ID, err)
	}
	return nil
}

// writeFailed counts a failed write of a ready message and wraps err.
func (q *Queue) writeFailed(id ID, err error) error {
	q.stats.writeErrors.Add(1)
	return fmt.Errorf("localqueue %s: write message %s: %w", q.opts.Name, id, err)
}

// writeBackend encodes m and appends it to the backend.
func (q *Queue) writeBackend(m *Message) error {
	bp, _ := q.bufPool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	buf := appendEnvelope((*bp)[:0], m)
	err := q.putBackend(buf)
	if cap(buf) <= 64<<10 {
		*bp = buf
		q.bufPool.Put(bp)
	}
	if err != nil && !errors.Is(err, ErrNotSynced) {
		return q.writeFailed(m.ID, err)
	}
	if err != nil {
		// Not a write error: go-diskqueue counted and logged the
		// fsync's (Stats.BackendErrors).
		return fmt.Errorf("localqueue %s: message %s: %w", q.opts.Name, m.ID, err)
	}
	return nil
}

// readBackend accounts for a record received from the backend. It
// returns the record's backend operation number with a DataPath, else 0.
func (q *Queue) readBackend() uint64 {
	q.backend.afterRead()
	for {
		v := q.onBackend.Load()
		if v <= 0 || q.onBackend.CompareAndSwap(v, v-1) {
			break
		}
	}
	if q.journal == nil {
		return 0
	}
	return q.journal.backendOps.Add(1)
}

// Get waits for a ready message, puts it in flight with a deadline of now
// plus MsgTimeout, and returns it. It returns ctx.Err() when ctx ends and
// ErrClosed when the queue closes. Call Finish, Requeue or Touch with its
// ID before the deadline.
func (q *Queue) Get(ctx context.Context) (*Message, error) {
	if q.lock != nil { // see getMu: memory mode flushes nothing at Close
		q.getMu.RLock()
		defer q.getMu.RUnlock()
	}
	for {
		if q.closed.Load() {
			return nil, ErrClosed
		}
		r, err := q.next(ctx)
		if err != nil {
			return nil, err
		}
		if r != nil && q.startInFlight(r, q.now()) {
			return &r.m, nil
		}
	}
}

// next waits for a ready record and takes it. It returns nil, and no
// error, when it woke up without one: a backend record that was dropped or
// deferred, or a stale wake-up of the memory FIFO; Get then tries again.
func (q *Queue) next(ctx context.Context) (*record, error) {
	if f := q.mem; f != nil {
		// Memory only: the chan first (enqueue skips it while the FIFO
		// holds records, so these are the older ones), then the FIFO.
		select {
		case r := <-q.memChan:
			return r, nil
		default:
		}
		if r := f.pop(); r != nil {
			return r, nil
		}
		select {
		case r := <-q.memChan:
			return r, nil
		case <-f.ready:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.exitChan:
			return nil, ErrClosed
		}
	}
	// The messages Open restored come first once they may (see restored);
	// until then a Get that waits also waits for that.
	var gate chan struct{}
	if q.restored.len() > 0 {
		if !q.restoredOpen.Load() {
			gate = q.restoredGate
		} else if r := q.takeRestored(); r != nil {
			return r, nil
		}
	}
	// First try the one place a message can be without a full select: the
	// memory chan while nothing of ours is in the backend, or the backend
	// when there is no memory chan.
	switch {
	case q.onBackend.Load() == 0:
		select {
		case r := <-q.memChan:
			return r, nil
		default:
		}
	case q.memChan == nil:
		select {
		case b := <-q.readChan:
			return q.fromBackend(b, q.readBackend()), nil
		default:
		}
	}
	select {
	case r := <-q.memChan:
		return r, nil
	case b := <-q.readChan:
		return q.fromBackend(b, q.readBackend()), nil
	case <-gate:
		return nil, nil // the restored messages may go: look again
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-q.exitChan:
		return nil, ErrClosed
	}
}

// releaseRestored lets Get take the messages Open restored (see
// restored). It is called from go-diskqueue's goroutine too.
func (q *Queue) releaseRestored() {
	if q.restoredOpen.CompareAndSwap(false, true) {
		close(q.restoredGate)
	}
}

// damagedSinceMarker reports whether the backend has counted damage since
// Open chose its dedup marker. Such damage may have taken the marker with
// it, so the stale-copy check ends (fromBackend) and the restored
// messages go (backendDamaged). Damage counted before cannot have: the
// marker Open writes goes after what go-diskqueue skipped, and one it
// takes over from an earlier Open was found whole, alone in the write
// file (ownWriteFile), which go-diskqueue sets aside only for damage its
// reader meets there.
func (q *Queue) damagedSinceMarker() bool {
	m := q.markerDamage.Load()
	return m != 0 && q.backend.damageCount()+1 != m
}

// backendDamaged is told of each error of the backend that may have lost
// records, on go-diskqueue's goroutine (which holds none of q's locks, and
// takes none here): if it may have taken the marker, the restored
// messages go now: a Get waiting for the marker might wait for ever.
// The stale-copy check ends at the next record Get reads, the first it
// could drop.
func (q *Queue) backendDamaged() {
	if q.damagedSinceMarker() {
		q.releaseRestored()
	}
}

// fromBackend decodes a record read from the backend. A record that does
// not decode is counted, logged with its data file and dropped; so is a
// stale copy of a journaled message (see dedup in journal_replay.go) and
// the dedup marker. One that is not due yet goes to the deferred heap.
// In all those cases it returns nil.
func (q *Queue) fromBackend(b []byte, op uint64) *record {
	j := q.journal
	if nonce, ok := decodeMarker(b); ok {
		if j != nil && j.endDedup(nonce) {
			q.log.Debug("dedup marker read: backend records from before the last Open are behind us")
		}
		if nonce == q.markerNonce {
			q.marker.Store(false)
			q.releaseRestored() // after endDedup: their copies written from now on are not stale
		}
		return nil // a marker of an earlier Open: nothing to do
	}
	r := new(record)
	if err := decodeEnvelope(b, &r.m); err != nil {
		if isFiller(b) {
			q.fillerRead()
			q.log.Debug("skipping the filler of a backend write that failed", zap.String("file", q.backend.where()), zap.Int("bytes", len(b)))
			return nil
		}
		q.stats.decodeErrors.Add(1)
		q.log.Error("dropping a record that does not decode", zap.String("file", q.backend.where()), zap.Int("bytes", len(b)), zap.Error(err))
		q.stopDedup("a backend record did not decode")
		return nil
	}
	r.e.Value = r
	if j != nil {
		if j.dedupOn.Load() {
			if q.damagedSinceMarker() {
				q.stopDedup("the backend skipped damaged data")
			} else if j.stale(r.m.ID) {
				q.stats.duplicates.Add(1)
				q.log.Debug("dropping a stale backend copy of a journaled message", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts))
				return nil
			}
		}
		r.journaled, r.readOp = true, op // it left the backend: the journal must have it
	}
	if r.m.Due.After(r.m.Timestamp) && r.m.Due.After(q.now()) { // only deferred records need the clock
		q.deferRecord(r)
		return nil
	}
	return r
}

// stopDedup ends the stale-copy check when the backend may have lost the
// marker with damaged data: from then on a stale copy is delivered again
// (a duplicate) rather than a live one dropped.
func (q *Queue) stopDedup(why string) {
	if q.journal != nil && q.journal.dedupOn.Load() && q.journal.endDedup(0) {
		q.log.Warn("stale-copy check stopped; backend copies of journaled messages may be delivered twice", zap.String("reason", why))
	}
	q.releaseRestored() // the marker may never come
}

// startInFlight records r as in flight. A journaled record is journaled
// first, so that it is on record before any other goroutine can see it in
// flight (and Finish it). It reports false, and drops r, when r is a
// duplicate: a journaled record whose ID is in flight already (go-diskqueue
// hands out records again after a crash, and the journal restores the
// same messages), which the delivery in flight covers. That check comes
// before the journal write, which would otherwise overwrite the live
// delivery's state (its attempts) with the copy's; startMu keeps a second
// copy from slipping in between. Records that are not journaled (fresh Puts
// and their redeliveries from memory) are the only copy of their message.
func (q *Queue) startInFlight(r *record, now time.Time) bool {
	r.m.Attempts++
	r.m.Deadline = now.Add(q.opts.MsgTimeout)
	r.e.Deadline = r.m.Deadline
	if r.journaled {
		q.startMu.Lock()
		defer q.startMu.Unlock()
		q.inFlightMu.Lock()
		dup := q.inFlight.get(r.m.ID) != nil
		q.inFlightMu.Unlock()
		if dup {
			q.stats.duplicates.Add(1)
			q.log.Debug("dropping a duplicate of a message in flight", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts-1))
			return false
		}
		q.journalWrite(r, stateInFlight)
	}
	q.inFlightMu.Lock()
	q.inFlight.put(r)
	q.inFlightPQ.Push(&r.e)
	q.inFlightMu.Unlock()
	q.scanner.activate(q)
	q.stats.delivered.Add(1)
	return true
}

// journalWrite journals r in state and sets r.journaled to whether the journal holds
// it. A failure is logged (a line a second at most: a full disk fails
// every write) and counted, not returned: the message is in
// memory and goes on (Close writes it to the backend if the journal does
// not hold it), but a crash before then can lose it, or, if the journal
// held it already, bring it back in its older state.
func (q *Queue) journalWrite(r *record, state byte) {
	held, err := q.journal.write(&r.m, state, r.readOp)
	r.journaled = held
	if err != nil {
		q.journalErrLog.Error(q.log, "journal write failed; a crash now can lose this message", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts), zap.Error(err))
	}
}

// deferRecord journals r as deferred (with a DataPath) and pushes it onto
// the deferred heap.
func (q *Queue) deferRecord(r *record) {
	if q.journal != nil {
		q.journalWrite(r, stateDeferred)
	}
	q.pushDeferred(r)
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
	// ErrNotSynced: r is written, and trying again would write it twice.
	if err := q.enqueue(r); err != nil && !errors.Is(err, ErrNotSynced) {
		q.requeueErrLog.Error(q.log, "requeue failed, retrying later", zap.Stringer("id", r.m.ID), zap.Int("attempts", r.m.Attempts), zap.Error(err))
		r.m.Due = q.now().Add(retryDelay)
		q.deferRecord(r)
	}
}

// retryDelay is how long a message waits after a failed backend write.
const retryDelay = time.Second

// Depth is the number of ready messages: in the memory chan, plus beyond
// it (in the backend, and the ready messages Open restored from the
// journal, which Get reads back from it). In-flight and deferred messages
// are not counted (see Stats). With a DataPath it counts the backend's
// records, some of which Get drops rather than hands out: copies of a
// message the queue has elsewhere (Stats.Duplicates: after a crash
// go-diskqueue may hand records out again, and a message requeued while
// the journal held it leaves its copy in the backend when the queue stops
// before Get reads it, while Open restores the message from the journal),
// and the dedup marker of an earlier Open. So after a crash or a reopen Depth can be high until Get
// reaches them. Open itself adds no copies, so restarts do not make it
// grow.
func (q *Queue) Depth() int64 {
	return q.memDepth() + q.backendDepth()
}

// memDepth is the number of ready messages in the memory chan.
func (q *Queue) memDepth() int64 { return int64(len(q.memChan)) }

// backendDepth is the number of ready messages beyond the memory chan: in
// the backend (less the dedup marker) and among those Open restored, or
// in the memory FIFO.
func (q *Queue) backendDepth() int64 {
	if q.mem != nil {
		return q.mem.len()
	}
	d := q.backend.Depth() - q.fillers.Load()
	if q.marker.Load() {
		d--
	}
	return max(d, 0) + q.restored.len()
}

// signal sends on a cap-1 channel without blocking: a token that says
// "look again", which one token already says.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
