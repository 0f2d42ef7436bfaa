package localqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRestart: ready (in memory and on disk), deferred, requeued and
// in-flight messages all come back after Close/Open, exactly once, with
// their attempts and due times; finished ones do not.
func TestRestart(t *testing.T) {
	for _, size := range []int{0, 5} {
		t.Run(fmt.Sprintf("MemQueueSize=%d", size), func(t *testing.T) { testRestart(t, size) })
	}
}

func testRestart(t *testing.T, memQueueSize int) {
	clock := newFakeClock()
	dir := t.TempDir()
	o := Options{DataPath: dir, MemQueueSize: memQueueSize, now: clock.Now}
	q := openQueue(t, o)
	start := clock.Now()

	wants := map[ID]want{} // attempts: on the first Get after Open
	for i := range 30 {
		body := fmt.Sprintf("ready-%02d", i)
		wants[mustPut(t, q, body)] = want{body, 1, start}
	}
	for i := range 10 {
		body := fmt.Sprintf("deferred-%02d", i)
		d := time.Duration(i+2) * time.Second // due after Close
		id, err := q.PutDeferred([]byte(body), d)
		if err != nil {
			t.Fatalf("PutDeferred: %v", err)
		}
		wants[id] = want{body, 1, start.Add(d)}
	}
	clock.Add(100 * time.Millisecond)
	for i := range 8 {
		m := mustGet(t, q)
		w := wants[m.ID]
		switch {
		case i < 3: // finished: gone for good
			mustFinish(t, q, m.ID)
			delete(wants, m.ID)
		case i == 3: // requeued for later
			if err := q.Requeue(m.ID, 20*time.Second); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			wants[m.ID] = want{w.body, 2, clock.Now().Add(20 * time.Second)}
		default: // left in flight: ready again after Open
			wants[m.ID] = want{w.body, 2, time.Time{}}
		}
	}
	closedAt := clock.Add(time.Second)
	for id, w := range wants {
		if w.due.IsZero() {
			wants[id] = want{w.body, w.attempts, closedAt}
		}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	q = openQueue(t, o)
	if st := q.Stats(); st.Depth != int64(len(wants)-11) || st.Deferred != 11 {
		t.Fatalf("after Open: got depth %d and %d deferred, want %d ready and 11 deferred (everything not finished)", st.Depth, st.Deferred, len(wants)-11)
	}
	expectExactly(t, q, clock, wants, 25*time.Second)

	// A second restart with nothing left brings nothing back.
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	q = openQueue(t, o)
	if m := tryGet(t, q, 50*time.Millisecond); m != nil {
		t.Fatalf("after a drained restart: got %q, want nothing", m.Body)
	}
}

// TestCloseWhileBusy closes a disk queue while producers put and consumers
// get, finish some and abandon others: every message whose Put returned is
// either finished (Finish returned nil) or back after Open, exactly once.
// This is the window go-diskqueue leaves open: a record counts as consumed
// once it leaves ReadChan.
func TestCloseWhileBusy(t *testing.T) {
	for _, size := range []int{0, 16} {
		t.Run(fmt.Sprintf("MemQueueSize=%d", size), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{DataPath: dir, MemQueueSize: size}
			q := openQueue(t, o)
			var mu sync.Mutex
			put, finished := map[ID]bool{}, map[ID]bool{}
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						id, err := q.Put(fmt.Appendf(nil, "m%d", i))
						if errors.Is(err, ErrClosed) {
							return
						}
						if err != nil {
							t.Errorf("Put: %v", err)
							return
						}
						mu.Lock()
						put[id] = true
						mu.Unlock()
					}
				}()
			}
			var gets atomic.Int64
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						m, err := q.Get(context.Background())
						if errors.Is(err, ErrClosed) {
							return
						}
						if err != nil {
							t.Errorf("Get: %v", err)
							return
						}
						gets.Add(1)
						if m.ID[15]%2 == 0 { // finish about half, abandon the rest in flight
							if err := q.Finish(m.ID); err == nil {
								mu.Lock()
								finished[m.ID] = true
								mu.Unlock()
							} else if !errors.Is(err, ErrClosed) {
								t.Errorf("Finish: %v", err)
							}
						}
					}
				}()
			}
			eventually(t, "2000 deliveries", func() bool { return gets.Load() >= 2000 })
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			wg.Wait()

			q = openQueue(t, o)
			back := map[ID]bool{}
			for _, m := range drain(t, q) {
				switch {
				case back[m.ID]:
					t.Fatalf("after Open: got %s twice, want once", m.ID)
				case finished[m.ID]:
					t.Fatalf("after Open: got %s, which was finished", m.ID)
				case !put[m.ID]:
					t.Fatalf("after Open: got %s, which no Put returned", m.ID)
				}
				back[m.ID] = true
			}
			if len(back)+len(finished) != len(put) {
				t.Fatalf("after Open: %d back + %d finished, want all %d put", len(back), len(finished), len(put))
			}
			t.Logf("%d put, %d finished, %d back after Open", len(put), len(finished), len(back))
		})
	}
}
