package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/internal/lograte"
)

// DefaultJournalCompactBytes is the journal size below which it is never
// compacted.
const DefaultJournalCompactBytes = 32 << 20

// journal is the crash-safe record of journaled messages (see
// journal_format.go for the file layout and doc.go for the guarantees).
// Every method that changes it appends one record (see appendFile) before
// it returns and fsyncs on the SyncEvery/SyncTimeout policy; its
// background goroutine compacts the file when it is at least compactMin
// bytes and more than half dead (journal_compact.go).
//
// All fields below mu are guarded by it: Get, Finish, Requeue, PutDeferred
// and the scanner call in from many goroutines, and each call is one short
// critical section around a copy into the file's mapping (or a write(2)),
// so a mutex is simpler than a goroutine.
type journal struct {
	path        string
	log         *zap.Logger
	syncEvery   int64
	syncTimeout time.Duration
	compactMin  int64
	noMap       bool // append with pwrite(2), not through a mapping (tests)

	// dedupOn is set while hist applies: until the backend marker of gen
	// is read. Get checks it without the lock.
	dedupOn atomic.Bool
	// backendOps counts the queue's backend writes and reads, as
	// go-diskqueue counts them for SyncEvery: a read is in go-diskqueue's
	// persisted read position once SyncEvery more operations were served.
	backendOps atomic.Uint64

	// compactMu is held by a compaction from its snapshot to its end;
	// taken before mu.
	compactMu sync.Mutex

	mu        sync.Mutex
	out       *appendFile // nil until the first record (see openLocked) and once closed
	closed    bool
	live      map[ID]jentry   // journaled messages: where their COPY is, their state now
	liveBytes int64           // the live messages' COPY records' bytes
	keepBytes int64           // what the last rewrite wrote besides COPYs (header, HIST, FIN)
	gen       uint64          // nonce of the backend marker that ends hist; 0: none
	hist      map[ID]struct{} // IDs whose backend copies before the marker are stale
	buf       []byte          // encode buffer
	scratch   []byte          // read buffer for load
	unsynced  int64           // records appended since the last fsync began
	dirDirty  bool            // a compaction's rename is not fsynced yet
	syncing   *appendFile     // the file the syncer is fsyncing, nil if none
	retired   *appendFile     // a file compaction replaced while it was synced
	noCompact int64           // after a failed compaction: not again below this size
	// diskFull: a write met a full disk, so compact whatever the size
	// (see wantCompactLocked). fullRetry: a compaction that diskFull
	// asked for failed; the next is not asked for before then (a disk
	// that stays full would otherwise get one compaction after another,
	// each rewriting the live records until it fails).
	diskFull      bool
	fullRetry     time.Time
	compactErrLog lograte.Limit // "journal compaction failed"
	// recent are the last FINs of messages read from the backend, so that
	// compaction keeps those whose read go-diskqueue may not have
	// persisted yet: after a crash their stale copies must still be known
	// as finished. A ring of at most maxRecent.
	recent     []recentFin
	recentNext int

	// The background goroutine (see journal_sync.go).
	syncReq    chan struct{} // cap 1: SyncEvery records appended
	dirty      chan struct{} // cap 1: the first record after an fsync began
	compactReq chan struct{} // cap 1: the file is due for compaction
	stop       chan struct{}
	wg         sync.WaitGroup
	counters   journalCounters
}

// jentry is where a journaled message's COPY record is and what state it is
// in now (MOVE records change state, attempts and due, not the COPY).
type jentry struct {
	off      int64
	size     int32
	state    byte
	attempts int32
	due      int64  // Unix nanoseconds
	readOp   uint64 // backendOps at its last read from the backend; 0: none
}

// recentFin is a FIN of a message last read from the backend at op.
type recentFin struct {
	id ID
	op uint64
}

// maxRecent bounds the FINs compaction keeps: enough for SyncEvery up to
// 65536 (the default is 2500).
const maxRecent = 1 << 16

type journalCounters struct {
	corrupt     atomic.Uint64 // corrupt regions found at Open
	errors      atomic.Uint64 // failed writes, fsyncs and compactions
	compactions atomic.Uint64
}

// restoreEntry is a journaled message found at Open, in journal order.
type restoreEntry struct {
	id ID
	e  jentry
}

func journalPath(dataPath, name string) string {
	return filepath.Join(dataPath, name+".journal")
}

// write records that m left the backend or the memory chan for state
// (stateInFlight after a Get, stateDeferred when deferred, stateReady when
// a requeue hands it back ready): a COPY with the
// body if the journal does not have m yet, else a MOVE. readOp is
// backendOps when m was just read from the backend, else 0. m must not
// change while write runs. held reports whether the journal holds m
// afterwards (on an error: whether it held it before).
func (j *journal) write(m *Message, state byte, readOp uint64) (held bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if held, err = j.copyOrMoveLocked(m, state, readOp); err == nil {
		j.afterWriteLocked(true)
	}
	return held, err
}

