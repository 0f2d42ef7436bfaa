package localqueue

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	diskqueue "github.com/nsqio/go-diskqueue"
)

// TestFileRollLeavesNothingBehind: messages cycled one at a time through
// data files of 64 KiB (three of them filled): each file go-diskqueue has
// read whole is gone, none is left as .bad, and nothing counts as a
// backend error.
func TestFileRollLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir, MaxBytesPerFile: 64 << 10, MaxMsgSize: 4 << 10})
	cycle(t, q, (*Queue).Put, numbered(0), 200)
	if _, err := q.Put(numbered(1)); err != nil { // a write after the last roll
		t.Fatal(err)
	}
	bad, _ := filepath.Glob(filepath.Join(dir, "*.bad"))
	data, _ := filepath.Glob(filepath.Join(dir, "*.diskqueue.[0-9]*.dat"))
	if st := q.Stats(); len(bad) != 0 || st.BackendErrors != 0 || len(data) != 1 {
		t.Fatalf("after 200 messages through files of 64 KiB: %d .bad files, %d data files, %d backend errors; want 0, 1 and 0", len(bad), len(data), st.BackendErrors)
	}
}

// TestDiskqueueSetsAsideFilesReadWhole shows, on go-diskqueue alone, why
// rolledFiles exists: a reader that keeps up with the writer meets the
// end of each file it has read whole, and the file is renamed .bad and
// left on disk. If go-diskqueue stops doing that, this test fails, and
// rolledFiles is no longer needed.
func TestDiskqueueSetsAsideFilesReadWhole(t *testing.T) {
	dir := t.TempDir()
	dq := diskqueue.New("raw", dir, 64<<10, 0, 1<<20, 2500, time.Hour, func(diskqueue.LogLevel, string, ...any) {})
	defer dq.Close()
	body := bytes.Repeat([]byte{1}, 1000)
	for range 200 {
		if err := dq.Put(body); err != nil {
			t.Fatal(err)
		}
		<-dq.ReadChan()
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) == 0 {
		t.Fatal("go-diskqueue left no .bad file after 200 records through files of 64 KiB read as written: rolledFiles may no longer be needed")
	}
}
