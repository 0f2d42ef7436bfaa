package localqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDuplicateKeepsLiveJournalState: a backend copy of a message in
// flight (go-diskqueue replays after a crash) is dropped without touching
// the journal's record of the live delivery, so that a crash afterwards
// restores the live delivery's attempts, not the copy's.
func TestDuplicateKeepsLiveJournalState(t *testing.T) {
	clock := newFakeClock()
	o := Options{
		DataPath: t.TempDir(), SyncTimeout: time.Hour, MaxAttempts: 3, now: clock.Now,
		OnDead: func(m *Message) {
			t.Errorf("dead-lettered %q after %d attempts, want it redelivered", m.Body, m.Attempts)
		},
	}
	q := openQueue(t, o)
	id, other := queueStaleCopyOfLive(t, q, 5)
	q.journal.mu.Lock()
	e := q.journal.live[id]
	q.journal.mu.Unlock()
	if e.state != stateInFlight || e.attempts != 1 {
		t.Fatalf("journal entry of the live delivery: got state %d attempts %d, want in flight (%d), 1", e.state, e.attempts, stateInFlight)
	}

	o.DataPath = crashCopy(t, q)
	q2 := openQueue(t, o)
	expectExactly(t, q2, clock, map[ID]want{
		id:    {"x", 2, clock.Now()},
		other: {"y", 2, clock.Now()},
	}, 0)
}

// TestRestartDeadLettersSpentDelivery: a message in flight on its
// MaxAttempts-th delivery when the queue stops is dead-lettered by the
// next Open (the delivery cut short counts), after a clean Close as after
// a crash.
func TestRestartDeadLettersSpentDelivery(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			clock := newFakeClock()
			var mu sync.Mutex
			var dead []Message
			o := Options{
				DataPath: t.TempDir(), SyncTimeout: time.Hour, MaxAttempts: 1, now: clock.Now,
				OnDead: func(m *Message) { mu.Lock(); dead = append(dead, *m); mu.Unlock() },
			}
			q := openQueue(t, o)
			spent := mustPut(t, q, "spent")
			kept := mustPut(t, q, "kept")
			if m := mustGet(t, q); m.ID != spent {
				t.Fatalf("Get: got %q, want %q", m.Body, "spent")
			}
			if crash {
				o.DataPath = crashCopy(t, q)
			} else if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			q2 := openQueue(t, o)
			mu.Lock()
			got := dead
			mu.Unlock()
			if len(got) != 1 || got[0].ID != spent || got[0].Attempts != 1 || string(got[0].Body) != "spent" {
				t.Fatalf("OnDead at Open: got %+v, want one call with %s, attempts 1", got, spent)
			}
			if st := q2.Stats(); st.Dead != 1 || st.Journaled != 0 {
				t.Fatalf("Stats after Open: got dead %d, journaled %d, want 1, 0", st.Dead, st.Journaled)
			}
			expectExactly(t, q2, clock, map[ID]want{kept: {"kept", 1, clock.Now()}}, 0)
		})
	}
}

