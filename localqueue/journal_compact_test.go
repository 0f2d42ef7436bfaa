package localqueue

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestJournalCompaction runs many journal write/finish cycles around a fixed live
// set: the journal stays bounded, and a crash (or a clean restart) after
// many compactions restores exactly the live set. go-diskqueue's metadata
// lags (default SyncEvery, no SyncTimeout), so after the crash it hands out
// stale copies of finished messages whose FINs compaction rewrote: none
// may come back.
func TestJournalCompaction(t *testing.T) {
	tests := []struct {
		name  string
		crash bool
		noMap bool // the journal appends with pwrite(2)
	}{
		{"crash", true, false},
		{"crash, pwrite", true, true},
		{"clean restart", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const limit, cycles = 16 << 10, 1500
			clock := newFakeClock()
			start := clock.Now()
			o := Options{DataPath: t.TempDir(), SyncTimeout: time.Hour, now: clock.Now, journalCompactBytes: limit, journalNoMap: tt.noMap}
			q := openQueue(t, o)
			wants := map[ID]want{}
			for i := range 3 {
				d := time.Duration(i+1) * time.Minute
				id, err := q.PutDeferred(fmt.Appendf(nil, "deferred-%d", i), d)
				if err != nil {
					t.Fatalf("PutDeferred: %v", err)
				}
				wants[id] = want{fmt.Sprintf("deferred-%d", i), 1, start.Add(d)}
			}
			body := make([]byte, 100)
			var biggest int64
			for i := range cycles {
				copy(body, fmt.Sprintf("cycle-%04d", i))
				mustPut(t, q, string(body))
				m := mustGet(t, q)
				switch i % 100 {
				case 7: // stays in flight
					wants[m.ID] = want{string(m.Body), 2, time.Time{}}
				case 8: // requeued for later
					if err := q.Requeue(m.ID, time.Hour); err != nil {
						t.Fatalf("Requeue: %v", err)
					}
					wants[m.ID] = want{string(m.Body), 2, start.Add(time.Hour)}
				default:
					mustFinish(t, q, m.ID)
				}
				settleCompaction(t, q)
				biggest = max(biggest, q.Stats().JournalBytes)
			}
			st := q.Stats()
			if st.JournalCompactions < 10 {
				t.Fatalf("compactions: got %d, want at least 10 over %d cycles", st.JournalCompactions, cycles)
			}
			// Live: 33 COPYs of about 150 bytes; kept FINs of the recent reads
			// (at most SyncEvery) 26 bytes each; twice that plus the limit.
			if bound := int64(2*(33*200+1500*26) + limit); biggest > bound {
				t.Fatalf("journal size: got up to %d bytes, want at most %d", biggest, bound)
			}
			if st.Journaled != len(wants) {
				t.Fatalf("Journaled: got %d, want %d", st.Journaled, len(wants))
			}
			t.Logf("%d cycles: %d compactions, journal at most %d bytes", cycles, st.JournalCompactions, biggest)

			o.DataPath = crashCopy(t, q)
			if !tt.crash {
				if err := q.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				o.DataPath = q.opts.DataPath
			}
			clock.Add(time.Second)
			q2 := openQueue(t, o)
			for id, w := range wants {
				if w.due.IsZero() {
					wants[id] = want{w.body, w.attempts, clock.Now()}
				}
			}
			expectExactly(t, q2, clock, wants, 2*time.Hour)
			if got := q2.Stats().JournalCorrupt; got != 0 {
				t.Fatalf("JournalCorrupt: got %d, want 0", got)
			}
		})
	}
}

// settleCompaction waits until q's journal is not due for compaction: the
// background goroutine compacts while the queue goes on, so a test that
// counts compactions or bounds the file lets it catch up.
func settleCompaction(t *testing.T, q *Queue) {
	t.Helper()
	j := q.journal
	eventually(t, "journal compacted", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.out == nil || !j.wantCompactLocked()
	})
}

// TestJournalCompactionLeftover: a crash during compaction leaves a
// partial <journal>.tmp beside the whole journal; Open removes it and
// restores from the journal.
func TestJournalCompactionLeftover(t *testing.T) {
	clock := newFakeClock()
	o := Options{DataPath: t.TempDir(), now: clock.Now}
	q := openQueue(t, o)
	id := mustPut(t, q, "in flight")
	mustGet(t, q)
	o.DataPath = crashCopy(t, q)
	tmp := journalPath(o.DataPath, "q") + ".tmp"
	if err := os.WriteFile(tmp, append(journalHeader(), "half a rec"...), 0o600); err != nil {
		t.Fatalf("write: %v", err)
	}
	q2 := openQueue(t, o)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("leftover %s: got %v, want it removed", tmp, err)
	}
	expectExactly(t, q2, clock, map[ID]want{id: {"in flight", 2, clock.Now()}}, 0)
}
