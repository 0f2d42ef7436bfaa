package localqueue

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash tests run this test binary again as a child (TestHelperProcess)
// that works on a queue and prints what it did, line by line and
// unbuffered, so that a printed line means the call it reports returned.
// The parent SIGKILLs it and checks the queue it left.
const (
	crashDirEnv  = "LOCALQUEUE_CRASH_DIR"
	crashModeEnv = "LOCALQUEUE_CRASH_MODE"
	crashSyncEnv = "LOCALQUEUE_CRASH_SYNC"
)

// crashEpoch is the fixed clock of the "journaled" child and its parent.
var crashEpoch = time.Unix(1_700_000_000, 0)

func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the child process of the crash tests")
	}
	sync, _ := strconv.ParseInt(os.Getenv(crashSyncEnv), 10, 64)
	fail := func(what string, err error) {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(2)
	}
	say := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	o := Options{Name: "crash", DataPath: dir, MemQueueSize: 0, SyncEvery: sync}
	switch os.Getenv(crashModeEnv) {
	case "put":
		q, err := Open(o)
		if err != nil {
			fail("open", err)
		}
		for i := 0; ; i++ {
			id, err := q.Put(fmt.Appendf(nil, "m-%d", i))
			if err != nil {
				fail("put", err)
			}
			say("put %s", id)
		}
	case "journaled":
		o.now = func() time.Time { return crashEpoch }
		q, err := Open(o)
		if err != nil {
			fail("open", err)
		}
		crashJournaledChild(q, say, fail)
		say("ready")
		select {} // until killed
	case "dead":
		crashDeadChild(o, say, fail)
	case "busy":
		o.MsgTimeout, o.journalCompactBytes = 30*time.Millisecond, 32<<10
		q, err := Open(o)
		if err != nil {
			fail("open", err)
		}
		crashBusyChild(q, say, fail)
	}
}

// crashJournaledChild leaves 43 messages in every state: 15 never delivered,
// 12 in flight, 3 requeued now, 5 requeued for i minutes, 3 deferred by
// PutDeferred for 20, 40 and 60 minutes; 5 finished.
func crashJournaledChild(q *Queue, say func(string, ...any), fail func(string, error)) {
	for i := range 40 {
		id, err := q.Put(fmt.Appendf(nil, "body-%d", i))
		if err != nil {
			fail("put", err)
		}
		say("put %s body-%d", id, i)
	}
	for i := range 3 {
		d := time.Duration(i+1) * 20 * time.Minute
		id, err := q.PutDeferred(fmt.Appendf(nil, "deferred-%d", i), d)
		if err != nil {
			fail("put deferred", err)
		}
		say("putdeferred %s deferred-%d %d", id, i, d)
	}
	for i := range 25 {
		m, err := q.Get(context.Background())
		if err != nil {
			fail("get", err)
		}
		switch {
		case i < 5:
			if err := q.Finish(m.ID); err != nil {
				fail("finish", err)
			}
			say("finished %s", m.ID)
		case i < 10:
			d := time.Duration(i) * time.Minute
			if err := q.Requeue(m.ID, d); err != nil {
				fail("requeue", err)
			}
			say("deferred %s %d %d", m.ID, m.Attempts, d)
		case i < 13:
			if err := q.Requeue(m.ID, 0); err != nil {
				fail("requeue", err)
			}
			say("requeued %s %d", m.ID, m.Attempts)
		default:
			say("inflight %s %d", m.ID, m.Attempts)
		}
	}
}

// crashDeadChild opens a durable dead-letter queue "dead" (with a memory
// chan, so that nothing but the dead-letter path keeps its messages out of
// memory) and a queue o whose messages die on their first Requeue, and
// dead-letters messages until it is killed.
func crashDeadChild(o Options, say func(string, ...any), fail func(string, error)) {
	dlq, err := Open(Options{Name: "dead", DataPath: o.DataPath, MemQueueSize: 100, SyncEvery: o.SyncEvery})
	if err != nil {
		fail("open dead", err)
	}
	o.MaxAttempts, o.DeadLetter = 1, dlq
	q, err := Open(o)
	if err != nil {
		fail("open", err)
	}
	for i := 0; ; i++ {
		id, err := q.Put(fmt.Appendf(nil, "m-%d", i))
		if err != nil {
			fail("put", err)
		}
		say("put %s", id)
		m, err := q.Get(context.Background())
		if err != nil {
			fail("get", err)
		}
		if err := q.Requeue(m.ID, 0); err != nil {
			fail("requeue", err)
		}
		say("dead %s", m.ID)
	}
}

