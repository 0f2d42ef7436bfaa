package localqueue

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

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
