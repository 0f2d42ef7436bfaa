package localqueue

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// The journal's fsync policy follows SyncEvery and SyncTimeout:
//
//   - SyncEvery 1: every record is fsynced (fdatasync on Linux) before the
//     operation that appended it returns, under the journal's lock.
//   - SyncEvery N > 1: after every N COPY and MOVE records, or SyncTimeout
//     after the first record appended since the last fsync began, the
//     syncer goroutine fsyncs the journal while the queue goes on (an
//     fsync takes milliseconds; holding every journaled operation for it
//     cost more than the rest of the journal together). FIN records do
//     not count toward N: losing one can only bring a finished message
//     back (at-least-once), so it rides along with the next fsync, within
//     SyncTimeout. A power loss can lose the records appended since the
//     start of the last fsync that completed: at most about 2N COPY and
//     MOVE records with the FINs among them, or SyncTimeout plus the
//     duration of one fsync.
//
// The rename of a compaction counts as a record: the directory is
// fsynced with the next fsync of the journal.
//
// The journal's background goroutine (the syncer) does those fsyncs and
// the compactions (see journal_compact.go). It runs from the journal's
// first record (see openLocked) until close.

// startSyncer starts the background goroutine.
func (j *journal) startSyncer() {
	j.syncReq = make(chan struct{}, 1)
	j.dirty = make(chan struct{}, 1)
	j.compactReq = make(chan struct{}, 1)
	j.stop = make(chan struct{})
	j.wg.Add(1)
	go j.syncLoop()
}

// stopSyncer stops the background goroutine and waits for it (and for the
// fsync or compaction it is doing). Only close calls it, once.
func (j *journal) stopSyncer() {
	if j.stop == nil {
		return // never started
	}
	close(j.stop)
	j.wg.Wait()
}

func (j *journal) syncLoop() {
	defer j.wg.Done()
	timer := time.NewTimer(j.syncTimeout)
	timer.Stop()
	armed := false
	for {
		select {
		case <-j.dirty:
			if !armed {
				timer.Reset(j.syncTimeout)
				armed = true
			}
			continue
		case <-timer.C:
			armed = false
		case <-j.syncReq:
			if armed {
				timer.Stop()
				armed = false
			}
		case <-j.compactReq:
			j.compactBackground()
			continue
		case <-j.stop:
			timer.Stop()
			return
		}
		j.backgroundSync()
	}
}

// backgroundSync fsyncs the current file without holding mu.
func (j *journal) backgroundSync() {
	j.mu.Lock()
	a := j.out
	if a == nil {
		j.mu.Unlock()
		return
	}
	j.unsynced = 0
	dir := j.dirDirty
	j.dirDirty = false
	j.syncing = a
	j.mu.Unlock()

	err := a.sync()
	var derr error
	if dir {
		derr = syncDir(filepath.Dir(j.path))
	}

	j.mu.Lock()
	j.syncing = nil
	if j.retired == a {
		j.retired = nil
		a.discard()
	}
	j.mu.Unlock()
	if err != nil || derr != nil {
		j.counters.errors.Add(1)
		j.log.Error("journal fsync failed", zap.String("file", j.path), zap.NamedError("file_error", err), zap.NamedError("dir_error", derr))
	}
}

// afterWriteLocked applies the compaction trigger (the background
// goroutine compacts) and the fsync policy. counts is false for a FIN:
// with SyncEvery above 1 it does not count toward the next fsync (losing
// one to a power loss can only bring a finished message back, never lose
// one), it just rides along with it.
func (j *journal) afterWriteLocked(counts bool) {
	if counts || j.syncEvery <= 1 {
		j.unsynced++
	}
	if j.wantCompactLocked() {
		signal(j.compactReq)
	}
	switch {
	case j.syncEvery <= 1:
		j.syncLocked()
	case j.unsynced >= j.syncEvery:
		j.unsynced = 0
		signal(j.syncReq)
	case j.unsynced <= 1:
		signal(j.dirty)
	}
}

// syncLocked fsyncs under mu (SyncEvery 1).
func (j *journal) syncLocked() {
	j.unsynced = 0
	if err := j.out.sync(); err != nil {
		j.counters.errors.Add(1)
		j.log.Error("journal fsync failed", zap.String("file", j.path), zap.Error(err))
	}
	if j.dirDirty {
		j.dirDirty = false
		if err := syncDir(filepath.Dir(j.path)); err != nil {
			j.counters.errors.Add(1)
			j.log.Error("journal: fsync of the directory failed", zap.String("file", j.path), zap.Error(err))
		}
	}
}

// sync fsyncs the journal now (and its directory, if a rename awaits it),
// whatever SyncEvery says, and returns what failed.
func (j *journal) sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.out == nil {
		return nil // nothing written yet
	}
	j.unsynced = 0
	err := j.out.sync()
	if j.dirDirty {
		j.dirDirty = false
		err = errors.Join(err, syncDir(filepath.Dir(j.path)))
	}
	if err != nil {
		j.counters.errors.Add(1)
		return fmt.Errorf("localqueue: fsync of %s: %w", j.path, err)
	}
	return nil
}