// writeClosing is write(m, stateInFlight, 0) for each of ms, for Close: the
// in-flight messages the journal does not hold yet, so that Open treats
// them as every delivery cut short. It does without the fsyncs SyncEvery
// asks for, as close fsyncs the journal next. held[i] reports whether the
// journal holds ms[i]; err is the first failure.
func (j *journal) writeClosing(ms []*Message) (held []bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	held = make([]bool, len(ms))
	for i, m := range ms {
		var perr error
		if held[i], perr = j.copyOrMoveLocked(m, stateInFlight, 0); perr != nil && err == nil {
			err = perr
		}
	}
	return held, err
}

// copyOrMoveLocked appends the COPY or MOVE of write, without the fsync policy.
func (j *journal) copyOrMoveLocked(m *Message, state byte, readOp uint64) (held bool, err error) {
	e, known := j.live[m.ID]
	if err := j.openLocked(); err != nil {
		return known, err
	}
	kind := "MOVE"
	if known {
		j.buf = appendMove(j.buf[:0], state, m.ID, m.Attempts, m.Due)
	} else {
		kind = "COPY"
		j.buf = appendCopy(j.buf[:0], state, m)
		e = jentry{off: j.out.size, size: int32(len(j.buf))}
	}
	if err := j.writeLocked(j.buf); err != nil {
		return known, fmt.Errorf("journal %s of %s: %w", kind, m.ID, err)
	}
	if !known {
		j.liveBytes += int64(e.size)
	}
	e.state, e.attempts, e.due = state, int32(clampAttempts(m.Attempts)), m.Due.UnixNano()
	if readOp != 0 {
		e.readOp = readOp
	}
	j.live[m.ID] = e
	return true, nil
}

// fin records that id is finished or dead-lettered: no longer journaled. It
// writes nothing for an ID the journal does not hold.
func (j *journal) fin(id ID) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	e, ok := j.live[id]
	if !ok {
		return nil // nothing to cancel (and so the file is open)
	}
	j.buf = appendFin(j.buf[:0], id)
	if err := j.writeLocked(j.buf); err != nil {
		return fmt.Errorf("journal FIN of %s: %w", id, err)
	}
	delete(j.live, id)
	j.liveBytes -= int64(e.size)
	if e.readOp != 0 && j.syncEvery > 1 {
		j.noteRecentLocked(recentFin{id, e.readOp})
	}
	j.afterWriteLocked(false)
	return nil
}

// swap records, in one SWAP record, that m is journaled in state and that
// old is finished (old need not be journaled). m must be new to the
// journal and must not change while swap runs.
func (j *journal) swap(old ID, m *Message, state byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.openLocked(); err != nil {
		return err
	}
	j.buf = appendSwap(j.buf[:0], state, old, m)
	e := jentry{off: j.out.size, size: int32(len(j.buf)), state: state, attempts: int32(clampAttempts(m.Attempts)), due: m.Due.UnixNano()}
	if err := j.writeLocked(j.buf); err != nil {
		return fmt.Errorf("journal SWAP of %s for %s: %w", m.ID, old, err)
	}
	if o, ok := j.live[old]; ok {
		delete(j.live, old)
		j.liveBytes -= int64(o.size)
		if o.readOp != 0 && j.syncEvery > 1 {
			j.noteRecentLocked(recentFin{old, o.readOp})
		}
	}
	j.live[m.ID] = e
	j.liveBytes += int64(e.size)
	j.afterWriteLocked(true)
	return nil
}

func (j *journal) noteRecentLocked(f recentFin) {
	if len(j.recent) < min(int(j.syncEvery), maxRecent) {
		j.recent = append(j.recent, f)
		return
	}
	j.recent[j.recentNext] = f
	j.recentNext = (j.recentNext + 1) % len(j.recent)
}

// unsyncedFins lists the recent FINs whose backend read go-diskqueue may
// not have persisted: fewer than SyncEvery backend operations since.
func (j *journal) unsyncedFinsLocked() []ID {
	ops := j.backendOps.Load()
	var ids []ID
	for _, f := range j.recent {
		if f.op+uint64(j.syncEvery) > ops {
			ids = append(ids, f.id)
		}
	}
	return ids
}

// stale reports whether a backend record of id read before the marker is a
// stale copy of a message the journal restored or finished.
func (j *journal) stale(id ID) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.hist[id]
	return ok
}

// endDedup stops the stale check: the backend marker of nonce was read
// (or, with nonce 0, the backend lost records, so the marker may never
// come and dropping copies could lose messages). It reports whether it
// ended the current generation.
func (j *journal) endDedup(nonce uint64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.gen == 0 || (nonce != 0 && nonce != j.gen) {
		return false
	}
	j.gen, j.hist = 0, nil
	j.dedupOn.Store(false)
	return true
}

// setGen makes nonce the generation whose backend marker ends the stale
// check (Open, taking a marker an earlier Open wrote; see writeMarker).
func (j *journal) setGen(nonce uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gen = nonce
}

