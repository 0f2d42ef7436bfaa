package group

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/tmpfs"
)

// TestParkingOnFullDisk (Stats.ParkErrors): with Unordered and a DataPath
// on a disk that is full, a deferred message cannot be parked. The group
// tries again, counting each failure in Stats.ParkErrors and warning with
// the DataPath and the error, and no commit passes the message's offset
// meanwhile. Once the disk has room the message is parked, the frontier
// passes it, and it is handled when due: nothing is lost.
func TestParkingOnFullDisk(t *testing.T) {
	t.Parallel() // mostly waits on the disk and the deferral
	const n, keys, target = 100, 20, 30
	r := bigMessagesRig(t, "park-full", n, keys) // a parked message fills more than the journal's first page
	dataPath := tmpfs.Mount(t, 4<<20)
	var log attemptLog
	do, fill := fullDiskDo(t, r, target, &log, func(be *BatchError, i int) { be.Defer(i, 2*time.Second) })
	cfg := r.config("park-full")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 8, 4, Unordered, dataPath
	core, logs := observer.New(zapcore.WarnLevel)
	cfg.Logger = zap.New(core)
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()

	ballast := fill(dataPath) // the parked queue is open: its writes now fail
	waitFor(t, time.Minute, "parking to fail twice", func() bool { return g.Stats().ParkErrors >= 2 })
	warned := logs.FilterMessage("parking messages failed; retrying").All()
	if len(warned) == 0 {
		t.Fatal(`no "parking messages failed; retrying" warning`)
	}
	if f := warned[0].ContextMap(); f["path"] != dataPath || !strings.Contains(f["error"].(string), "no space left on device") {
		t.Errorf("parking warning: got path %v, error %v; want path %s and ENOSPC", f["path"], f["error"], dataPath)
	}
	time.Sleep(3 * cfg.Sarama.Consumer.Offsets.AutoCommit.Interval) // commits go on: none may pass it
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c > target {
		t.Fatalf("committed offset %d while offset %d could not be parked, want at most %d", c, target, target)
	}
	if st := g.Stats(); st.Parked != 0 {
		t.Fatalf("Parked: got %d while the disk is full, want 0", st.Parked)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the message parked and every other one committed", func() bool {
		return r.b.Committed(cfg.GroupID, r.topic)[0] == int64(n) && g.Stats().Parked == 1 || len(attempts(&log)) == 2
	})
	waitFor(t, time.Minute, "the parked message handled when due", func() bool {
		return len(attempts(&log)) == 2 && g.Stats().Parked == 0 && r.b.Committed(cfg.GroupID, r.topic)[0] == int64(n)
	})
	errs := g.Stats().ParkErrors
	time.Sleep(3 * cfg.Sarama.Consumer.Offsets.AutoCommit.Interval)
	if got := g.Stats().ParkErrors; got != errs {
		t.Errorf("ParkErrors after the disk had room: went from %d to %d", errs, got)
	}
	// The partition counts the message parked once, and handled when its
	// redelivery from the parked queue succeeded.
	if ps := g.Stats().PartitionStats; len(ps) != 1 || ps[0].Outcomes != (Outcomes{Handled: n, Parked: 1}) {
		t.Errorf("partition outcomes: got %+v, want one partition with Handled %d and Parked 1", ps, n)
	}
	r.checkOrder(false, false)
}

// attempts is the attempts log holds.
func attempts(log *attemptLog) []int {
	seen, _ := log.get()
	return seen
}

