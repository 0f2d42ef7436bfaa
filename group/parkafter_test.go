package group

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/localqueue"
)

// TestParkAfter (Config.ParkAfter): with Unordered and a DataPath, a
// message deferred by less than ParkAfter waits in memory and holds the
// frontier; one deferred by more is parked on disk (the parked queue
// under DataPath holds it) and the frontier passes it before it runs
// (Stats.Deferred counts the one, Stats.Parked the other). Both are
// handled once due.
func TestParkAfter(t *testing.T) {
	t.Parallel() // mostly waits on the deferrals
	const n, keys, short, long = 200, 20, 10, 20
	const parkAfter, shortBy, longBy = 6 * time.Second, 5 * time.Second, 8 * time.Second
	r := newRig(t, "park-after", 1, n, keys)
	dataPath := t.TempDir()
	w := r.work(0, 0)
	var mu sync.Mutex
	delivered := map[int64][]time.Time{}
	do := func(ctx context.Context, batch []*Message) error {
		var be BatchError
		var ok []*Message
		mu.Lock()
		for i, m := range batch {
			delivered[m.Offset] = append(delivered[m.Offset], time.Now())
			switch {
			case m.Offset == short && len(delivered[m.Offset]) == 1:
				be.Defer(i, shortBy)
			case m.Offset == long && len(delivered[m.Offset]) == 1:
				r.markSettled(m.Partition, m.Offset)
				be.Defer(i, longBy)
			default:
				ok = append(ok, m)
			}
		}
		mu.Unlock()
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return be.Err()
	}
	deliveries := func(off int64) []time.Time { // a copy
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(delivered[off])
	}
	cfg := r.config("park-after")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath, cfg.ParkAfter = 8, 4, Unordered, dataPath, parkAfter
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, time.Minute, "the long deferral parked and the rest but the short one handled", func() bool {
		st := g.Stats()
		return st.Parked == 1 && st.Handled >= n-2 || len(deliveries(long)) == 2 // or, on a slow machine, already due
	})
	waitFor(t, time.Minute, "the frontier committed up to the short deferral", func() bool {
		return r.b.Committed(cfg.GroupID, r.topic)[0] >= short
	})
	time.Sleep(3 * cfg.Sarama.Consumer.Offsets.AutoCommit.Interval) // commits go on: none may pass it
	d := deliveries(short)
	c := r.b.Committed(cfg.GroupID, r.topic)[0]
	if time.Since(d[0]) < shortBy-time.Second { // still due to wait in memory
		if len(d) != 1 || c != short {
			t.Errorf("%v after offset %d was deferred by %v: got %d deliveries and the committed offset %d, want 1 and %d (it waits in memory and holds the frontier)",
				time.Since(d[0]).Round(time.Millisecond), short, shortBy, len(d), c, short)
		}
		if got := parkedIn(t, dataPath); got != 1 {
			t.Errorf("parked queue on disk: got %d messages, want 1 (the long deferral only)", got)
		}
		if st := g.Stats(); st.Deferred != 1 || st.Parked != 1 {
			t.Errorf("Stats: got Deferred %d, Parked %d; want 1 waiting in memory and 1 parked", st.Deferred, st.Parked)
		}
	} else {
		t.Logf("the short deferral's wait was over before the check (a slow start): its hold was not observed")
	}
	waitFor(t, time.Minute, "the frontier past the parked message", func() bool {
		return r.b.Committed(cfg.GroupID, r.topic)[0] == int64(n)
	})
	if d := deliveries(long); time.Since(d[0]) < longBy-time.Second && len(d) != 1 { // not yet due: it must not have run again
		t.Errorf("deliveries of the parked message when the frontier passed it, %v before it was due: got %d, want 1", longBy-time.Since(d[0]), len(d))
	}
	waitFor(t, time.Minute, "the parked message handled when due", func() bool { return len(deliveries(long)) == 2 && g.Stats().Parked == 0 })
	for off, by := range map[int64]time.Duration{short: shortBy, long: longBy} {
		if d := deliveries(off); len(d) != 2 || d[1].Sub(d[0]) < by-100*time.Millisecond {
			t.Errorf("offset %d: delivered at %v, want twice, %v apart", off, d, by)
		}
	}
}

// TestParkedCountsMessagesNotRecords: Stats.Parked, at start, is how many
// messages the parked queue holds (its journal), not how many backend
// records it has: a crash leaves records read before, and the Open after
// it writes a dedup marker behind them, all of which count in the queue's
// Depth until Get passes them. Here an earlier run left one message
// parked for an hour, and was killed (a copy of its DataPath) after it had
// handled another one, before go-diskqueue synced its read position; the
// run after the kill stopped before Get reached the handled message's
// record and its marker (the binary prober saw "parked 5" for good after a
// kill -9 and a restart, with nothing parked, 4 of 4 runs).
func TestParkedCountsMessagesNotRecords(t *testing.T) {
	opts := localqueue.Options{Name: "orderly-parked", DataPath: t.TempDir(), SyncTimeout: time.Hour}
	q, err := localqueue.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.PutDeferred([]byte("parked an hour ago"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put([]byte("handled before the kill")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	m, err := q.Get(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(m.ID); err != nil {
		t.Fatal(err)
	}
	dataPath := copyDir(t, opts.DataPath) // the kill
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	opts.DataPath = dataPath
	if q, err = localqueue.Open(opts); err != nil { // the run after the kill
		t.Fatal(err)
	}
	st := q.Stats()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Journaled != 1 || st.Depth == 0 {
		t.Fatalf("the prepared queue: got %d journaled, depth %d; want 1 and some unread records", st.Journaled, st.Depth)
	}

	r := newRig(t, "parked-count", 1, 20, 5)
	cfg := r.config("parked-count")
	cfg.Ordering, cfg.DataPath = Unordered, dataPath
	g := newGroup(t, cfg, r.work(0, 0).Do)
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	got := g.Stats().Parked
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Fatalf("Stats.Parked with one message parked: got %d, want 1", got)
	}
}
