package localqueue

import (
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestReplace: Replace finishes the delivery and adds the new body, due
// after its delay, in every mode; the old ID is no longer in flight.
func TestReplace(t *testing.T) {
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock()
			o := m.opts
			o.now = clock.Now
			q := openQueue(t, o)
			mustPut(t, q, "first")
			got := mustGet(t, q)
			for _, delay := range []time.Duration{time.Second, 0} {
				id, err := q.Replace(got.ID, []byte("again"), delay)
				if err != nil {
					t.Fatalf("Replace after %v: %v", delay, err)
				}
				if err := q.Finish(got.ID); !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("Finish of the replaced delivery: got %v, want ErrNotInFlight", err)
				}
				if delay > 0 {
					if m := tryGet(t, q, 20*time.Millisecond); m != nil {
						t.Fatalf("before its delay: got %q, want nothing", m.Body)
					}
					clock.Add(delay)
					q.scan()
				}
				next := mustGet(t, q)
				if next.ID != id || string(next.Body) != "again" || next.Attempts != 1 {
					t.Fatalf("after Replace(%v): got %s %q attempts %d, want %s \"again\" attempts 1", delay, next.ID, next.Body, next.Attempts, id)
				}
				got = next
			}
			mustFinish(t, q, got.ID)
			if st := q.Stats(); st.Finished != 3 || st.Puts != 3 || st.Deferred != 0 || st.InFlight != 0 {
				t.Errorf("stats: got %d finished, %d puts, %d deferred, %d in flight, want 3, 3, 0, 0", st.Finished, st.Puts, st.Deferred, st.InFlight)
			}
		})
	}
}