// TestDeadLettersOnFullDisk: with a DataPath (the local dead-letter store)
// on a disk that is full, a dead letter cannot be written. The group
// tries again (Stats.DeadLetterErrors, a warning naming the store and the
// error), no commit passes the message's offset meanwhile, and once the
// disk has room the dead letter is written, the store holds it once, and
// the frontier passes it.
func TestDeadLettersOnFullDisk(t *testing.T) {
	t.Parallel() // mostly waits on the disk
	const n, keys, target = 100, 20, 30
	r := bigMessagesRig(t, "dead-full", n, keys)
	dataPath := tmpfs.Mount(t, 4<<20)
	do, fill := fullDiskDo(t, r, target, nil, func(be *BatchError, i int) { be.DeadLetter(i, errors.New("rejected by the test")) })
	cfg := r.config("dead-full")
	cfg.Size, cfg.Num, cfg.DataPath = 8, 4, dataPath
	core, logs := observer.New(zapcore.WarnLevel)
	cfg.Logger = zap.New(core)
	g := newGroup(t, cfg, do)
	stop := run(t, g)

	ballast := fill(dataPath) // the store is open: its writes now fail
	waitFor(t, time.Minute, "the dead letter's write to fail twice", func() bool { return g.Stats().DeadLetterErrors >= 2 })
	warned := logs.FilterMessage("writing dead letters failed; retrying").All()
	if len(warned) == 0 {
		t.Fatal(`no "writing dead letters failed; retrying" warning`)
	}
	if f := warned[0].ContextMap(); !strings.Contains(f["destination"].(string), dataPath) || !strings.Contains(f["error"].(string), "no space left on device") {
		t.Errorf("dead-letter warning: got destination %v, error %v; want the store under %s and ENOSPC", f["destination"], f["error"], dataPath)
	}
	time.Sleep(3 * cfg.Sarama.Consumer.Offsets.AutoCommit.Interval) // commits go on: none may pass it
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c > target {
		t.Fatalf("committed offset %d while offset %d's dead letter could not be written, want at most %d", c, target, target)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the dead letter written and every message committed", func() bool {
		return g.Stats().DeadLettered.Rejected == 1 && r.b.Committed(cfg.GroupID, r.topic)[0] == int64(n)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st, err := deadletter.Open(filepath.Join(dataPath, deadletter.DirName), deadletter.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var offsets []int64
	if err := st.Scan(func(_ int64, rec deadletter.Record) error {
		info, err := deadletter.ParseInfo(rec.Headers)
		if err != nil {
			return err
		}
		offsets = append(offsets, info.Offset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(offsets) != 1 || offsets[0] != target || st.Stats().Damaged != 0 {
		t.Fatalf("local dead-letter store: got offsets %v (%d damaged), want [%d] and none damaged", offsets, st.Stats().Damaged, target)
	}
	r.checkDeadLettered(1)
}

// bigMessagesRig is a rig of n messages over keys keys on one partition,
// each over 5 KB: more than a file's first page can take, so that a write
// meets a full disk whatever the page holds already.
func bigMessagesRig(t *testing.T, topic string, n, keys int) *rig {
	t.Helper()
	plan := make([]planned, n)
	for i := range plan {
		plan[i] = planned{key: uint32(i % keys), part: -1}
	}
	r := newRigPlan(t, topic, 1, plan)
	r.payload = make([]byte, 5000)
	r.produce(0, n)
	return r
}

// fullDiskDo returns a Do that hands each batch to r's work, except the
// first delivery of offset target: that one waits until fill has filled
// the disk under a DataPath (the group has its files open by then), is
// marked settled, and gets verdict. Each delivery of target is logged in
// log (if not nil). fill waits for that delivery, fills the disk and
// returns the ballast file's path.
func fullDiskDo(t *testing.T, r *rig, target int64, log *attemptLog, verdict func(be *BatchError, i int)) (do func(context.Context, []*Message) error, fill func(dataPath string) string) {
	w := r.work(0, 0)
	reached, filled := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	do = func(ctx context.Context, batch []*Message) error {
		var be BatchError
		var ok []*Message
		for i, m := range batch {
			if m.Offset != target {
				ok = append(ok, m)
				continue
			}
			if log != nil {
				log.add(m.Attempt)
			}
			if first.Swap(true) {
				ok = append(ok, m)
				continue
			}
			close(reached)
			<-filled
			r.markSettled(m.Partition, m.Offset)
			verdict(&be, i)
		}
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return be.Err()
	}
	fill = func(dataPath string) string {
		t.Helper()
		select {
		case <-reached:
		case <-time.After(time.Minute):
			t.Fatalf("offset %d never reached Do", target)
		}
		defer close(filled)
		return tmpfs.Fill(t, dataPath, 0)
	}
	return do, fill
}

// TestDrainWaitsForDeadLetter (invariant 5: a graceful handoff repeats
// nothing): a message whose dead letter is still being written when its
// partition is revoked (the store's disk is full) is waited for by the
// drain, and once the write lands there the final commit passes it: the
// next owner neither runs it again nor writes its dead letter twice.
func TestDrainWaitsForDeadLetter(t *testing.T) {
	t.Parallel() // mostly waits on the disk and the drain
	const n, keys, target = 100, 20, 30
	const behind = (n - 1 - target) / keys // its key's later messages wait behind it
	r := bigMessagesRig(t, "dead-drain", n, keys)
	dataPath := tmpfs.Mount(t, 4<<20)
	var log attemptLog
	do, fill := fullDiskDo(t, r, target, &log, func(be *BatchError, i int) { be.DeadLetter(i, errors.New("rejected by the test")) })
	cfg := r.config("dead-drain")
	cfg.Size, cfg.Num, cfg.DataPath = 8, 4, dataPath
	cfg.Retry = Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Jitter: -1}
	cfg.DrainTimeout = 5 * time.Second
	g := newGroup(t, cfg, do)
	stop := run(t, g)

	ballast := fill(dataPath) // the store is open: its writes now fail
	waitFor(t, time.Minute, "the dead letter's write to fail and the rest to finish", func() bool {
		st := g.Stats()
		return st.DeadLetterErrors >= 1 && st.Handled == n-1-behind
	})
	stopThenFree(t, stop, ballast)
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c != target+keys {
		t.Fatalf("final commit: got offset %d, want %d (past offset %d, whose dead letter landed in the drain, up to its key's next message)", c, target+keys, target)
	}
	if got := g.Stats().DeadLettered.Rejected; got != 1 {
		t.Fatalf("dead-lettered: got %d, want 1", got)
	}
	runToCommitted(t, r, cfg, do)
	if got := attempts(&log); !slices.Equal(got, []int{1}) {
		t.Fatalf("attempts of offset %d seen by Do: got %v, want [1] (the next owner does not run it again)", target, got)
	}
}

// TestDrainWaitsForParking (invariant 5): with Unordered and a DataPath, a
// deferred message whose park is still being written when its partition
// is revoked (the disk is full) is waited for by the drain; once parked
// there, the final commit passes it, and the parked copy is its one
// delivery after the handoff: the next start on the same DataPath hands
// it to Do once, not once from Kafka and again from the parked queue.
func TestDrainWaitsForParking(t *testing.T) {
	t.Parallel() // mostly waits on the disk, the drain and the deferral
	const n, keys, target = 100, 20, 30
	r := bigMessagesRig(t, "park-drain", n, keys)
	dataPath := tmpfs.Mount(t, 4<<20)
	var log attemptLog
	do, fill := fullDiskDo(t, r, target, &log, func(be *BatchError, i int) { be.Defer(i, 2*time.Second) })
	cfg := r.config("park-drain")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 8, 4, Unordered, dataPath
	cfg.Retry = Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Jitter: -1}
	cfg.DrainTimeout = 5 * time.Second
	g := newGroup(t, cfg, do)
	stop := run(t, g)

	ballast := fill(dataPath) // the parked queue is open: its writes now fail
	waitFor(t, time.Minute, "parking to fail and the rest to finish", func() bool {
		st := g.Stats()
		return st.ParkErrors >= 1 && st.Handled == n-1
	})
	stopThenFree(t, stop, ballast)
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c != n {
		t.Fatalf("final commit: got offset %d, want %d (past offset %d, parked in the drain)", c, n, target)
	}

	g = newGroup(t, cfg, do)
	stop = run(t, g)
	waitFor(t, time.Minute, "the parked message handled", func() bool { return len(attempts(&log)) >= 2 })
	time.Sleep(3 * time.Second) // a second delivery, if any, would be due by now
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := attempts(&log); len(got) != 2 {
		t.Fatalf("deliveries of offset %d: got attempts %v, want 2 (the first, and the parked copy once)", target, got)
	}
}

// stopThenFree stops a member whose writes fail on a full disk and frees
// the disk (removes ballast) 500 ms into the drain, so that the write
// lands while its partition drains.
func stopThenFree(t *testing.T, stop func() error, ballast string) {
	t.Helper()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(500 * time.Millisecond) // into the drain
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
