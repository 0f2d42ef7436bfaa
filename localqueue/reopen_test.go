package localqueue

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// dataFileBytes is the size on disk of q's data files in dir, those
// go-diskqueue set aside as .bad included.
func dataFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "q.diskqueue.[0-9]*"))
	if err != nil {
		t.Fatalf("glob: %v", err)
	}
	var n int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		n += fi.Size()
	}
	return n
}

// TestRestartsKeepDataFilesBounded restarts a queue whose journal holds
// messages (in flight at Close, or requeued) again and again: the data
// files must not grow with the restarts, whether or not each run takes
// the messages again, and the last run gets each message exactly once.
func TestRestartsKeepDataFilesBounded(t *testing.T) {
	const restarts, n = 6, 20
	tests := []struct {
		name    string
		backlog int  // ready messages never taken, besides the n journaled ones
		requeue bool // the n messages are requeued before the first Close, not left in flight
		take    bool // each run takes the n messages again and leaves them in flight
	}{
		{name: "in flight, not taken again"},
		{name: "in flight, taken again by every run", take: true},
		{name: "requeued, not taken again", requeue: true},
		{name: "in flight behind a backlog", backlog: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			dir := t.TempDir()
			o := Options{DataPath: dir, now: clock.Now}
			q := openQueue(t, o)
			wants := map[ID]want{}
			for i := range n {
				body := fmt.Sprintf("journaled-%02d", i)
				wants[mustPut(t, q, body)] = want{body: body, attempts: 2}
			}
			for range n {
				m := mustGet(t, q)
				if tt.requeue {
					if err := q.Requeue(m.ID, 0); err != nil {
						t.Fatalf("Requeue: %v", err)
					}
				}
			}
			for i := range tt.backlog {
				body := fmt.Sprintf("backlog-%02d", i)
				wants[mustPut(t, q, body)] = want{body: body, attempts: 1}
			}
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			var sizes []int64
			for r := range restarts {
				q = openQueue(t, o)
				if tt.take {
					for range n {
						mustGet(t, q)
					}
					for id, w := range wants {
						wants[id] = want{body: w.body, attempts: r + 3}
					}
				}
				if err := q.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				sizes = append(sizes, dataFileBytes(t, dir))
			}
			for r, size := range sizes {
				if size > sizes[0] {
					t.Fatalf("data files after each of %d restarts: got %v bytes, want none above the first restart's (%d after restart %d)", restarts, sizes, size, r+1)
				}
			}

			q = openQueue(t, o)
			expectExactly(t, q, clock, wants, 0)
			t.Logf("data files after each restart: %v bytes", sizes)
		})
	}
}

// TestRestoredIntoDamagedDataFile: a clean Close leaves go-diskqueue
// writing to a data file whose unread part is then damaged. Open restores
// the messages that were in flight, and new messages are put; go-diskqueue
// sets the damaged file aside when its reader gets there. Every restored
// and every new message must be delivered in that same run: none may be
// in the file set aside, nor wait for another restart.
func TestRestoredIntoDamagedDataFile(t *testing.T) {
	const record = 4 + envelopeOverhead + 2 // go-diskqueue's length, envelope of a 2-byte body
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			clock := newFakeClock()
			o := Options{DataPath: t.TempDir(), now: clock.Now}
			q := openQueue(t, o)
			ids := make([]ID, 10)
			for i := range ids {
				ids[i] = mustPut(t, q, fmt.Sprintf("m%d", i))
			}
			for range 3 { // m0..m2 in flight
				mustGet(t, q)
			}
			if crash {
				o.DataPath = crashCopy(t, q)
			} else if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// m5's length prefix: go-diskqueue cannot find m5..m9 any more.
			path := filepath.Join(o.DataPath, "q.diskqueue.000000.dat")
			writeAt(t, path, 5*record, binary.BigEndian.AppendUint32(nil, 0xffffffff))

			q = openQueue(t, o)
			wants := map[ID]want{
				ids[0]: {"m0", 2, clock.Now()},
				ids[1]: {"m1", 2, clock.Now()},
				ids[2]: {"m2", 2, clock.Now()},
				ids[3]: {"m3", 1, time.Time{}},
				ids[4]: {"m4", 1, time.Time{}},
			}
			for i := range 3 {
				body := fmt.Sprintf("n%d", i)
				wants[mustPut(t, q, body)] = want{body, 1, time.Time{}}
			}
			expectExactly(t, q, clock, wants, 0)
			if st := q.Stats(); st.BackendErrors == 0 {
				t.Errorf("BackendErrors: got 0, want the damaged file counted")
			}
			if _, err := os.Stat(path + ".bad"); err != nil {
				t.Errorf("damaged file: got %v, want it set aside as %s.bad", err, path)
			}

			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			q = openQueue(t, o)
			if m := tryGet(t, q, 100*time.Millisecond); m != nil {
				t.Fatalf("after a clean restart: got %q (attempts %d), want nothing: every message was delivered and finished in the run before", m.Body, m.Attempts)
			}
		})
	}
}