// TestStaleCheckStopsAfterDamage: when the backend loses data before the
// dedup marker, the stale-copy check stops, so that a stale copy may be
// delivered twice but no live message is dropped; and the messages Open
// restored, which wait for the marker, are delivered all the same.
//
// Before the crash: m0..m5 put, m0..m2 delivered (journaled, in flight), d
// deferred for 10s. go-diskqueue never synced its read position, so it
// hands out m0..m5 (data file 0) again; Open writes its marker to data
// file 1 and keeps the restored m0..m2 in memory; d goes to the backend
// when it is due.
func TestStaleCheckStopsAfterDamage(t *testing.T) {
	const record = 4 + envelopeOverhead + 2 // go-diskqueue's length, envelope of a 2-byte body
	tests := []struct {
		name string
		// damage is written to data file file at off: file 0 before Open,
		// file 1 (not read yet) after it
		file   int
		off    int64
		damage []byte
		want   map[string]int // deliveries per body, each finished at once
		decode uint64
	}{
		{
			name: "a record that does not decode", file: 0, off: record + 4 + envelopeHeader, damage: []byte("zz"),
			// m0's stale copy is dropped; m1's does not decode, which
			// stops the check, so m2's stale copy is delivered besides
			// the restored m2.
			want:   map[string]int{"m0": 1, "m1": 1, "m2": 2, "m3": 1, "m4": 1, "m5": 1, "d": 1},
			decode: 1,
		},
		{
			name: "the marker's file is skipped", file: 1, off: 0, damage: []byte{0xff, 0xff, 0xff, 0xff},
			// The stale copies of m0..m2 are dropped; go-diskqueue skips
			// file 1 and the marker with it, so the restored m0..m2 go
			// once it reports the damage; d, due later and written to
			// file 2, must not be taken for a stale copy.
			want: map[string]int{"m0": 1, "m1": 1, "m2": 1, "m3": 1, "m4": 1, "m5": 1, "d": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			o := Options{DataPath: t.TempDir(), SyncTimeout: time.Hour, now: clock.Now}
			q := openQueue(t, o)
			for i := range 6 {
				mustPut(t, q, fmt.Sprintf("m%d", i))
			}
			if _, err := q.PutDeferred([]byte("d"), 10*time.Second); err != nil {
				t.Fatalf("PutDeferred: %v", err)
			}
			for range 3 {
				mustGet(t, q)
			}
			o.DataPath = crashCopy(t, q)
			damage := func() {
				writeAt(t, filepath.Join(o.DataPath, fmt.Sprintf("q.diskqueue.%06d.dat", tt.file)), tt.off, tt.damage)
			}
			if tt.file == 0 {
				damage()
			}
			q2 := openQueue(t, o)
			if tt.file != 0 {
				damage()
			}
			got := map[string]int{}
			deliver := func() {
				for {
					m := tryGet(t, q2, 200*time.Millisecond)
					if m == nil {
						return
					}
					got[string(m.Body)]++
					mustFinish(t, q2, m.ID)
				}
			}
			deliver()
			clock.Add(10 * time.Second)
			q2.scan()
			deliver()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("deliveries: got %v, want %v", got, tt.want)
			}
			if st := q2.Stats(); st.DecodeErrors != tt.decode {
				t.Fatalf("DecodeErrors: got %d, want %d", st.DecodeErrors, tt.decode)
			}

			if err := q2.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			q3 := openQueue(t, o)
			var back []string
			for _, m := range drain(t, q3) {
				back = append(back, string(m.Body))
			}
			if len(back) != 0 {
				t.Fatalf("after a clean restart: got %v back, want nothing: every message was delivered and finished", back)
			}
		})
	}
}

// TestDamageBeforeMarkerKeepsRestoredOrder: damage that go-diskqueue
// reports while Open starts it, before Open writes its dedup marker (or
// takes over an earlier Open's), cannot have taken that marker: so the
// messages Open restored still come after the backend's records from
// before this Open that survived the damage, and the stale-copy check
// goes on until the marker.
//
// Before the reopens: x, a put to data file 0; x delivered and requeued
// (the journal holds it, ready, and its copy goes to data file 1); c put
// to data file 1; Close. Before the last reopen, a's length prefix is
// damaged: go-diskqueue's first read at Open fails, and it sets file 0
// aside with a. The first reopen writes a marker to a data file of its
// own; a second one takes that marker over.
func TestDamageBeforeMarkerKeepsRestoredOrder(t *testing.T) {
	const record = 4 + envelopeOverhead + 1 // go-diskqueue's length, envelope of a 1-byte body
	for _, reopens := range []int{1, 2} {
		t.Run(fmt.Sprintf("reopened %d times", reopens), func(t *testing.T) {
			clock := newFakeClock()
			o := Options{DataPath: t.TempDir(), MaxMsgSize: 1, MaxBytesPerFile: 2 * record, now: clock.Now}
			q := openQueue(t, o)
			mustPut(t, q, "x")
			mustPut(t, q, "a")
			m := mustGet(t, q)
			if string(m.Body) != "x" {
				t.Fatalf("first Get: got %q, want x", m.Body)
			}
			if err := q.Requeue(m.ID, 0); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			mustPut(t, q, "c")
			for range reopens - 1 {
				if err := q.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				q = openQueue(t, o)
			}
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			file0 := filepath.Join(o.DataPath, "q.diskqueue.000000.dat")
			writeAt(t, file0, record, []byte{0xff, 0xff, 0xff, 0xff})

			q = openQueue(t, o)
			if reused := q.backend.reusedMarker() != 0; reused != (reopens == 2) {
				t.Fatalf("marker taken over from the earlier Open: got %v, want %v", reused, reopens == 2)
			}
			if st := q.Stats(); st.BackendErrors == 0 {
				t.Fatalf("BackendErrors after Open: got 0, want the damaged data file counted before Open returned")
			}
			var got []string
			for _, m := range drain(t, q) {
				got = append(got, fmt.Sprintf("%s/%d", m.Body, m.Attempts))
				mustFinish(t, q, m.ID)
			}
			if fmt.Sprint(got) != "[c/1 x/2]" {
				t.Fatalf("deliveries after Open: got %v, want [c/1 x/2] (the record from before Open that survived the damage, then the restored x)", got)
			}
			if st := q.Stats(); st.Duplicates != 1 {
				t.Errorf("Duplicates: got %d, want 1 (x's copy in data file 1, dropped as stale)", st.Duplicates)
			}
			if _, err := os.Stat(file0 + ".bad"); err != nil {
				t.Errorf("damaged data file: got %v, want it set aside as %s.bad", err, file0)
			}
		})
	}
}

