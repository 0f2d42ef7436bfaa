package localqueue

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestJournalCorruption damages the journal of a crashed queue in the ways
// a torn write, a bad disk or a stray write would, and checks that Open
// reports it (counted, logged at error level with the journal's path, the
// file kept as .bad), restores every record the damage did not hit, and
// goes on working.
//
// The journal holds, in order: COPY m0..m5 (in flight), MOVE m1 (deferred
// 10s), FIN m2. SyncEvery is 1, so go-diskqueue has persisted that it
// handed out m0..m5: a message whose COPY is lost is lost.
func TestJournalCorruption(t *testing.T) {
	const copy0, move, fin = 0, 6, 7 // record indexes
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, offs []int64, end int64)
		lost   []int // messages that cannot come back
		back   []int // finished messages that come back (their FIN was hit)
	}{
		{
			name: "truncated tail",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				truncate(t, path, offs[fin]+10)
			},
			back: []int{2},
		},
		{
			name: "bad checksum in the middle",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				flip(t, path, offs[copy0+3]+recordHeaderSize+20)
			},
			lost: []int{3},
		},
		{
			name: "garbage record",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				garbage := make([]byte, offs[copy0+5]-offs[copy0+4])
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range garbage {
					garbage[i] = byte(rng.Uint32())
				}
				writeAt(t, path, offs[copy0+4], garbage)
			},
			lost: []int{4},
		},
		{
			name: "garbage length",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				writeAt(t, path, offs[copy0], []byte{0xff, 0xff, 0xff, 0xf0})
			},
			lost: []int{0},
		},
		{
			name: "bad header",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				writeAt(t, path, 0, []byte("NOTAJRNL"))
			},
		},
		{
			name: "garbage appended",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				writeAt(t, path, end, bytes.Repeat([]byte{0x5a}, 100))
			},
		},
		{
			name: "MOVE lost",
			damage: func(t *testing.T, path string, offs []int64, end int64) {
				flip(t, path, offs[move]+recordHeaderSize+3)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			q := openQueue(t, Options{DataPath: t.TempDir(), SyncEvery: 1, now: clock.Now})
			ids := make([]ID, 6)
			for i := range ids {
				ids[i] = mustPut(t, q, fmt.Sprintf("m%d", i))
			}
			for i := range ids {
				if m := mustGet(t, q); m.ID != ids[i] {
					t.Fatalf("Get %d: got %q, want m%d", i, m.Body, i)
				}
			}
			if err := q.Requeue(ids[1], 10*time.Second); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			mustFinish(t, q, ids[2])
			dir := crashCopy(t, q)
			path := journalPath(dir, "q")
			offs, kinds, end := journalRecords(t, path)
			if want := []byte{1, 1, 1, 1, 1, 1, kindMove, kindFin}; !bytes.Equal(kinds, want) {
				t.Fatalf("journal records: got kinds %v, want %v", kinds, want)
			}
			tt.damage(t, path, offs, end)

			wants := map[ID]want{}
			for i, id := range ids {
				wants[id] = want{fmt.Sprintf("m%d", i), 2, time.Time{}}
			}
			if tt.name != "MOVE lost" {
				wants[ids[1]] = want{"m1", 2, start.Add(10 * time.Second)}
			}
			delete(wants, ids[2])
			for _, i := range tt.back {
				wants[ids[i]] = want{fmt.Sprintf("m%d", i), 2, time.Time{}}
			}
			for _, i := range tt.lost {
				delete(wants, ids[i])
			}

			core, logs := observer.New(zapcore.WarnLevel)
			q2 := openQueue(t, Options{DataPath: dir, SyncEvery: 1, now: clock.Now, Logger: zap.New(core)})
			if got := q2.Stats().JournalCorrupt; got == 0 {
				t.Errorf("JournalCorrupt: got 0, want the damage counted")
			}
			if !logsName(logs, path, zapcore.ErrorLevel) {
				t.Errorf("logs: got %v, want an error naming %s", messages(logs), path)
			}
			if _, err := os.Stat(path + ".bad"); err != nil {
				t.Errorf("damaged journal: got %v, want it kept as %s.bad", err, path)
			}
			expectExactly(t, q2, clock, wants, time.Minute)

			// The queue goes on working, and a clean restart finds no damage.
			id := mustPut(t, q2, "after")
			if m := mustGet(t, q2); m.ID != id {
				t.Fatalf("Get after recovery: got %q, want %q", m.Body, "after")
			}
			if err := q2.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			q3 := openQueue(t, Options{DataPath: dir, now: clock.Now})
			if got := q3.Stats().JournalCorrupt; got != 0 {
				t.Errorf("JournalCorrupt after a clean restart: got %d, want 0", got)
			}
			if m := mustGet(t, q3); m.ID != id || m.Attempts != 2 {
				t.Fatalf("after a clean restart: got %q attempts %d, want %q attempts 2", m.Body, m.Attempts, "after")
			}
		})
	}
}

// TestJournalUnreadable: a journal Open cannot read at all (a directory in
// its place) is an error naming the path, not a panic.
func TestJournalUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := journalPath(dir, "q")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	q, err := Open(Options{Name: "q", DataPath: dir, Scanner: idleScanner(t)})
	if err == nil {
		q.Close()
		t.Fatalf("Open with a directory as the journal: got nil error, want one")
	}
	if !bytes.Contains([]byte(err.Error()), []byte(filepath.Base(path))) {
		t.Fatalf("Open: got %v, want an error naming %s", err, path)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatalf("truncate: %v", err)
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	writeAt(t, path, off, []byte{b[off] ^ 0x40})
}

// countingReader counts ReadAt calls and the bytes they read.
type countingReader struct {
	r            io.ReaderAt
	reads, bytes int
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	c.bytes += len(p)
	return c.r.ReadAt(p, off)
}

// TestReplayReadsEachMiBOnce: replay reads a journal through a window of
// about 1 MiB, once per window, however many records each holds, and a
// damaged region in the middle does not change that. (Scanning each
// record's start for reserved zeros used to reload the window per record:
// 208k reads for a 32 MiB journal.)
func TestReplayReadsEachMiBOnce(t *testing.T) {
	b := journalHeader()
	const n = 20_000
	for i := range n {
		m := sampleMessage("a body of about a hundred bytes, a body of about a hundred bytes, a body of about a hundred", 1)
		m.ID[0], m.ID[1], m.ID[2] = byte(i), byte(i>>8), byte(i>>16)
		b = appendCopy(b, stateReady, m)
		if i == n/2 {
			b = append(b, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7) // damage
		}
	}
	b = append(b, make([]byte, 1<<20)...) // reserved tail
	cr := &countingReader{r: bytes.NewReader(b)}
	rp, err := replay(cr, int64(len(b)), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if len(rp.live) != n || rp.corrupt != 1 {
		t.Fatalf("replay: got %d live, %d damaged regions; want %d and 1", len(rp.live), rp.corrupt, n)
	}
	mib := len(b)>>20 + 1
	if cr.reads > 2*mib+4 || cr.bytes > 3*len(b) {
		t.Fatalf("reads of a %d-byte journal: got %d reads of %d bytes in all, want at most %d reads and %d bytes",
			len(b), cr.reads, cr.bytes, 2*mib+4, 3*len(b))
	}
	t.Logf("%d bytes: %d reads, %d bytes read", len(b), cr.reads, cr.bytes)
}