// writeLocked appends rec. After a failure the next record goes where rec
// was to go, over any part of it that was written.
func (j *journal) writeLocked(rec []byte) error {
	if err := j.out.append(rec); err != nil {
		j.counters.errors.Add(1)
		if isDiskFull(err) && !errors.Is(err, errJournalFrozen) {
			j.noteDiskFullLocked()
		}
		return fmt.Errorf("append to %s: %w", j.path, err)
	}
	return nil
}

// fullRetryAfter is how long after a failed full-disk compaction the next
// may be asked for.
const fullRetryAfter = time.Second

// noteDiskFull records that a write of the queue's (the journal's own, or
// the backend's) met a full disk: the journal's dead records may be what
// fills it, and a journal below compactMin is otherwise never compacted.
func (j *journal) noteDiskFull() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.noteDiskFullLocked()
}

func (j *journal) noteDiskFullLocked() {
	if j.diskFull || j.out == nil || time.Now().Before(j.fullRetry) {
		return
	}
	j.diskFull = true
	if j.wantCompactLocked() {
		signal(j.compactReq)
	}
}

// load returns the message of a restore entry, with its own body.
func (j *journal) load(re restoreEntry) (Message, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.loadLocked(re)
}

// loadLive returns the message the journal holds as id, with its own body,
// read back from its COPY where it is now (compaction moves COPYs, and
// points live at their new places under mu). held is false, with no
// error, when the journal does not hold id.
func (j *journal) loadLive(id ID) (m Message, held bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.live[id]
	if !ok {
		return Message{}, false, nil
	}
	m, err = j.loadLocked(restoreEntry{id, e})
	return m, true, err
}

func (j *journal) loadLocked(re restoreEntry) (Message, error) {
	if err := j.openLocked(); err != nil {
		return Message{}, err
	}
	m, buf, err := readCopy(j.out.f, re.e, j.scratch)
	j.scratch = buf
	if err != nil {
		return Message{}, err
	}
	if m.ID != re.id {
		return Message{}, fmt.Errorf("%w: %s at %d: a COPY of %s, want %s", ErrCorruptJournal, j.path, re.e.off, m.ID, re.id)
	}
	m.Body = append([]byte(nil), m.Body...)
	m.Attempts, m.Due = int(re.e.attempts), time.Unix(0, re.e.due)
	return m, nil
}

// reset drops every journaled message and the dedup history (Empty).
func (j *journal) reset() error {
	j.compactMu.Lock()
	defer j.compactMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	j.live, j.liveBytes = map[ID]jentry{}, 0
	j.gen, j.hist = 0, nil
	j.recent, j.recentNext = nil, 0
	j.dedupOn.Store(false)
	if j.out == nil {
		return nil // the file holds nothing yet
	}
	return j.compactLocked()
}

// close stops the background goroutine (waiting for a compaction under
// way), compacts the journal if it holds dead records (so that a clean
// restart replays only what is journaled), fsyncs and closes it. The queue
// calls it after the backend's Close.
func (j *journal) close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.closed = true // no more records, so no goroutine starts from now on
	j.mu.Unlock()
	j.stopSyncer()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.out == nil {
		return nil
	}
	var errs []error
	// go-diskqueue has synced at its Close: no read of it can be replayed,
	// so the FINs kept for that are not needed any more.
	j.recent, j.recentNext = nil, 0
	if j.out.size > j.liveBytes+j.histBytes()+journalHeaderSize {
		if err := j.compactLocked(); err != nil {
			errs = append(errs, fmt.Errorf("compact journal: %w", err))
		}
	}
	if err := j.out.close(); err != nil {
		errs = append(errs, err)
	}
	if j.dirDirty {
		j.dirDirty = false
		if err := syncDir(filepath.Dir(j.path)); err != nil {
			errs = append(errs, fmt.Errorf("fsync the directory of %s: %w", j.path, err))
		}
	}
	j.out = nil
	return errors.Join(errs...)
}

// remove closes the journal and deletes its files (Delete). A .bad copy is
// kept for inspection.
func (j *journal) remove() error {
	err := j.close()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	for _, p := range []string{j.path, j.path + ".tmp"} {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// stats reports the journal's size (0 once closed) and number of journaled
// messages.
func (j *journal) stats() (size int64, live int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.out != nil:
		size = j.out.size
	case !j.closed:
		size = journalHeaderSize
	}
	return size, len(j.live)
}

// openLocked opens the journal file for appending, and starts its
// background goroutine, if that has not happened yet: a queue whose journal holds nothing keeps
// neither a file descriptor nor a goroutine for it until it needs one, so
// that idle disk queues cost nothing (ten thousand of them would otherwise
// use ten thousand descriptors more).
func (j *journal) openLocked() error {
	switch {
	case j.closed:
		return ErrClosed
	case j.out != nil:
		return nil
	}
	f, err := os.OpenFile(j.path, os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", j.path, err)
	}
	j.out = newAppendFile(f, journalHeaderSize, j.noMap)
	j.startSyncer()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
