package deadletter

import (
	"bufio"
	"errors"
	"fmt"
	"os"
)

// errUnchanged: a Rewrite would write the file as it is.
var errUnchanged = errors.New("nothing to rewrite")

// Rewrite keeps the records for which keep returns true and removes the
// others: it writes the kept ones, in order, to a temporary file, fsyncs
// it, renames it over the store's file and fsyncs the directory, so a
// crash at any step leaves either the old file or the new one, complete
// (a leftover temporary file is removed by the next writable Open).
// Damaged stretches are reported (Options.OnDamage) and left out of the
// new file. Appends wait while it runs. It returns how many records it
// removed; when it would remove nothing and there is no damage, the file
// is left as it is. It needs the lock: a ReadOnly store returns
// ErrReadOnly. keep must not call the Store.
func (s *Store) Rewrite(keep func(pos int64, r Record) bool) (removed int, err error) {
	if s.opts.ReadOnly {
		return 0, fmt.Errorf("deadletter: rewrite %s: %w", s.path, ErrReadOnly)
	}
	s.mu.Lock()
	for s.writing {
		s.cond.Wait()
	}
	switch {
	case s.closed:
		s.mu.Unlock()
		return 0, fmt.Errorf("deadletter: rewrite %s: %w", s.path, ErrClosed)
	case s.err != nil:
		s.mu.Unlock()
		return 0, s.err
	}
	s.writing = true // Appends queue up behind us
	size := s.stats.Bytes
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.writing = false
		s.cond.Broadcast()
		s.mu.Unlock()
	}()

	var kept int64
	tmpPath, newSize, err := s.writeTemp(func(w *bufio.Writer) error {
		sc := &fileScanner{r: s.f, path: s.path, size: size}
		res, err := sc.scan(func(pos int64, raw []byte, r Record) error {
			if !keep(pos, r) {
				removed++
				return nil
			}
			kept++
			_, err := w.Write(raw)
			return err
		}, s.opts.OnDamage)
		if err == nil && removed == 0 && res.damaged == 0 && res.tail < 0 {
			return errUnchanged
		}
		return err
	})
	if errors.Is(err, errUnchanged) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// Close the old file before renaming over it (Windows refuses to
	// rename over an open file), then open whichever file the path names.
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.f.Close()
	renamed, err := s.install(tmpPath)
	f, oerr := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND, 0)
	if oerr != nil {
		// This Store can neither read nor append any more.
		oerr = fmt.Errorf("deadletter: reopen %s after a rewrite: %w", s.path, oerr)
		s.mu.Lock()
		s.err = oerr
		s.mu.Unlock()
		return 0, errors.Join(err, oerr)
	}
	s.f = f
	if !renamed {
		return 0, err
	}
	s.mu.Lock()
	s.stats.Records, s.stats.Damaged, s.stats.Bytes = kept, 0, newSize
	s.mu.Unlock()
	return removed, err // err: the directory's fsync failed
}

// Purge removes every record (a Rewrite that keeps none) and returns how
// many there were.
func (s *Store) Purge() (removed int, err error) {
	return s.Rewrite(func(int64, Record) bool { return false })
}

// replaceWith makes a new store file with what fill writes after the
// header (writeTemp, then install). A crash at any point leaves the file
// either as it was or complete.
func (s *Store) replaceWith(fill func(w *bufio.Writer) error) error {
	tmpPath, _, err := s.writeTemp(fill)
	if err != nil {
		return err
	}
	_, err = s.install(tmpPath)
	return err
}

// writeTemp writes the header and what fill writes to <file>.tmp and
// fsyncs it; it returns its path and size. If anything fails, the
// temporary file is removed and fill's error (or the write's) returned.
func (s *Store) writeTemp(fill func(w *bufio.Writer) error) (string, int64, error) {
	tmpPath := s.path + ".tmp"
	tmp, err := os.OpenFile(tmpPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", 0, fmt.Errorf("deadletter: %w", err)
	}
	w := bufio.NewWriterSize(tmp, 1<<20)
	_, err = w.Write(fileHeader())
	if err == nil {
		err = fill(w)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		if err = tmp.Sync(); err != nil {
			err = fmt.Errorf("fsync %s: %w", tmpPath, err)
		}
	}
	var size int64
	if err == nil {
		var fi os.FileInfo
		if fi, err = tmp.Stat(); err == nil {
			size = fi.Size()
		}
	}
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmpPath)
		if errors.Is(err, errUnchanged) {
			return "", 0, err
		}
		return "", 0, fmt.Errorf("deadletter: write %s: %w", tmpPath, err)
	}
	return tmpPath, size, nil
}

// install renames tmpPath over the store's file and fsyncs the
// directory; renamed says whether the new file is in place.
func (s *Store) install(tmpPath string) (renamed bool, err error) {
	if err := os.Rename(tmpPath, s.path); err != nil {
		os.Remove(tmpPath)
		return false, fmt.Errorf("deadletter: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return true, fmt.Errorf("deadletter: fsync directory %s: %w", s.dir, err)
	}
	return true, nil
}
