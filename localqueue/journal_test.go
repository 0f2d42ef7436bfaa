package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// crashCopy copies the files in the DataPath of q, which the test keeps
// quiet, to a new directory: what a kill -9 at this moment would leave on
// disk (every write(2) has reached the page cache; nothing else has run).
// It first waits for go-diskqueue to finish a sync it may be doing. The
// lock file is left out, as the kernel drops a dead process's lock.
func crashCopy(t *testing.T, q *Queue) string {
	t.Helper()
	q.backend.Depth() // served by go-diskqueue's ioLoop after any pending sync
	dir, dst := q.opts.DataPath, t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("crash copy: %v", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // go-diskqueue's metadata temp file, renamed meanwhile
		}
		if err != nil {
			t.Fatalf("crash copy: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatalf("crash copy: %v", err)
		}
	}
	return dst
}

// want is what a restored message must look like on its next delivery.
type want struct {
	body     string
	attempts int       // on that delivery
	due      time.Time // Message.Due; zero: not checked
}

// expectExactly delivers everything q holds, advancing the fake clock to
// each deferred message's due time (up to horizon) to release it, and
// checks it against wants: each exactly once, as described, none before
// its due time, nothing else. It finishes each message it gets.
func expectExactly(t *testing.T, q *Queue, clock *fakeClock, wants map[ID]want, horizon time.Duration) {
	t.Helper()
	seen := map[ID]bool{}
	check := func(m *Message) {
		t.Helper()
		w, ok := wants[m.ID]
		switch {
		case !ok:
			t.Fatalf("got %s %q (attempts %d), which was finished or never acknowledged", m.ID, m.Body, m.Attempts)
		case seen[m.ID]:
			t.Fatalf("got %s %q twice, want once", m.ID, m.Body)
		case string(m.Body) != w.body || m.Attempts != w.attempts:
			t.Fatalf("got %s %q attempts %d, want %q attempts %d", m.ID, m.Body, m.Attempts, w.body, w.attempts)
		case !w.due.IsZero() && !m.Due.Equal(w.due):
			t.Fatalf("got %q due %v, want due %v", m.Body, m.Due, w.due)
		case m.Due.After(clock.Now()):
			t.Fatalf("got %q at %v, before its due time %v", m.Body, clock.Now(), m.Due)
		}
		seen[m.ID] = true
		mustFinish(t, q, m.ID)
	}
	for _, m := range drain(t, q) {
		check(m)
	}
	end := clock.Now().Add(horizon)
	for len(seen) < len(wants) {
		q.deferredMu.Lock()
		next := q.deferredPQ.Peek()
		q.deferredMu.Unlock()
		if next == nil || next.Deadline.After(end) {
			break
		}
		if d := next.Deadline.Sub(clock.Now()); d > 0 {
			clock.Add(d)
		}
		q.scan()
		for _, m := range drain(t, q) {
			check(m)
		}
	}
	if len(seen) != len(wants) {
		var missing []string
		for id, w := range wants {
			if !seen[id] {
				missing = append(missing, fmt.Sprintf("%q (attempts %d)", w.body, w.attempts))
			}
		}
		t.Fatalf("got %d of %d messages; missing %v", len(seen), len(wants), missing)
	}
}