// crashBusyChild puts, gets, finishes, requeues (now or a few ms later)
// and abandons messages (they time out after 30ms) until it is killed.
func crashBusyChild(q *Queue, say func(string, ...any), fail func(string, error)) {
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for i := 0; ; i++ {
		var id ID
		var err error
		if i%7 == 0 {
			id, err = q.PutDeferred(fmt.Appendf(nil, "d-%d", i), time.Duration(rng.IntN(20))*time.Millisecond)
		} else {
			id, err = q.Put(fmt.Appendf(nil, "m-%d", i))
		}
		if err != nil {
			fail("put", err)
		}
		say("put %s", id)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		m, err := q.Get(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			fail("get", err)
		}
		switch r := rng.IntN(10); {
		case r < 5:
			say("finishing %s", m.ID)
			if err := q.Finish(m.ID); err == nil {
				say("finished %s", m.ID)
			} else if !errors.Is(err, ErrNotInFlight) {
				fail("finish", err)
			}
		case r < 7:
			if err := q.Requeue(m.ID, time.Duration(rng.IntN(3))*5*time.Millisecond); err != nil && !errors.Is(err, ErrNotInFlight) {
				fail("requeue", err)
			}
		default: // abandoned: times out and comes back
		}
	}
}

// runChild starts the helper in mode on dir and SIGKILLs it once stop
// returns true for a line it printed; every line goes to lines.
func runChild(t *testing.T, dir, mode string, syncEvery int64, stop func(line string) bool, lines func(line string)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"="+mode, fmt.Sprintf("%s=%d", crashSyncEnv, syncEvery))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		lines(line)
		if !killed && stop(line) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill helper: %v", err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !killed || !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper %s ended with %v (stderr %q), want killed by SIGKILL", mode, err, stderr.String())
	}
}

// fields parses "verb id rest...".
func fields(t *testing.T, line string) (verb string, id ID, rest []string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 {
		return "", ID{}, nil
	}
	if err := id.UnmarshalText([]byte(f[1])); err != nil {
		return "", ID{}, nil // test framework output
	}
	return f[0], id, f[2:]
}

// TestCrash kills a child that only Puts, twice on the same DataPath (the
// second child recovers the first one's files), then checks that every
// acknowledged message comes back exactly once. With the default
// SyncEvery the child dies before go-diskqueue ever synced its metadata.
func TestCrash(t *testing.T) {
	for _, syncEvery := range []int64{1, DefaultSyncEvery} {
		t.Run(fmt.Sprintf("SyncEvery=%d", syncEvery), func(t *testing.T) {
			dir := t.TempDir()
			acked := map[ID]bool{}
			for range 2 {
				n := 0
				runChild(t, dir, "put", syncEvery, func(string) bool { n++; return n == 200 }, func(line string) {
					if verb, id, _ := fields(t, line); verb == "put" {
						acked[id] = true
					}
				})
			}
			q := openQueue(t, Options{Name: "crash", DataPath: dir})
			if st := q.Stats(); st.MetadataCorrupt != 0 {
				t.Errorf("MetadataCorrupt: got %d, want 0 (go-diskqueue's metadata after kill -9 is missing or stale, not damaged)", st.MetadataCorrupt)
			}
			got := map[ID]bool{}
			for _, m := range drain(t, q) {
				if got[m.ID] {
					t.Fatalf("after kill -9: got %s twice, want once", m.ID)
				}
				got[m.ID] = true
				mustFinish(t, q, m.ID)
			}
			for id := range acked {
				if !got[id] {
					t.Fatalf("after kill -9: acknowledged %s missing (%d acknowledged, %d back)", id, len(acked), len(got))
				}
			}
			t.Logf("%d acknowledged messages, %d back (the rest were written but not yet acknowledged)", len(acked), len(got))
		})
	}
}

// TestCrashJournaled kills a child (MemQueueSize 0, SyncEvery 1) that left
// messages ready, in flight, requeued and deferred, and checks that every
// one not finished comes back exactly once, with its attempts and due
// time, and that no finished one does.
func TestCrashJournaled(t *testing.T) {
	dir := t.TempDir()
	wants := map[ID]want{}
	bodies := map[ID]string{}
	runChild(t, dir, "journaled", 1, func(line string) bool { return line == "ready" }, func(line string) {
		verb, id, rest := fields(t, line)
		num := func(i int) int64 {
			n, err := strconv.ParseInt(rest[i], 10, 64)
			if err != nil {
				t.Fatalf("child line %q: %v", line, err)
			}
			return n
		}
		switch verb {
		case "put":
			bodies[id] = rest[0]
			wants[id] = want{rest[0], 1, crashEpoch}
		case "putdeferred":
			wants[id] = want{rest[0], 1, crashEpoch.Add(time.Duration(num(1)))}
		case "finished":
			delete(wants, id)
		case "deferred":
			wants[id] = want{bodies[id], int(num(0)) + 1, crashEpoch.Add(time.Duration(num(1)))}
		case "requeued":
			wants[id] = want{bodies[id], int(num(0)) + 1, crashEpoch}
		case "inflight": // ready again from the restart on
			wants[id] = want{bodies[id], int(num(0)) + 1, crashEpoch}
		}
	})
	if len(wants) != 38 {
		t.Fatalf("child reported %d messages left, want 38", len(wants))
	}
	clock := &fakeClock{t: crashEpoch}
	q := openQueue(t, Options{Name: "crash", DataPath: dir, now: clock.Now})
	if st := q.Stats(); st.Deferred != 8 || st.Journaled != 23 {
		t.Fatalf("after kill -9: got %d deferred and %d journaled, want 8 (5 requeued, 3 put) and 23 (8 deferred, 12 in flight, 3 requeued)", st.Deferred, st.Journaled)
	}
	expectExactly(t, q, clock, wants, 2*time.Hour)
}

