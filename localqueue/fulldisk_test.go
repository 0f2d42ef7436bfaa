package localqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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
// a SIGBUS (the process would die). Drained, the disk is still full (of
// the journal's dead records); once some room is made, a Put tried again
// goes through within seconds and the queue journals again.
func TestFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 4<<20)
	spare := filepath.Join(dir, "spare") // room an operator makes at the end
	if err := os.WriteFile(spare, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
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
	ballast := tmpfs.Fill(t, dir, 0)
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
	// One line a second at most for each kind of failure, not one each.
	most := int(time.Since(start)/time.Second) + 1
	for _, kind := range []string{"journal write failed", "failed to sync"} {
		if lines := logs.FilterMessageSnippet(kind).Len(); lines > most {
			t.Errorf("%q logged: got %d lines in %v, want at most %d", kind, lines, time.Since(start).Round(time.Millisecond), most)
		}
	}

	for _, f := range []string{ballast, spare} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	journalErrs := st.JournalErrors
	// The journal's dead records fill most of the disk: a failed write
	// asks for a compaction (at most one a second), and a Put tried again
	// (as a caller does) finds room.
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = q.Put(numbered(1)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Put after draining, for 10 s: %v", err)
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
	// go-diskqueue leaves a temporary file behind for each write of its
	// metadata that failed: the queue removes them. (One may be there for
	// a write of it in progress now.)
	if temps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(temps) > 1 {
		t.Errorf("temporary files left: got %d (%s ...), want at most 1", len(temps), filepath.Base(temps[0]))
	}
	st = q.Stats()
	if st.JournalErrors != journalErrs || st.DecodeErrors != 0 {
		t.Fatalf("after draining: JournalErrors %d, DecodeErrors %d; want %d (no new failure) and 0", st.JournalErrors, st.DecodeErrors, journalErrs)
	}
}

// TestJournalOnNearlyFullDisk: with 192 KiB left on the disk, the journal
// still takes deferred messages of 1 KiB (it reserves ahead a megabyte or
// more at a time, and only the pages a record needs when that fails) but
// the last 64 KiB, which it keeps for a compaction, and refuses the one
// that does not fit with ENOSPC naming the journal.
func TestJournalOnNearlyFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 2<<20)
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10})
	tmpfs.Fill(t, dir, 192<<10)
	n := 0
	for ; n < 1000; n++ {
		if _, err := q.PutDeferred(numbered(n), time.Hour); err != nil {
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, "q.journal")) {
				t.Fatalf("PutDeferred %d: got %v, want ENOSPC naming the journal", n, err)
			}
			break
		}
	}
	// A COPY of 1 KiB takes about 1.1 KiB: 128 KiB hold over 100.
	if n < 100 || n > 128 {
		t.Fatalf("deferred messages of 1 KiB taken with 192 KiB free: got %d, want 100 to 128", n)
	}
	if got := q.Stats().Deferred; got != n {
		t.Fatalf("Deferred: got %d, want %d", got, n)
	}
}

// TestJournalNearlyFullWritesFreeSpaceOnce: on a nearly full disk the
// journal's reservation ahead fails after writing zeros into the room
// left. It must not try again at every page it appends, which wrote the
// disk's free space once per page. The kernel's count of the bytes this
// thread wrote (wchar in /proc/thread-self/io; the appends run on the
// caller's goroutine, locked to the thread) stays within a few times the
// free space while the journal takes deferred messages until the disk is
// full.
func TestJournalNearlyFullWritesFreeSpaceOnce(t *testing.T) {
	dir := tmpfs.Mount(t, 4<<20)
	q := openQueue(t, Options{DataPath: dir, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10})
	const free = 900 << 10
	tmpfs.Fill(t, dir, free)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadWritten(t)
	n := 0
	for ; n < 4000; n++ {
		if _, err := q.PutDeferred(numbered(n), time.Hour); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("PutDeferred %d: got %v, want ENOSPC", n, err)
			}
			break
		}
	}
	written := threadWritten(t) - before
	// A COPY of 1 KiB takes about 1.1 KiB.
	if n < free/1200 {
		t.Fatalf("deferred messages of 1 KiB taken with %d KiB free: got %d, want at least %d", free>>10, n, free/1200)
	}
	if written > 4*free {
		t.Fatalf("bytes written by %d appends with %d KiB free: got %d, want at most %d (4x the free space)", n, free>>10, written, 4*free)
	}
	t.Logf("%d deferred messages taken with %d KiB free; %d KiB written by the appends' system calls", n, free>>10, written>>10)
}