// journaledScenario puts a queue with MemQueueSize 0 through every state a
// message can be in and returns what a restart must bring back: 6 never
// delivered, 7 in flight, 2 requeued now (back in the backend, still
// journaled), 2 requeued for later, 3 deferred by PutDeferred; 3 finished.
func journaledScenario(t *testing.T, q *Queue, clock *fakeClock) map[ID]want {
	t.Helper()
	start := clock.Now()
	wants := map[ID]want{}
	ids := make([]ID, 20)
	for i := range ids {
		ids[i] = mustPut(t, q, fmt.Sprintf("p%02d", i))
		wants[ids[i]] = want{fmt.Sprintf("p%02d", i), 1, start}
	}
	for i := range 3 {
		d := time.Duration(10*(i+1)) * time.Second
		id, err := q.PutDeferred(fmt.Appendf(nil, "d%d", i), d)
		if err != nil {
			t.Fatalf("PutDeferred: %v", err)
		}
		wants[id] = want{fmt.Sprintf("d%d", i), 1, start.Add(d)}
	}
	for i := range 14 {
		m := mustGet(t, q)
		if m.ID != ids[i] {
			t.Fatalf("Get %d: got %q, want p%02d (FIFO)", i, m.Body, i)
		}
		w := wants[m.ID]
		switch {
		case i < 3:
			mustFinish(t, q, m.ID)
			delete(wants, m.ID)
		case i < 5:
			if err := q.Requeue(m.ID, 5*time.Second); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			wants[m.ID] = want{w.body, 2, start.Add(5 * time.Second)}
		case i < 7:
			if err := q.Requeue(m.ID, 0); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			wants[m.ID] = want{w.body, 2, start}
		default: // left in flight: ready again after the restart
			wants[m.ID] = want{w.body, 2, time.Time{}}
		}
	}
	return wants
}

// TestJournalCrash: after a crash (a copy of the files of a live queue),
// every message whose Put returned and that was not finished comes back
// exactly once: ready, in flight (attempts kept), requeued now or for
// later, deferred (due time kept). With the default SyncEvery,
// go-diskqueue's metadata lags, so it hands out stale copies of the
// messages read before the crash again; they must be dropped.
func TestJournalCrash(t *testing.T) {
	tests := []struct {
		name      string
		syncEvery int64
		stale     bool // go-diskqueue re-reads records consumed before the crash
		noMap     bool // the journal appends with pwrite(2)
	}{
		{"SyncEvery=1", 1, false, false},
		{"SyncEvery=default", 0, true, false},
		{"SyncEvery=default, pwrite", 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			dir := t.TempDir()
			o := Options{DataPath: dir, SyncEvery: tt.syncEvery, SyncTimeout: time.Hour, now: clock.Now, journalNoMap: tt.noMap}
			q := openQueue(t, o)
			wants := journaledScenario(t, q, clock)
			crashed := crashCopy(t, q)

			clock.Add(time.Second)
			o.DataPath = crashed
			q2 := openQueue(t, o)
			if st := q2.Stats(); st.Deferred != 5 || st.Journaled != 14 {
				t.Fatalf("after the crash: got %d deferred and %d journaled, want 5 and 14", st.Deferred, st.Journaled)
			}
			for id, w := range wants {
				if w.due.IsZero() { // in flight at the crash: ready from the restart on
					wants[id] = want{w.body, w.attempts, clock.Now()}
				}
			}
			expectExactly(t, q2, clock, wants, time.Minute)
			if st := q2.Stats(); tt.stale && st.Duplicates == 0 {
				t.Errorf("Duplicates: got 0, want the stale copies go-diskqueue replayed counted")
			}
			if st := q2.Stats(); st.Journaled != 0 || st.JournalCorrupt != 0 {
				t.Errorf("after draining: got %d journaled, %d corrupt, want 0, 0", st.Journaled, st.JournalCorrupt)
			}

			// A crash after the drain brings nothing back.
			q3 := openQueue(t, Options{DataPath: crashCopy(t, q2), now: clock.Now})
			if m := tryGet(t, q3, 50*time.Millisecond); m != nil {
				t.Fatalf("after a drained crash: got %q, want nothing", m.Body)
			}
			if st := q3.Stats(); st.Deferred != 0 {
				t.Fatalf("after a drained crash: got %d deferred, want 0", st.Deferred)
			}
		})
	}
}

// TestJournalCrashTwice: a second crash before the first one's stale
// copies were read still brings everything back exactly once.
func TestJournalCrashTwice(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	o := Options{DataPath: dir, SyncTimeout: time.Hour, now: clock.Now}
	q := openQueue(t, o)
	wants := journaledScenario(t, q, clock)
	o.DataPath = crashCopy(t, q)
	q2 := openQueue(t, o) // restores, writes its marker, then crashes untouched
	clock.Add(time.Second)
	o.DataPath = crashCopy(t, q2)
	q3 := openQueue(t, o)
	expectExactly(t, q3, clock, wants, time.Minute)
}