// TestReplaceErrors: a Replace that fails leaves the delivery in flight and
// adds nothing.
func TestReplaceErrors(t *testing.T) {
	q := openQueue(t, Options{DataPath: t.TempDir(), MaxMsgSize: 16, MaxReqTimeout: time.Minute})
	mustPut(t, q, "first")
	got := mustGet(t, q)
	tests := []struct {
		name  string
		id    ID
		body  string
		delay time.Duration
		want  error
	}{
		{"not in flight", ID{1}, "x", 0, ErrNotInFlight},
		{"too large", got.ID, "0123456789abcdefg", 0, ErrTooLarge},
		{"delay past MaxReqTimeout", got.ID, "x", time.Hour, ErrInvalidDelay},
		{"negative delay", got.ID, "x", -time.Second, ErrInvalidDelay},
	}
	for _, tt := range tests {
		if _, err := q.Replace(tt.id, []byte(tt.body), tt.delay); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if st := q.Stats(); st.InFlight != 1 || st.Puts != 1 || st.Deferred != 0 {
		t.Fatalf("after failed Replaces: got %d in flight, %d puts, %d deferred, want 1, 1, 0", st.InFlight, st.Puts, st.Deferred)
	}
	mustFinish(t, q, got.ID)
}

// TestReplaceCrash: a crash after Replace brings back the new message only
// (the old one's COPY is still in the journal, before the SWAP); a SWAP
// record cut short by the crash (a torn write, as a power loss before the
// fsync can leave) brings back the old one only, as a delivery cut short.
func TestReplaceCrash(t *testing.T) {
	for _, torn := range []bool{false, true} {
		name := map[bool]string{false: "whole SWAP", true: "torn SWAP"}[torn]
		t.Run(name, func(t *testing.T) {
			clock := newFakeClock()
			o := Options{DataPath: t.TempDir(), SyncEvery: 1, now: clock.Now}
			q := openQueue(t, o)
			if _, err := q.PutDeferred([]byte("old"), time.Second); err != nil {
				t.Fatal(err)
			}
			clock.Add(time.Second)
			q.scan()
			old := mustGet(t, q)
			newID, err := q.Replace(old.ID, []byte("new"), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			crashed := crashCopy(t, q)
			if torn {
				path := journalPath(crashed, q.opts.Name)
				offs, kinds, end := journalRecords(t, path)
				if last := kinds[len(kinds)-1]; last != kindSwap {
					t.Fatalf("last journal record: got kind %d, want SWAP", last)
				}
				if err := os.Truncate(path, offs[len(offs)-1]+(end-offs[len(offs)-1])/2); err != nil {
					t.Fatal(err)
				}
			}
			o.DataPath = crashed
			q2 := openQueue(t, o)
			wants := map[ID]want{newID: {body: "new", attempts: 1, due: clock.Now().Add(time.Minute)}}
			if torn {
				wants = map[ID]want{old.ID: {body: "old", attempts: 2, due: clock.Now()}}
			}
			expectExactly(t, q2, clock, wants, time.Hour)
		})
	}
}

// TestReplaceCompacted: a compaction keeps what a SWAP left live and
// drops what it finished.
func TestReplaceCompacted(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	o := Options{DataPath: dir, SyncEvery: 1, now: clock.Now}
	q := openQueue(t, o)
	ids := map[ID]want{}
	for range 3 {
		if _, err := q.PutDeferred([]byte("old"), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(time.Second)
	q.scan()
	for range 3 {
		m := mustGet(t, q)
		id, err := q.Replace(m.ID, []byte("new"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = want{body: "new", attempts: 1, due: clock.Now().Add(time.Minute)}
	}
	q.journal.compactMu.Lock()
	q.journal.mu.Lock()
	err := q.journal.compactLocked()
	q.journal.mu.Unlock()
	q.journal.compactMu.Unlock()
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	// The replaced messages were never in the backend: no FIN need stay.
	if _, kinds, _ := journalRecords(t, journalPath(dir, q.opts.Name)); !slices.Equal(kinds, []byte{kindCopy, kindCopy, kindCopy}) {
		t.Fatalf("compacted journal: got record kinds %v, want 3 COPYs", kinds)
	}
	o.DataPath = crashCopy(t, q)
	expectExactly(t, openQueue(t, o), clock, ids, time.Hour)
}

// TestReplaceInCompactionTail: SWAPs appended while a compaction rewrites
// the journal (after its snapshot, before its install) are copied after
// the rewritten records and replay as they would have: the new messages
// come back, the replaced ones do not.
func TestReplaceInCompactionTail(t *testing.T) {
	clock := newFakeClock()
	o := Options{DataPath: t.TempDir(), SyncEvery: 1, now: clock.Now}
	q := openQueue(t, o)
	for range 3 {
		if _, err := q.PutDeferred([]byte("old"), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(time.Second)
	q.scan()
	var got []*Message
	for range 3 {
		got = append(got, mustGet(t, q))
	}
	j := q.journal
	j.compactMu.Lock()
	j.mu.Lock()
	old, snap := j.out, j.snapshotLocked()
	j.mu.Unlock()
	rw, err := j.rewrite(old.f, snap)
	if err != nil {
		j.compactMu.Unlock()
		t.Fatal(err)
	}
	wants := map[ID]want{}
	for _, m := range got {
		id, err := q.Replace(m.ID, []byte("new"), time.Minute)
		if err != nil {
			j.compactMu.Unlock()
			t.Fatal(err)
		}
		wants[id] = want{body: "new", attempts: 1, due: clock.Now().Add(time.Minute)}
	}
	j.mu.Lock()
	err = j.installLocked(old, rw, snap.end)
	j.mu.Unlock()
	j.compactMu.Unlock()
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	o.DataPath = crashCopy(t, q)
	expectExactly(t, openQueue(t, o), clock, wants, time.Hour)
}

// TestReplaceWhileClosing: Replaces racing Close neither deadlock nor
// race (run with -race); each either replaced or reports ErrClosed.
func TestReplaceWhileClosing(t *testing.T) {
	for range 20 {
		q := openQueue(t, Options{DataPath: t.TempDir(), MaxReqTimeout: time.Minute})
		var got []*Message
		for range 50 {
			mustPut(t, q, "x")
			got = append(got, mustGet(t, q))
		}
		var wg sync.WaitGroup
		for _, m := range got {
			wg.Go(func() {
				if _, err := q.Replace(m.ID, []byte("y"), time.Second); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Replace while closing: got %v, want nil or ErrClosed", err)
				}
			})
		}
		closed := make(chan error, 1)
		go func() { closed <- q.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Close still running after a minute beside Replaces")
		}
		wg.Wait()
	}
}
