package localqueue

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestLateFinishActsOnRedelivery: an ID names the message, not a delivery
// (Finish's documentation). A Finish after the scanner redelivered the
// message ends it as done; the new delivery's own Finish then returns
// ErrNotInFlight, and the message is not delivered again: nothing lost,
// nothing more.
func TestLateFinishActsOnRedelivery(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"memory", Options{}},
		{"disk", Options{DataPath: t.TempDir()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.MsgTimeout = 50 * time.Millisecond
			o.Scanner = startScanner(t, ScannerOptions{ScanInterval: 5 * time.Millisecond})
			q := openQueue(t, o)
			id := mustPut(t, q, "a")
			first := mustGet(t, q)
			second := mustGet(t, q) // after the first's deadline, redelivered by the scanner
			if second.ID != id || second.Attempts != 2 {
				t.Fatalf("redelivery: got %s attempt %d, want %s attempt 2", second.ID, second.Attempts, id)
			}
			if err := q.Finish(first.ID); err != nil {
				t.Fatalf("late Finish after the redelivery: got %v, want nil (it acts on the new delivery)", err)
			}
			if err := q.Finish(second.ID); !errors.Is(err, ErrNotInFlight) {
				t.Fatalf("the new delivery's Finish: got %v, want ErrNotInFlight", err)
			}
			if m := tryGet(t, q, 200*time.Millisecond); m != nil {
				t.Fatalf("got %s (attempt %d) after it was finished, want nothing", m.Body, m.Attempts)
			}
			if st := q.Stats(); st.InFlight != 0 || st.Depth != 0 {
				t.Fatalf("Stats: got in flight %d, depth %d; want 0 and 0", st.InFlight, st.Depth)
			}
		})
	}
}