// TestJournalMemoryChan: with MemQueueSize > 0, a message in the memory
// chan (or in flight from it) is memory-only; once deferred or requeued
// for later it is journaled and survives a crash.
func TestJournalMemoryChan(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	o := Options{DataPath: dir, MemQueueSize: 10, now: clock.Now}
	q := openQueue(t, o)
	start := clock.Now()
	mustPut(t, q, "in the chan")
	kept := mustPut(t, q, "requeued for later")
	mustPut(t, q, "in flight from the chan")
	deferred, err := q.PutDeferred([]byte("deferred"), 3*time.Second)
	if err != nil {
		t.Fatalf("PutDeferred: %v", err)
	}
	if m := mustGet(t, q); string(m.Body) != "in the chan" {
		t.Fatalf("Get: got %q, want %q", m.Body, "in the chan")
	} else if err := q.Requeue(m.ID, 0); err != nil { // back in the chan: memory-only
		t.Fatalf("Requeue: %v", err)
	}
	if m := mustGet(t, q); m.ID != kept {
		t.Fatalf("Get: got %q, want %q", m.Body, "requeued for later")
	} else if err := q.Requeue(m.ID, 2*time.Second); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	mustGet(t, q) // in flight from the chan: memory-only
	o.DataPath = crashCopy(t, q)
	q2 := openQueue(t, o)
	expectExactly(t, q2, clock, map[ID]want{
		kept:     {"requeued for later", 2, start.Add(2 * time.Second)},
		deferred: {"deferred", 1, start.Add(3 * time.Second)},
	}, 10*time.Second)
}

// TestCrashBeforeFirstSync: go-diskqueue writes its metadata only when it
// syncs; a new (or emptied) queue killed before that must still have every
// message whose Put returned.
func TestCrashBeforeFirstSync(t *testing.T) {
	tests := []struct {
		name  string
		empty bool // Empty the queue (which deletes the metadata) first
	}{
		{"new queue", false},
		{"after Empty", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			q := openQueue(t, Options{DataPath: dir, SyncTimeout: time.Hour, now: clock.Now})
			if tt.empty {
				mustPut(t, q, "dropped")
				if err := q.Empty(); err != nil {
					t.Fatalf("Empty: %v", err)
				}
			}
			wants := map[ID]want{}
			for i := range 50 {
				wants[mustPut(t, q, fmt.Sprintf("m%02d", i))] = want{fmt.Sprintf("m%02d", i), 1, time.Time{}}
			}
			q2 := openQueue(t, Options{DataPath: crashCopy(t, q), now: clock.Now})
			if got := q2.Depth(); got != 50 {
				t.Errorf("Depth after the crash: got %d, want 50", got)
			}
			expectExactly(t, q2, clock, wants, 0)
		})
	}
}

func TestJournalRecordRoundTrip(t *testing.T) {
	m := sampleMessage("hello", 3)
	tests := []struct {
		name string
		enc  []byte
		want jrec
	}{
		{"COPY in flight", appendCopy(nil, stateInFlight, m), jrec{kind: kindCopy, state: stateInFlight, id: m.ID, attempts: 3, due: m.Due}},
		{"COPY deferred, empty body", appendCopy(nil, stateDeferred, sampleMessage("", 0)), jrec{kind: kindCopy, state: stateDeferred, id: m.ID, due: m.Due}},
		{"MOVE", appendMove(nil, stateDeferred, m.ID, 7, m.Due), jrec{kind: kindMove, state: stateDeferred, id: m.ID, attempts: 7, due: m.Due}},
		{"FIN", appendFin(nil, m.ID), jrec{kind: kindFin, id: m.ID}},
		{"HIST", appendHist(nil, m.ID), jrec{kind: kindHist, id: m.ID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got jrec
			n, err := decodeJournalRecord(append(tt.enc, "next"...), &got)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if n != len(tt.enc) {
				t.Fatalf("size: got %d, want %d", n, len(tt.enc))
			}
			if got.kind != tt.want.kind || got.state != tt.want.state || got.id != tt.want.id ||
				got.attempts != tt.want.attempts || !got.due.Equal(tt.want.due) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if tt.want.kind == kindCopy && string(got.m.Body) != string(tt.enc[len(tt.enc)-4-len(got.m.Body):len(tt.enc)-4]) {
				t.Fatalf("COPY body: got %q", got.m.Body)
			}
		})
	}
}