// threadWritten is the bytes the calling thread has passed to write(2)
// and its kin, as the kernel counts them (wchar).
func threadWritten(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/io")
	if err != nil {
		t.Fatalf("per-thread I/O counts: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/thread-self/io: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/thread-self/io has no wchar: %q", b)
	return 0
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

// TestJournalCompactionBacksOffWhileDiskStaysFull: a journal more than
// half dead, on a disk that stays full and has no room even for its live
// records: the first append that meets the full disk asks for a
// compaction (which fails too), and the appends that fail in the second
// after it do not ask again. Stats.JournalErrors counts the failed
// appends and that one failed compaction.
func TestJournalCompactionBacksOffWhileDiskStaysFull(t *testing.T) {
	dir := tmpfs.Mount(t, 8<<20)
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10})
	for i := range 400 { // live: 400 KiB
		if _, err := q.PutDeferred(numbered(i), time.Hour); err != nil {
			t.Fatalf("PutDeferred %d: %v", i, err)
		}
	}
	cycle(t, q, (*Queue).Put, numbered(0), 2000) // dead: a COPY and a FIN each
	tmpfs.Fill(t, dir, 0)
	before := q.Stats().JournalErrors
	for i := 0; ; i++ { // into the journal's reserve, until it is full too
		if i == 10_000 {
			t.Fatal("10000 PutDeferred of 1 KiB on a full disk: none refused")
		}
		if _, err := q.PutDeferred(numbered(i), time.Hour); err != nil {
			break
		}
	}
	const failing = 10
	for i := 1; i < failing; i++ {
		time.Sleep(20 * time.Millisecond) // a compaction asked for has time to run
		if _, err := q.PutDeferred(numbered(i), time.Hour); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("PutDeferred on a full disk: got %v, want ENOSPC", err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if got := q.Stats().JournalErrors - before; got != failing+1 {
		t.Fatalf("journal errors while the disk stayed full: got %d, want %d (the failed appends and one failed compaction)", got, failing+1)
	}
}

// TestJournalDeadRecordsFillingTheDisk: messages cycled one at a time
// (Put, Get, Finish) through a 2 MiB file system leave the journal a COPY
// and a FIN each: dead records, which alone fill the disk long before the
// journal reaches the size it is otherwise compacted at. The write that
// meets the full disk asks for a compaction, which the journal makes room
// for by giving up its reserved space (appends fail while it runs), and
// the cycle goes on: every message comes back, a Put refused meanwhile
// goes through when tried again, and few journal writes fail (at most one
// in 20).
func TestJournalDeadRecordsFillingTheDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 2<<20)
	q := openQueue(t, Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 64 << 10, MaxMsgSize: 4 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 5000 // 10 MiB of journal records
	for i := range n {
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err = q.Put(numbered(i)); err == nil || errors.Is(err, ErrNotSynced) {
				break
			}
		}
		if err != nil && !errors.Is(err, ErrNotSynced) {
			t.Fatalf("Put %d, for 5 s: %v (stats %+v)", i, err, q.Stats())
		}
		m, err := q.Get(ctx)
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
		if got := int(binary.BigEndian.Uint64(m.Body)); got != i {
			t.Fatalf("Get: got message %d, want %d", got, i)
		}
		if err := q.Finish(m.ID); err != nil {
			t.Fatalf("Finish %d: %v", i, err)
		}
	}
	st := q.Stats()
	if st.JournalCompactions == 0 || st.JournalErrors > n/20 {
		t.Fatalf("after %d messages: %d journal compactions, %d journal errors; want at least one compaction and at most %d errors", n, st.JournalCompactions, st.JournalErrors, n/20)
	}
	t.Logf("%d messages through 2 MiB: %d journal compactions, %d journal errors", n, st.JournalCompactions, st.JournalErrors)
}

// TestFailedSyncIsNoDamage: go-diskqueue's "failed to sync" on a full
// disk is an error it reports, not damage: it loses no record, so neither
// the dedup marker Open wrote nor the order around it. The messages Open
// restored still come after the backend's records from before the Open,
// and the stale-copy check goes on: the backend's copy of a requeued
// message is dropped, not delivered besides the restored message.
//
// Before the Close: m0..m2 put, then b0..b4; m0..m2 got, m2 requeued (its
// copy goes to the backend after b4). After the Open: restored m0..m2
// wait for the marker after m2's copy; on the full disk go-diskqueue's
// sync after a Put fails.
func TestFailedSyncIsNoDamage(t *testing.T) {
	dir := tmpfs.Mount(t, 2<<20)
	o := Options{DataPath: dir, SyncEvery: 1, MaxBytesPerFile: 1 << 20, MaxMsgSize: 64 << 10}
	q := openQueue(t, o)
	for _, body := range []string{"m0", "m1", "m2", "b0", "b1", "b2", "b3", "b4"} {
		mustPut(t, q, body)
	}
	var m2 ID
	for range 3 {
		m2 = mustGet(t, q).ID
	}
	if err := q.Requeue(m2, 0); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	q = openQueue(t, o)
	ballast := tmpfs.Fill(t, dir, 0)
	want := "[b0/1 b1/1 b2/1 b3/1 b4/1 m0/2 m1/2 m2/2]"
	// The data file's last page may have room for p: then only the sync
	// fails, and p comes after the marker.
	switch _, err := q.Put([]byte("p")); {
	case errors.Is(err, ErrNotSynced):
		want = "[b0/1 b1/1 b2/1 b3/1 b4/1 m0/2 m1/2 m2/2 p/1]"
	case !errors.Is(err, syscall.ENOSPC):
		t.Fatalf("Put on a full disk: got %v, want ENOSPC or ErrNotSynced", err)
	}
	eventually(t, "go-diskqueue's failed sync counted in BackendErrors", func() bool { return q.Stats().BackendErrors > 0 })
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := tryGet(t, q, 200*time.Millisecond); m != nil; m = tryGet(t, q, 200*time.Millisecond) {
		got = append(got, fmt.Sprintf("%s/%d", m.Body, m.Attempts))
		mustFinish(t, q, m.ID)
	}
	if fmt.Sprint(got) != want {
		t.Fatalf("deliveries (body/attempts) after a failed sync: got %v, want %s", got, want)
	}
	if st := q.Stats(); st.Duplicates != 1 {
		t.Fatalf("Duplicates: got %d, want 1 (m2's copy in the backend)", st.Duplicates)
	}
}