// TestRestoredBodiesStayOnDisk: a queue with MemQueueSize 0 whose backlog
// is messages requeued with delay 0 (the journal holds them all) reopens
// without their bodies in memory: Get reads each back from the journal
// when it takes it. The heap grows by a small part of the bodies' size at
// Open, Stats counts the messages beyond the memory chan (MemDepth 0, as
// MemQueueSize 0 says), and each message is still delivered once after,
// with its attempts.
func TestRestoredBodiesStayOnDisk(t *testing.T) {
	const n, size = 5000, 4 << 10
	clock := newFakeClock()
	o := Options{DataPath: t.TempDir(), now: clock.Now}
	q := openQueue(t, o)
	wants := make(map[ID]want, n)
	for i := range n {
		body := fmt.Sprintf("%05d", i) + strings.Repeat("x", size-5)
		wants[mustPut(t, q, body)] = want{body: body, attempts: 2}
	}
	for range n {
		m := mustGet(t, q)
		if err := q.Requeue(m.ID, 0); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	before := heapLive()
	q = openQueue(t, o)
	grew := heapLive() - before
	const bodies, most = n * size, n * size / 5
	if grew > most {
		t.Errorf("heap after Open: got %d KiB more, want at most %d KiB (a fifth of the %d KiB of bodies the journal holds)", grew>>10, most>>10, bodies>>10)
	}
	st := q.Stats()
	if st.MemDepth != 0 || st.Depth < n || st.BackendDepth != st.Depth {
		t.Errorf("Stats after Open: got MemDepth %d, BackendDepth %d, Depth %d; want MemDepth 0 (MemQueueSize 0) and BackendDepth = Depth >= %d",
			st.MemDepth, st.BackendDepth, st.Depth, n)
	}
	t.Logf("heap after Open: %d KiB more for %d restored messages of %d bytes (%d bytes each); %+v", grew>>10, n, size, grew/n, st)
	expectExactly(t, q, clock, wants, 0)
}

// TestRestoredDeferredBodiesStayOnDisk: a queue reopened with deferred
// messages the journal holds (PutDeferred, due later) keeps them on the
// deferred heap without their bodies: the heap grows by a small part of
// the bodies' size at Open, and Stats counts them as deferred. Once due,
// each is read back from the journal and delivered once, with its body,
// attempts and due time.
func TestRestoredDeferredBodiesStayOnDisk(t *testing.T) {
	const n, size, delay = 5000, 4 << 10, time.Minute
	clock := newFakeClock()
	o := Options{DataPath: t.TempDir(), now: clock.Now}
	q := openQueue(t, o)
	wants := make(map[ID]want, n)
	due := clock.Now().Add(delay)
	for i := range n {
		body := fmt.Sprintf("%05d", i) + strings.Repeat("x", size-5)
		id, err := q.PutDeferred([]byte(body), delay)
		if err != nil {
			t.Fatalf("PutDeferred: %v", err)
		}
		wants[id] = want{body: body, attempts: 1, due: due}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	before := heapLive()
	q = openQueue(t, o)
	grew := heapLive() - before
	const bodies, most = n * size, n * size / 5
	if grew > most {
		t.Errorf("heap after Open: got %d KiB more, want at most %d KiB (a fifth of the %d KiB of deferred bodies the journal holds)", grew>>10, most>>10, bodies>>10)
	}
	if st := q.Stats(); st.Deferred != n || st.Depth != 0 {
		t.Errorf("Stats after Open: got Deferred %d, Depth %d; want Deferred %d, Depth 0", st.Deferred, st.Depth, n)
	}
	t.Logf("heap after Open: %d KiB more for %d restored deferred messages of %d bytes (%d bytes each)", grew>>10, n, size, grew/n)
	expectExactly(t, q, clock, wants, delay)
}

// heapLive is the size of the heap's live objects, after a garbage
// collection. (HeapInuse would also count the free slots of spans that
// garbage from before left partly used, which can hide most of a growth.)
func heapLive() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestRestoredReadBackAfterCompaction: the journal is compacted while
// restored messages wait, ready ones for Get and deferred ones for their
// due time, which moves their COPYs to the front of the file; each one's
// body is still read back, with its attempts (and a deferred one's due
// time).
func TestRestoredReadBackAfterCompaction(t *testing.T) {
	const n, taken, deferred, delay = 20, 15, 5, time.Minute
	clock := newFakeClock()
	o := Options{DataPath: t.TempDir(), SyncTimeout: time.Hour, now: clock.Now, journalCompactBytes: 1 << 10}
	q := openQueue(t, o)
	bodies := map[ID]string{}
	for i := range n {
		body := fmt.Sprintf("%02d", i) + strings.Repeat("x", 98)
		bodies[mustPut(t, q, body)] = body
	}
	for range n {
		if err := q.Requeue(mustGet(t, q).ID, 0); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	}
	wants := map[ID]want{}
	due := clock.Now().Add(delay)
	for i := range deferred {
		body := fmt.Sprintf("d%d", i) + strings.Repeat("y", 98)
		id, err := q.PutDeferred([]byte(body), delay)
		if err != nil {
			t.Fatalf("PutDeferred: %v", err)
		}
		wants[id] = want{body: body, attempts: 1, due: due}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	q = openQueue(t, o)
	offsets := func() map[ID]int64 {
		q.journal.mu.Lock()
		defer q.journal.mu.Unlock()
		offs := map[ID]int64{}
		for id := range wants {
			offs[id] = q.journal.live[id].off
		}
		return offs
	}
	before := offsets()
	for range taken { // the first in the journal; their FINs make it mostly dead
		m := mustGet(t, q)
		if string(m.Body) != bodies[m.ID] || m.Attempts != 2 {
			t.Fatalf("got %s %.8q... attempts %d, want %.8q... attempts 2", m.ID, m.Body, m.Attempts, bodies[m.ID])
		}
		mustFinish(t, q, m.ID)
		delete(bodies, m.ID)
	}
	eventually(t, "a journal compaction", func() bool { return q.Stats().JournalCompactions > 0 })
	for id, off := range offsets() {
		if off == before[id] {
			t.Fatalf("deferred %q after the compaction: got its COPY at offset %d still, want it moved", wants[id].body, off)
		}
	}
	for id, body := range bodies {
		wants[id] = want{body: body, attempts: 2}
	}
	expectExactly(t, q, clock, wants, delay)
}

// TestRestoredAfterEarlierRecords: Get hands out the messages Open
// restored after the data files' records from before this Open, as
// doc.go promises: a message in flight at Close comes after one that
// waited on disk; also when the data files hold nothing but an earlier
// Open's marker besides.
func TestRestoredAfterEarlierRecords(t *testing.T) {
	for _, reopens := range []int{1, 2} {
		t.Run(fmt.Sprintf("reopened %d times", reopens), func(t *testing.T) {
			clock := newFakeClock()
			o := Options{DataPath: t.TempDir(), now: clock.Now}
			q := openQueue(t, o)
			mustPut(t, q, "a")
			mustPut(t, q, "b")
			if m := mustGet(t, q); string(m.Body) != "a" {
				t.Fatalf("first Get: got %q, want a", m.Body)
			}
			for range reopens { // a stays in flight, then restored
				if err := q.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				q = openQueue(t, o)
			}
			var got []string
			for range 2 {
				m := mustGet(t, q)
				got = append(got, string(m.Body))
				if err := q.Finish(m.ID); err != nil {
					t.Fatalf("Finish: %v", err)
				}
			}
			if got[0] != "b" || got[1] != "a" {
				t.Fatalf("Gets after reopening: got %q, want [b a] (the record on disk first, then the restored one)", got)
			}
		})
	}
}