func TestJournalRecordDecodeErrors(t *testing.T) {
	good := appendMove(nil, stateInFlight, ID{1}, 2, time.Unix(3, 0))
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name      string
		in        []byte
		truncated bool
	}{
		{"empty", nil, true},
		{"short header", good[:5], true},
		{"cut payload", good[:len(good)-1], true},
		{"length zero", mutate(func(b []byte) []byte { b[0], b[1], b[2], b[3] = 0, 0, 0, 0; return b }), false},
		{"length huge", mutate(func(b []byte) []byte { b[0] = 0xff; return b }), false},
		{"bad checksum", mutate(func(b []byte) []byte { b[5] ^= 1; return b }), false},
		{"flipped payload bit", mutate(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), false},
		{"unknown version", endRecord(append(good[:8:8], 9, kindFin), 0), false},
		{"unknown kind", endRecord(append(good[:8:8], journalVersion, 99), 0), false},
		{"unused kind 4", appendIDRecordOfKind(4, ID{1}), false},
		{"FIN of wrong size", endRecord(append(good[:8:8], journalVersion, kindFin, 1, 2), 0), false},
		{"MOVE with unknown state", endRecord(append(append(good[:8:8], journalVersion, kindMove, 9), make([]byte, moveSize-3)...), 0), false},
		{"COPY with bad envelope", endRecord(append(append(good[:8:8], journalVersion, kindCopy, stateInFlight), make([]byte, envelopeOverhead)...), 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r jrec
			_, err := decodeJournalRecord(tt.in, &r)
			if !errors.Is(err, ErrCorruptJournal) {
				t.Fatalf("got %v, want ErrCorruptJournal", err)
			}
			if got := errors.Is(err, errTruncated); got != tt.truncated {
				t.Fatalf("truncated: got %v (%v), want %v", got, err, tt.truncated)
			}
		})
	}
}

// journalRecords lists the offsets and kinds of the records of a journal,
// and where the last one ends (reserved zero bytes may follow).
func journalRecords(t *testing.T, path string) (offs []int64, kinds []byte, end int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read journal: %v", err)
	}
	off := journalHeaderSize
	for off < len(b) && !allZero(b[off:]) {
		var r jrec
		n, err := decodeJournalRecord(b[off:], &r)
		if err != nil {
			t.Fatalf("journal record at %d: %v", off, err)
		}
		offs, kinds = append(offs, int64(off)), append(kinds, r.kind)
		off += n
	}
	return offs, kinds, int64(off)
}

// appendIDRecordOfKind encodes a well-formed record of any kind with an
// ID payload, for kinds the format does not define.
func appendIDRecordOfKind(kind byte, id ID) []byte {
	dst, start := beginRecord(nil, kind)
	dst = append(dst, id[:]...)
	return endRecord(dst, start)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TestJournalLazy: a disk queue whose journal holds nothing keeps neither
// its file open nor a syncer goroutine; the first journaled message opens it.
func TestJournalLazy(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, Options{DataPath: dir})
	opened := func() bool {
		q.journal.mu.Lock()
		defer q.journal.mu.Unlock()
		return q.journal.out != nil
	}
	mustPut(t, q, "x") // ready in the backend: not journaled
	if opened() {
		t.Fatalf("after a Put: got the journal open, want it closed until something is journaled")
	}
	m := mustGet(t, q)
	if !opened() {
		t.Fatalf("after a Get from the backend: got the journal closed, want it open")
	}
	mustFinish(t, q, m.ID)
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	q = openQueue(t, Options{DataPath: dir})
	if opened() {
		t.Fatalf("after reopening an empty journal: got it open, want it closed")
	}
	if st := q.Stats(); st.JournalBytes != journalHeaderSize || st.Journaled != 0 {
		t.Fatalf("Stats: got %d bytes, %d journaled, want %d and 0", st.JournalBytes, st.Journaled, journalHeaderSize)
	}
}
