package localqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	diskqueue "github.com/nsqio/go-diskqueue"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/internal/tmpfs"
)

// numbered is message i of the full-disk test: 1 KiB that says which
// message it is.
func numbered(i int) []byte {
	b := make([]byte, 1<<10)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

// TestFullDisk fills a real 4 MiB file system (a tmpfs) with a queue's
// data files. Each Put that cannot be stored says so (ENOSPC, naming the
// file); each one that returned nil, or ErrNotSynced (written, fsync
// failed), comes back once, in order and intact. The journal runs out of
// space too, through its memory mapping: that is an error it counts, not
// a SIGBUS (the process would die). Once drained, the queue stores and
// journals again.
func TestFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 4<<20)
	core, logs := observer.New(zapcore.ErrorLevel)
	start := time.Now()
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10, Logger: zap.New(core)})

	var stored []int // the messages the queue took, in Put order
	refused := 0
	for i := 0; refused < 20; i++ {
		if i == 100_000 {
			t.Fatalf("100000 Puts of 1 KiB into a 4 MiB file system: none refused")
		}
		_, err := q.Put(numbered(i))
		switch {
		case err == nil, errors.Is(err, ErrNotSynced):
			stored = append(stored, i)
		case errors.Is(err, syscall.ENOSPC) && strings.Contains(err.Error(), dir):
			refused++
		default:
			t.Fatalf("Put %d on a full disk: got %v, want nil, ErrNotSynced or ENOSPC naming a file under %s", i, err, dir)
		}
	}
	// The journal writes into space it reserved before: fill the rest of
	// the disk, then the journal's own reserve with deferred messages.
	filler := tmpfs.Fill(t, dir, 0)
	deferred := 0
	for {
		if deferred == 100_000 {
			t.Fatalf("100000 PutDeferred of 1 KiB on a full disk: none refused")
		}
		_, err := q.PutDeferred(numbered(-1), time.Hour)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, "q.journal")) {
				t.Fatalf("PutDeferred on a full disk: got %v, want ENOSPC naming the journal", err)
			}
			break
		}
		deferred++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, want := range stored {
		m, err := q.Get(ctx)
		if err != nil {
			t.Fatalf("Get (message %d next): %v", want, err)
		}
		if got := int(binary.BigEndian.Uint64(m.Body)); got != want || len(m.Body) != 1<<10 {
			t.Fatalf("Get: got message %d (%d bytes), want %d (1024 bytes)", got, len(m.Body), want)
		}
		if err := q.Finish(m.ID); err != nil {
			t.Fatalf("Finish message %d: %v", want, err)
		}
	}
	st := q.Stats()
	if st.Depth != 0 || st.InFlight != 0 || st.Deferred != deferred {
		t.Fatalf("after taking back every stored message: depth %d, in flight %d, deferred %d; want 0, 0, %d (the deferred ones taken, not the refused one)",
			st.Depth, st.InFlight, st.Deferred, deferred)
	}
	if st.JournalErrors == 0 {
		t.Fatalf("JournalErrors: got 0, want the journal to have met the full disk (%d messages stored, %d Puts refused)", len(stored), refused)
	}
	t.Logf("%d messages stored, %d Puts refused, %d deferred; journal errors %d, backend errors %d", len(stored), refused, deferred, st.JournalErrors, st.BackendErrors)
	// One line a second at most for the journal's failures, not one each.
	if lines, most := logs.FilterMessageSnippet("journal write failed").Len(), int(time.Since(start)/time.Second)+1; lines > most {
		t.Errorf("journal failures logged: got %d lines for %d failures in %v, want at most %d", lines, st.JournalErrors, time.Since(start).Round(time.Millisecond), most)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	journalErrs := st.JournalErrors
	if _, err := q.Put(numbered(1)); err != nil {
		t.Fatalf("Put after draining: %v", err)
	}
	m, err := q.Get(ctx)
	if err != nil {
		t.Fatalf("Get after draining: %v (decode errors %d: the message Put after the disk filled up lost?)", err, q.Stats().DecodeErrors)
	}
	if got := int(binary.BigEndian.Uint64(m.Body)); got != 1 {
		t.Fatalf("Get after draining: got message %d, want 1", got)
	}
	if err := q.Finish(m.ID); err != nil {
		t.Fatalf("Finish after draining: %v", err)
	}
	st = q.Stats()
	if st.JournalErrors != journalErrs || st.DecodeErrors != 0 {
		t.Fatalf("after draining: JournalErrors %d, DecodeErrors %d; want %d (no new failure) and 0", st.JournalErrors, st.DecodeErrors, journalErrs)
	}
}

// TestJournalOnNearlyFullDisk: with 64 KiB left on the disk, the journal
// still takes deferred messages of 1 KiB (it reserves ahead a megabyte
// at a time, and only the pages a record needs when that fails), and
// refuses the one that does not fit with ENOSPC naming the journal.
func TestJournalOnNearlyFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 2<<20)
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10})
	tmpfs.Fill(t, dir, 64<<10)
	n := 0
	for ; n < 1000; n++ {
		if _, err := q.PutDeferred(numbered(n), time.Hour); err != nil {
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, "q.journal")) {
				t.Fatalf("PutDeferred %d: got %v, want ENOSPC naming the journal", n, err)
			}
			break
		}
	}
	if n < 32 || n == 1000 {
		t.Fatalf("deferred messages of 1 KiB taken with 64 KiB free: got %d, want 32 to 64", n)
	}
	if got := q.Stats().Deferred; got != n {
		t.Fatalf("Deferred: got %d, want %d", got, n)
	}
}

// TestDiskqueueTearsAfterFailedWrite shows, on go-diskqueue alone, why
// the queue writes fillers (backendWriter): a write that fails part way
// (the disk is full) leaves its head past the last record; the reader,
// having read ahead into it, hands out the next record written there
// torn. If go-diskqueue stops doing that, this test fails, and fillers
// are no longer needed.
func TestDiskqueueTearsAfterFailedWrite(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	spare := tmpfs.Fill(t, dir, 300<<10)
	dq := diskqueue.New("raw", dir, DefaultMaxBytesPerFile, 0, 1<<20, 1, time.Hour, func(diskqueue.LogLevel, string, ...any) {})
	defer dq.Close()
	body := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 1000) }
	n := 0
	for ; ; n++ {
		if n == 1000 {
			t.Fatal("1000 records of 1000 bytes written into 300 KiB")
		}
		if err := dq.Put(body(n)); err != nil {
			break
		}
	}
	for i := range n {
		if got := <-dq.ReadChan(); !bytes.Equal(got, body(i)) {
			t.Fatalf("record %d of those written before the disk filled: read back wrong", i)
		}
	}
	if err := os.Remove(spare); err != nil {
		t.Fatal(err)
	}
	if err := dq.Put(body(n + 1)); err != nil {
		t.Fatalf("Put with room again: %v", err)
	}
	select {
	case got := <-dq.ReadChan():
		if bytes.Equal(got, body(n+1)) {
			t.Fatalf("go-diskqueue read back the record written after a failed write intact: fillers may no longer be needed")
		}
		if got[0] != byte(n) || got[len(got)-1] != byte(n+1) {
			t.Fatalf("record written after a failed write: got head %d and tail %d, want the failed write's head (%d) and its own tail (%d)", got[0], got[len(got)-1], n, n+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no record after the disk had room again")
	}
}
