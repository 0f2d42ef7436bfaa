package deadletter

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// DirName is the store's directory under a consumer's DataPath:
// <DataPath>/deadletters.
const DirName = "deadletters"

// The files in a store's directory.
const (
	DataFile = "deadletters.dat"
	LockFile = "deadletters.lock"
)

var (
	// ErrReadOnly: the store was opened with Options.ReadOnly.
	ErrReadOnly = errors.New("dead-letter store opened read-only")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("dead-letter store closed")
)

// Options configure Open.
type Options struct {
	// ReadOnly opens an existing store without its lock, to read while a
	// consumer may be appending: Append, Rewrite and Purge fail with
	// ErrReadOnly, and an incomplete last record (an Append in progress)
	// is not there yet rather than damage. It reads the file it opened:
	// a Rewrite by another process afterwards is not seen.
	ReadOnly bool
	// OnDamage, if not nil, is called for every damaged stretch of the
	// file that Open, Scan or Rewrite skips (they also count it in
	// Stats.Damaged). It must not call the Store.
	OnDamage func(Damage)
}

// Stats describe a store.
type Stats struct {
	Records int64 // readable records: found by the last full read (Open, Scan, Rewrite), plus those appended since
	Bytes   int64 // the file's size: up to the last durable Append; read-only, as of the last full read
	Damaged int64 // damaged stretches the last full read skipped
	// TornBytes is the length of an incomplete last record that Open cut
	// off: an Append that never returned (the process died during it).
	TornBytes int64
	// Mended counts records whose length field was damaged (running past
	// the end of the file, or over the limit) and whose checksum gave the
	// right length: they are read with it, and a writable Open writes it
	// back into the file.
	Mended int64
	Syncs  int64 // fdatasync calls made for Appends (group commit: fewer than the Appends when they overlap)
}

// syncFile makes an Append durable; tests slow it down to make Appends
// overlap.
var syncFile = datasync

// Store is a local dead-letter store: one append-only file of
// checksummed records in a directory, which it holds with an exclusive
// lock unless it was opened ReadOnly. Its methods are safe for concurrent
// use.
type Store struct {
	dir, path string
	opts      Options
	lock      *os.File // nil when ReadOnly

	// fileMu guards f against Rewrite swapping it (Lock) while Scan or
	// Close uses it (RLock; Close: Lock).
	fileMu sync.RWMutex
	f      *os.File

	mu       sync.Mutex
	cond     *sync.Cond    // broadcast when a write ends or the writer role is free
	writing  bool          // an Append leader or a Rewrite owns the file's end
	pending  []byte        // frames waiting for the next write
	spare    []byte        // the last written batch, reused
	pendRecs int64         // records in pending
	queued   uint64        // batches queued so far
	ended    uint64        // batches whose write has ended: durable, or in failed
	failed   []failedWrite // until each of their Appends has returned
	err      error         // a failed sync, or a failed write not cut off: the store takes no more Appends
	closed   bool
	stats    Stats
}

// Open opens the store in dir. Unless opts.ReadOnly, it creates dir and
// the file if missing, takes an exclusive lock on <dir>/deadletters.lock
// (if another Store holds it, the error names dir and wraps a
// *flock.HeldError, matching flock.ErrHeld, that names the lock file and
// the holder) and cuts off an incomplete last record. It reads the whole
// file once, counting its records and reporting damage (opts.OnDamage).
func Open(dir string, opts Options) (*Store, error) {
	s := &Store{dir: dir, path: filepath.Join(dir, DataFile), opts: opts}
	s.cond = sync.NewCond(&s.mu)
	var err error
	if opts.ReadOnly {
		if _, err = os.Stat(dir); err != nil {
			return nil, fmt.Errorf("deadletter: no dead-letter store at %s: %w", dir, pathless(err))
		}
		if s.f, err = os.Open(s.path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("deadletter: %s holds no dead-letter store (no %s): %w", dir, DataFile, pathless(err))
			}
			return nil, fmt.Errorf("deadletter: %w", err)
		}
	} else if err = s.openWritable(); err != nil {
		return nil, err
	}
	if err = s.load(); err != nil {
		s.f.Close()
		if s.lock != nil {
			s.lock.Close()
		}
		return nil, err
	}
	return s, nil
}