// TestLateRequeueAndTouchActOnRedelivery: once the message is
// redelivered, a late Touch with its ID extends the new delivery (whose
// Finish still works), and a late Requeue hands the new delivery back:
// delivered again, or dead-lettered when it was the MaxAttempts-th
// (Finish's documentation).
func TestLateRequeueAndTouchActOnRedelivery(t *testing.T) {
	redeliver := func(t *testing.T, o Options) (*Queue, *Message, *Message) {
		t.Helper()
		o.MsgTimeout = 50 * time.Millisecond
		o.Scanner = startScanner(t, ScannerOptions{ScanInterval: 5 * time.Millisecond})
		q := openQueue(t, o)
		mustPut(t, q, "a")
		first := mustGet(t, q)
		second := mustGet(t, q) // redelivered after the first's deadline
		if second.Attempts != 2 {
			t.Fatalf("redelivery: got attempt %d, want 2", second.Attempts)
		}
		return q, first, second
	}
	t.Run("Touch", func(t *testing.T) {
		q, first, second := redeliver(t, Options{})
		if err := q.Touch(first.ID); err != nil {
			t.Fatalf("late Touch: got %v, want nil (it extends the new delivery)", err)
		}
		if err := q.Finish(second.ID); err != nil {
			t.Fatalf("the new delivery's Finish after a late Touch: got %v, want nil", err)
		}
	})
	t.Run("Requeue", func(t *testing.T) {
		q, first, second := redeliver(t, Options{})
		if err := q.Requeue(first.ID, 0); err != nil {
			t.Fatalf("late Requeue: %v", err)
		}
		if err := q.Finish(second.ID); !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("the new delivery's Finish after a late Requeue: got %v, want ErrNotInFlight", err)
		}
		if third := mustGet(t, q); third.Attempts != 3 {
			t.Fatalf("after a late Requeue: got attempt %d, want 3", third.Attempts)
		}
	})
	t.Run("Requeue of the last attempt", func(t *testing.T) {
		dead := make(chan int, 1)
		q, first, _ := redeliver(t, Options{MaxAttempts: 2, OnDead: func(m *Message) { dead <- m.Attempts }})
		if err := q.Requeue(first.ID, 0); err != nil {
			t.Fatalf("late Requeue: %v", err)
		}
		select {
		case n := <-dead:
			if n != 2 {
				t.Fatalf("OnDead: got attempt %d, want 2", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a late Requeue of the MaxAttempts-th delivery: no OnDead")
		}
		if m := tryGet(t, q, 100*time.Millisecond); m != nil {
			t.Fatalf("got attempt %d after the message was dead-lettered, want nothing", m.Attempts)
		}
	})
}

// TestReopenOrderWithMemoryChan: with a DataPath and a memory chan, Close
// puts what the chan held behind the backend's records (Open's
// documentation); with MemQueueSize 0 the order is the order of Put, and a
// message in flight at Close comes back after the others.
func TestReopenOrderWithMemoryChan(t *testing.T) {
	for _, tt := range []struct {
		name     string
		memSize  int
		inFlight bool // the first message is in flight at Close
		want     []string
	}{
		{"MemQueueSize 0", 0, false, []string{"0", "1", "2", "3", "4", "5"}},
		{"MemQueueSize 0, one in flight", 0, true, []string{"1", "2", "3", "4", "5", "0"}},
		{"MemQueueSize 2", 2, false, []string{"2", "3", "4", "5", "0", "1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{DataPath: t.TempDir(), MemQueueSize: tt.memSize}
			q := openQueue(t, o)
			for i := range 6 {
				mustPut(t, q, strconv.Itoa(i))
			}
			if tt.inFlight {
				mustGet(t, q)
			}
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			q = openQueue(t, o)
			var got []string
			for _, m := range drain(t, q) {
				got = append(got, string(m.Body))
				mustFinish(t, q, m.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order after Close/Open: got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReopenCopiesCountInDepth: a message requeued while the journal held
// it leaves a copy in the backend, which Depth counts until Get reaches it
// (Depth's documentation), beside the message Open restored from the
// journal; Open writes no copy of its own, so Depth is the same after each
// Open. Get hands the message out once and drops the stale copy as a
// duplicate, and Depth is 0 after.
func TestReopenCopiesCountInDepth(t *testing.T) {
	o := Options{DataPath: t.TempDir()}
	q := openQueue(t, o)
	id := mustPut(t, q, "requeued")
	m := mustGet(t, q)
	if err := q.Requeue(m.ID, 0); err != nil { // journaled, ready, a copy in the backend
		t.Fatalf("Requeue: %v", err)
	}
	var depths []int64
	for range 3 {
		if err := q.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		q = openQueue(t, o)
		depths = append(depths, q.Depth())
	}
	if !slices.Equal(depths, []int64{2, 2, 2}) {
		t.Fatalf("Depth after each Open: got %v, want 2 each time (the stale copy, the restored message)", depths)
	}
	got := drain(t, q)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("drained %d messages, want the one message %s once", len(got), id)
	}
	mustFinish(t, q, id)
	if st := q.Stats(); st.Depth != 0 || st.Duplicates != 1 {
		t.Fatalf("after the drain: got depth %d, %d duplicates; want 0 and 1", st.Depth, st.Duplicates)
	}
}

// TestCloseDuringOnDead: without a DeadLetter queue, a Close that comes
// while OnDead runs leaves the message's FIN unwritten (Options.OnDead),
// so the next Open dead-letters it again, as after a crash.
func TestCloseDuringOnDead(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	o := Options{
		DataPath: t.TempDir(), MaxAttempts: 1,
		OnDead: func(*Message) { close(entered); <-release },
	}
	q := openQueue(t, o)
	id := mustPut(t, q, "poison")
	mustGet(t, q)
	requeued := make(chan error, 1)
	go func() { requeued <- q.Requeue(id, 0) }() // its last attempt: OnDead runs here
	<-entered
	if err := q.Close(); err != nil {
		t.Fatalf("Close while OnDead runs: %v", err)
	}
	close(release)
	if err := <-requeued; err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	var again []ID
	o.OnDead = func(m *Message) { again = append(again, m.ID) }
	q = openQueue(t, o)
	if len(again) != 1 || again[0] != id {
		t.Fatalf("OnDead at the next Open: got %v, want [%s]", again, id)
	}
	if st := q.Stats(); st.Journaled != 0 {
		t.Fatalf("Journaled after OnDead at Open: got %d, want 0", st.Journaled)
	}
}