// TestDamageAfterMarkerReleasesRestored: when go-diskqueue skips the data
// file with this Open's marker and the backend then holds nothing more,
// no record Get reads can tell it so: the damage report itself lets the
// restored messages go, to a Get already waiting for them.
//
// Before the crash: m0..m2 put and delivered (journaled, in flight);
// go-diskqueue never synced its read position, so it hands out their
// stale copies (data file 0) again, and Open writes its marker to data
// file 1, which is then damaged.
func TestDamageAfterMarkerReleasesRestored(t *testing.T) {
	clock := newFakeClock()
	o := Options{DataPath: t.TempDir(), SyncTimeout: time.Hour, now: clock.Now}
	q := openQueue(t, o)
	want := map[string]bool{}
	for i := range 3 {
		body := fmt.Sprintf("m%d", i)
		mustPut(t, q, body)
		want[body] = true
	}
	for range 3 {
		mustGet(t, q)
	}
	o.DataPath = crashCopy(t, q)
	q = openQueue(t, o)
	writeAt(t, filepath.Join(o.DataPath, "q.diskqueue.000001.dat"), 0, []byte{0xff, 0xff, 0xff, 0xff})

	got := map[string]bool{}
	for range 3 {
		m := mustGet(t, q)
		if got[string(m.Body)] || !want[string(m.Body)] {
			t.Fatalf("got %q (attempts %d) after %v, want each of %v once", m.Body, m.Attempts, got, want)
		}
		got[string(m.Body)] = true
		mustFinish(t, q, m.ID)
	}
	if st := q.Stats(); st.Duplicates != 3 || st.BackendErrors == 0 {
		t.Fatalf("Stats: got Duplicates %d, BackendErrors %d; want 3 stale copies dropped and the damaged file counted", st.Duplicates, st.BackendErrors)
	}
}

// TestScannerDeactivateRechecks: a timer pushed while a worker is about to
// take its queue out of the active set (the push sees the queue still
// active and does not activate it) is not stranded: deactivate checks
// again and puts the queue back.
func TestScannerDeactivateRechecks(t *testing.T) {
	clock := newFakeClock()
	var once atomic.Bool
	pushed := make(chan error, 1)
	var q *Queue
	s := startScanner(t, ScannerOptions{ScanInterval: time.Millisecond, afterIdleScan: func(sq *Queue) {
		if sq == q && once.CompareAndSwap(false, true) {
			_, err := q.PutDeferred([]byte("late"), time.Second)
			pushed <- err
		}
	}})
	q = openQueue(t, Options{MemQueueSize: 10, Scanner: s, now: clock.Now})
	if _, err := q.PutDeferred([]byte("first"), time.Second); err != nil {
		t.Fatalf("PutDeferred: %v", err)
	}
	clock.Add(time.Second) // the scanner releases "first" and finds q idle
	if err := <-pushed; err != nil {
		t.Fatalf("PutDeferred while q was leaving the active set: %v", err)
	}
	clock.Add(time.Second)
	eventually(t, `the scanner releases "late"`, func() bool { return q.Depth() == 2 })
	for _, body := range []string{"first", "late"} {
		if m := mustGet(t, q); string(m.Body) != body {
			t.Fatalf("Get: got %q, want %q", m.Body, body)
		}
	}
}

// TestJournalLiveBytes: the journal counts as live only the COPY records of
// live messages, not the FINs a compaction keeps, and compaction does not
// rewrite those FINs over and over.
func TestJournalLiveBytes(t *testing.T) {
	const cycles = 300
	q := openQueue(t, Options{DataPath: t.TempDir(), SyncTimeout: time.Hour, journalCompactBytes: 4 << 10})
	j := q.journal
	check := func(when string) {
		t.Helper()
		j.mu.Lock()
		var copies int64
		for _, e := range j.live {
			copies += int64(e.size)
		}
		got := j.liveBytes
		j.mu.Unlock()
		if got != copies {
			t.Fatalf("%s: liveBytes: got %d, want %d (the live COPY records)", when, got, copies)
		}
	}
	var held []ID
	for i := range cycles {
		mustPut(t, q, fmt.Sprintf("m%03d", i))
		m := mustGet(t, q)
		if i%50 == 0 {
			held = append(held, m.ID)
		} else {
			mustFinish(t, q, m.ID)
		}
		settleCompaction(t, q)
	}
	st := q.Stats()
	if st.JournalCompactions == 0 || st.JournalCompactions > cycles/10 {
		t.Fatalf("compactions: got %d in %d cycles, want 1 to %d", st.JournalCompactions, cycles, cycles/10)
	}
	t.Logf("%d cycles: %d compactions", cycles, st.JournalCompactions)
	check(fmt.Sprintf("%d in flight", len(held)))
	for _, id := range held {
		mustFinish(t, q, id)
	}
	check("nothing live")
}