// TestCrashBusy kills a child in the middle of puts, gets, finishes,
// requeues and timeouts, with frequent journal compactions and
// go-diskqueue's metadata lagging (default SyncEvery), twice on the same
// DataPath. Every acknowledged message that was not finished comes back
// exactly once; no finished one comes back. (One whose Finish was under
// way at the kill may come back or not.)
func TestCrashBusy(t *testing.T) {
	dir := t.TempDir()
	acked, finishing, finished := map[ID]bool{}, map[ID]bool{}, map[ID]bool{}
	for round := range 2 {
		n := 0
		runChild(t, dir, "busy", 0, func(line string) bool {
			if strings.HasPrefix(line, "finished ") {
				n++
			}
			return n == 400+100*round
		}, func(line string) {
			switch verb, id, _ := fields(t, line); verb {
			case "put":
				acked[id] = true
			case "finishing":
				finishing[id] = true
			case "finished":
				finished[id] = true
				delete(finishing, id)
			}
		})
	}
	s := startScanner(t, ScannerOptions{ScanInterval: 5 * time.Millisecond})
	q := openQueue(t, Options{Name: "crash", DataPath: dir, Scanner: s})
	got, unacked := map[ID]bool{}, 0
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := tryGet(t, q, 100*time.Millisecond)
		if m == nil {
			if st := q.Stats(); st.Depth == 0 && st.Deferred == 0 && st.InFlight == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("draining: still %+v after 20s", q.Stats())
			}
			continue
		}
		switch {
		case got[m.ID]:
			t.Fatalf("after kill -9: got %s %q twice, want once", m.ID, m.Body)
		case finished[m.ID]:
			t.Fatalf("after kill -9: got %s %q (attempts %d), which was finished", m.ID, m.Body, m.Attempts)
		case !acked[m.ID]:
			unacked++ // written, killed before it was printed
		}
		got[m.ID] = true
		mustFinish(t, q, m.ID)
	}
	missing := 0
	for id := range acked {
		if !got[id] && !finished[id] && !finishing[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("after kill -9: %d acknowledged, unfinished messages missing (%d acknowledged, %d finished, %d back)", missing, len(acked), len(finished), len(got))
	}
	st := q.Stats()
	if st.MetadataCorrupt != 0 {
		t.Errorf("MetadataCorrupt: got %d, want 0 (go-diskqueue's metadata after kill -9 is stale, not damaged)", st.MetadataCorrupt)
	}
	t.Logf("%d acknowledged, %d finished, %d back (%d never acknowledged); %d stale copies dropped", len(acked), len(finished), len(got), unacked, st.Duplicates)
}

// TestCrashDeadLetter kills a child that dead-letters messages into a
// durable dead-letter queue with a memory chan: after both queues are
// opened again, every message whose Put returned is in the dead-letter
// queue or back in its source, never lost, and only the one being
// dead-lettered at the kill may be in both.
func TestCrashDeadLetter(t *testing.T) {
	for _, tt := range []struct {
		syncEvery int64
		dead      int // dead letters before the kill
	}{
		{1, 25},
		{DefaultSyncEvery, 300},
	} {
		t.Run(fmt.Sprintf("SyncEvery=%d", tt.syncEvery), func(t *testing.T) {
			dir := t.TempDir()
			put, dead := map[ID]bool{}, 0
			runChild(t, dir, "dead", tt.syncEvery, func(line string) bool {
				if strings.HasPrefix(line, "dead ") {
					dead++
				}
				return dead == tt.dead
			}, func(line string) {
				if verb, id, _ := fields(t, line); verb == "put" {
					put[id] = true
				}
			})
			dlq := openQueue(t, Options{Name: "dead", DataPath: dir, MemQueueSize: 100})
			q := openQueue(t, Options{Name: "crash", DataPath: dir, MaxAttempts: 1, DeadLetter: dlq})
			where := map[ID][]string{}
			for _, c := range []struct {
				name string
				q    *Queue
			}{{"dead-letter queue", dlq}, {"source", q}} {
				for _, m := range drain(t, c.q) {
					where[m.ID] = append(where[m.ID], c.name)
					mustFinish(t, c.q, m.ID)
				}
			}
			var lost, both int
			for id := range put {
				switch w := where[id]; {
				case len(w) == 0:
					lost++
				case len(w) == 2 && w[0] != w[1]:
					both++
				case len(w) > 1:
					t.Errorf("after kill -9: got %s %d times in the %s, want once", id, len(w), w[0])
				}
			}
			if lost > 0 || both > 1 {
				t.Fatalf("after kill -9: got %d of %d messages lost and %d in both queues, want none lost and at most 1 (the one being dead-lettered) in both", lost, len(put), both)
			}
			t.Logf("%d put, %d dead-lettered before the kill; back: %d in the dead-letter queue, %d in the source", len(put), tt.dead, dlq.Stats().Finished, q.Stats().Finished)
		})
	}
}