// openWritable creates dir, takes the lock and opens (or creates) the
// file for appending.
func (s *Store) openWritable() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("deadletter: create %s: %w", s.dir, err)
	}
	lock, err := lockDir(s.dir)
	if err != nil {
		return err
	}
	os.Remove(s.path + ".tmp") // a Rewrite that did not finish
	if _, err = os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
		// A new file appears complete or not at all: header, fsync,
		// rename, fsync the directory.
		err = s.replaceWith(func(*bufio.Writer) error { return nil })
	}
	if err == nil {
		if s.f, err = os.OpenFile(s.path, os.O_RDWR|os.O_APPEND, 0); err != nil {
			err = fmt.Errorf("deadletter: %w", err)
		}
	}
	if err != nil {
		lock.Close()
		return err
	}
	s.lock = lock
	return nil
}

// load reads the whole file: counts records and damage, and (when
// writable) cuts off an incomplete last record.
func (s *Store) load() error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	size := fi.Size()
	res, err := s.scanFile(size, nil)
	if err != nil {
		return err
	}
	s.stats.Mended = int64(len(res.mended))
	if !s.opts.ReadOnly && len(res.mended) > 0 {
		if err := s.writeLengths(res.mended); err != nil {
			return err
		}
	}
	if res.tail >= 0 {
		// Read-only, an Append in progress: not there yet. Writable (we
		// hold the lock), what a crash left of an Append that never
		// returned: cut it off, so the next Append starts clean.
		if !s.opts.ReadOnly {
			if err := s.f.Truncate(res.tail); err != nil {
				return fmt.Errorf("deadletter: cut the incomplete last record of %s at offset %d: %w", s.path, res.tail, err)
			}
			if err := s.f.Sync(); err != nil {
				return fmt.Errorf("deadletter: fsync %s: %w", s.path, err)
			}
			s.stats.TornBytes = size - res.tail
		}
		size = res.tail
	}
	s.stats.Bytes = size
	return nil
}