// TestFinishWritesFINOutsideInFlightLock: a Finish waiting for the journal
// (an fsync, with SyncEvery 1) does not hold the in-flight lock that Get,
// Touch, Requeue and the scanner need.
func TestFinishWritesFINOutsideInFlightLock(t *testing.T) {
	q := openQueue(t, Options{DataPath: t.TempDir(), SyncEvery: 1})
	mustPut(t, q, "a")
	mustPut(t, q, "b")
	a, b := mustGet(t, q), mustGet(t, q)

	q.journal.mu.Lock() // the journal is busy
	finished := make(chan error, 1)
	go func() { finished <- q.Finish(a.ID) }()
	waitForGoroutine(t, "Finish waiting for the journal", "localqueue.(*journal).fin(")
	touched := make(chan error, 1)
	go func() { touched <- q.Touch(b.ID) }()
	select {
	case err := <-touched:
		q.journal.mu.Unlock()
		if err != nil {
			t.Fatalf("Touch: %v", err)
		}
	case <-time.After(10 * time.Second):
		q.journal.mu.Unlock()
		<-touched
		t.Fatalf("Touch of another message: still blocked after 10s while a Finish waited for the journal, want it done")
	}
	if err := <-finished; err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

// TestCompactionKeepsTail: records appended while the background
// compaction rewrites the journal (a FIN, a MOVE, a new COPY) are carried
// over to the new file, and a crash right after it restores exactly what
// is live.
func TestCompactionKeepsTail(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	o := Options{DataPath: t.TempDir(), SyncTimeout: time.Hour, now: clock.Now}
	q := openQueue(t, o)
	j := q.journal
	var ids [4]ID
	for i := range ids {
		ids[i] = mustPut(t, q, fmt.Sprintf("m%d", i))
	}
	for range 3 {
		mustGet(t, q)
	}

	j.compactMu.Lock()
	j.mu.Lock()
	old, s := j.out, j.snapshotLocked()
	j.mu.Unlock()
	mustFinish(t, q, ids[0])                               // FIN in the tail
	if err := q.Requeue(ids[1], time.Minute); err != nil { // MOVE in the tail
		t.Fatalf("Requeue: %v", err)
	}
	if m := mustGet(t, q); m.ID != ids[3] { // COPY in the tail
		t.Fatalf("Get: got %q, want m3", m.Body)
	}
	rw, err := j.rewrite(old.f, s)
	if err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	j.mu.Lock()
	tail := old.size - s.end
	err = j.installLocked(old, rw, s.end)
	for id, e := range j.live {
		if m, _, rerr := readCopy(j.out.f, e, nil); rerr != nil || m.ID != id {
			err = errors.Join(err, fmt.Errorf("live %s at %d: got %s, %v, want its COPY", id, e.off, m.ID, rerr))
		}
	}
	j.mu.Unlock()
	j.compactMu.Unlock()
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	if tail == 0 {
		t.Fatalf("tail: got 0 bytes appended during the rewrite, want the FIN, MOVE and COPY")
	}

	clock.Add(time.Second)
	o.DataPath = crashCopy(t, q)
	q2 := openQueue(t, o)
	expectExactly(t, q2, clock, map[ID]want{
		ids[1]: {"m1", 2, start.Add(time.Minute)},
		ids[2]: {"m2", 2, clock.Now()},
		ids[3]: {"m3", 2, clock.Now()},
	}, 2*time.Minute)
}

// TestMemoryOverflowOrder: in memory mode, while the FIFO behind the
// memory chan holds messages, new ones queue behind them instead of
// taking the chan's free room, so none is overtaken (or starved).
func TestMemoryOverflowOrder(t *testing.T) {
	q := openQueue(t, Options{MemQueueSize: 2})
	for _, b := range []string{"a", "b", "c", "d"} { // a, b in the chan; c, d in the FIFO
		mustPut(t, q, b)
	}
	var got []string
	m := mustGet(t, q)
	got = append(got, string(m.Body))
	mustPut(t, q, "e") // the chan has room, but c and d are older
	for range 4 {
		got = append(got, string(mustGet(t, q).Body))
	}
	if want := "[a b c d e]"; fmt.Sprint(got) != want {
		t.Fatalf("delivery order: got %v, want %s", got, want)
	}
}