// writeLengths writes the right length into the damaged length field of
// each mended frame and syncs, through a descriptor of its own (s.f
// appends: a positioned write there would append).
func (s *Store) writeLengths(frames []mendedFrame) error {
	f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	defer f.Close()
	for _, fr := range frames {
		var length [4]byte
		binary.BigEndian.PutUint32(length[:], uint32(fr.length))
		if _, err := f.WriteAt(length[:], fr.pos+4); err != nil {
			return fmt.Errorf("deadletter: mend the length field of the record at offset %d of %s: %w", fr.pos, s.path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("deadletter: fsync %s: %w", s.path, err)
	}
	return nil
}

// scanFile reads the file up to size, calling yield (if not nil) for each
// record, and resets the record and damage counts to what it found.
func (s *Store) scanFile(size int64, yield func(pos int64, raw []byte, r Record) error) (scanResult, error) {
	if yield == nil {
		yield = func(int64, []byte, Record) error { return nil }
	}
	sc := &fileScanner{r: s.f, path: s.path, size: size}
	res, err := sc.scan(yield, s.opts.OnDamage)
	if err == nil {
		s.mu.Lock()
		s.stats.Records, s.stats.Damaged = res.records, res.damaged
		s.mu.Unlock()
	}
	return res, err
}

// failedWrite is a write that failed and was cut off the file: the
// Appends of batches from+1 to to return err. untold counts those that
// have not yet: the last one removes it.
type failedWrite struct {
	from, to uint64
	untold   uint64
	err      error
}

// Append adds recs to the store and returns once they are durable:
// written and fdatasync'ed. Appends that overlap share one write and one
// fdatasync (group commit). A write that fails (a full disk) is cut off
// the file and fails the Appends it carried, and only those: the store
// goes on, and a later Append may succeed. After a failed sync, or a
// failed write that could not be cut off, the store takes no more
// Appends: what reached the disk is then unknown (reopen it: Open cuts
// off what a failed write left).
func (s *Store) Append(recs ...Record) error {
	if s.opts.ReadOnly {
		return fmt.Errorf("deadletter: append to %s: %w", s.path, ErrReadOnly)
	}
	if len(recs) == 0 {
		return nil
	}
	var buf []byte
	for i, r := range recs {
		var err error
		if buf, err = appendFrame(buf, r); err != nil {
			return fmt.Errorf("deadletter: append record %d of %d to %s: %w", i+1, len(recs), s.path, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("deadletter: append to %s: %w", s.path, ErrClosed)
	case s.err != nil:
		return s.err
	}
	s.pending = append(s.pending, buf...)
	s.pendRecs += int64(len(recs))
	s.queued++
	mine := s.queued
	for s.ended < mine && s.err == nil {
		if s.writing {
			s.cond.Wait() // a leader is writing; it or the next takes our batch
			continue
		}
		s.lead()
	}
	for i := range s.failed {
		if f := &s.failed[i]; f.from < mine && mine <= f.to {
			err := f.err
			if f.untold--; f.untold == 0 {
				s.failed = slices.Delete(s.failed, i, i+1)
			}
			return err
		}
	}
	if s.ended >= mine {
		return nil
	}
	return s.err
}

// lead writes and syncs everything pending, as the one writer; s.mu is
// held on entry and exit, not during the write.
func (s *Store) lead() {
	s.writing = true
	batch, recs, from, upTo, end := s.pending, s.pendRecs, s.ended, s.queued, s.stats.Bytes
	s.pending, s.spare, s.pendRecs = s.spare[:0], nil, 0
	s.mu.Unlock()
	cutOff := false
	_, err := s.f.Write(batch)
	if err != nil {
		// Cut off what the write left, or a later Append would follow
		// a torn frame.
		cutOff = s.f.Truncate(end) == nil
	} else {
		err = syncFile(s.f)
	}
	s.mu.Lock()
	s.writing = false
	s.spare = batch[:0]
	switch {
	case err != nil && cutOff:
		s.failed = append(s.failed, failedWrite{from, upTo, upTo - from, fmt.Errorf("deadletter: append %d records to %s: %w", recs, s.path, err)})
		s.ended = upTo
	case err != nil:
		s.err = fmt.Errorf("deadletter: append %d records to %s: %w", recs, s.path, err)
	default:
		s.ended = upTo
		s.stats.Records += recs
		s.stats.Bytes += int64(len(batch))
		s.stats.Syncs++
	}
	s.cond.Broadcast()
}

// Scan calls fn for every record, in the order appended, with its
// position (its byte offset in the file, which identifies it to Rewrite's
// keep), without consuming anything. A damaged stretch is skipped,
// counted and reported (Options.OnDamage); Scan stops at fn's first error
// and returns it. A writable store's Scan sees the records whose Append
// has returned; a ReadOnly one's, those complete when it starts. fn may
// keep the records; it must not call the Store's methods but Stats.
func (s *Store) Scan(fn func(pos int64, r Record) error) error {
	s.fileMu.RLock()
	defer s.fileMu.RUnlock()
	s.mu.Lock()
	closed, size := s.closed, s.stats.Bytes
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("deadletter: scan %s: %w", s.path, ErrClosed)
	}
	if s.opts.ReadOnly {
		fi, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("deadletter: %w", err)
		}
		size = fi.Size()
	}
	res, err := s.scanFile(size, func(pos int64, _ []byte, r Record) error { return fn(pos, r) })
	if err == nil && s.opts.ReadOnly {
		if res.tail >= 0 {
			size = res.tail
		}
		s.mu.Lock()
		s.stats.Bytes = size
		s.mu.Unlock()
	}
	return err
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close waits for the Appends already queued (and a Rewrite in
// progress), closes the file and releases the lock.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("deadletter: close %s: %w", s.path, ErrClosed)
	}
	s.closed = true // Appends from now on fail; the queued ones are written
	for s.writing || (s.ended < s.queued && s.err == nil) {
		s.cond.Wait()
	}
	s.mu.Unlock()
	s.fileMu.Lock()
	err := s.f.Close()
	s.fileMu.Unlock()
	if s.lock != nil {
		err = errors.Join(err, s.lock.Close()) // releases the flock
	}
	if err != nil {
		return fmt.Errorf("deadletter: close %s: %w", s.dir, err)
	}
	return nil
}

// pathless is err without the path an *fs.PathError repeats, for messages
// that name the path already.
func pathless(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
