package group

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-go/orderly/commit"
)

// TestCrashLosesNothing kills a consumer process with SIGKILL in the middle
// of a run, then lets another one finish. Every message must have been
// handled by one of them (no loss), and the offsets committed when the
// first one died must not pass anything it had not handled: a crash may
// only repeat work above the committed offset.
//
// The consumer is this test binary run again as a child (see
// TestCrashChild); it records each message it handles in a file before
// Do returns, so the parent can read what it did after it died.
func TestCrashLosesNothing(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	if testing.Short() {
		t.Skip("runs child processes")
	}
	const partitions, n, keys = 4, 40_000, 200
	r := newRig(t, "crash", partitions, n, keys)
	dir := t.TempDir()

	first := startChild(t, r, filepath.Join(dir, "first.log"))
	waitFor(t, time.Minute, "the first consumer to handle a third of the messages", func() bool {
		return countLines(t, filepath.Join(dir, "first.log")) >= n/3
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	committedAtCrash := r.b.Committed("crash", r.topic)
	handledFirst := readHandled(t, filepath.Join(dir, "first.log"))
	if len(handledFirst) >= n {
		t.Fatalf("the first consumer handled everything (%d) before it was killed: the test proves nothing", len(handledFirst))
	}
	if len(committedAtCrash) == 0 {
		t.Fatal("nothing was committed before the kill: the commit check proves nothing")
	}

	// Commits made before the crash never pass unhandled work.
	for p, off := range committedAtCrash {
		for o := int64(0); o < off; o++ {
			if !handledFirst[[2]int64{int64(p), o}] {
				t.Fatalf("partition %d committed %d at the crash, but offset %d was never handled", p, off, o)
			}
		}
	}

	second := startChild(t, r, filepath.Join(dir, "second.log"))
	r.waitAllCommitted("crash", 2*time.Minute)
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second consumer did not exit cleanly on SIGTERM: %v", err)
	}
	handledSecond := readHandled(t, filepath.Join(dir, "second.log"))

	hw := r.b.HighWatermarks(r.topic)
	repeated := 0
	for p, h := range hw {
		var lost []int64
		for o := int64(0); o < h; o++ {
			k := [2]int64{int64(p), o}
			a, b := handledFirst[k], handledSecond[k]
			switch {
			case !a && !b:
				lost = append(lost, o)
			case a && b:
				repeated++
				if o < committedAtCrash[p] {
					t.Errorf("partition %d offset %d handled again below the committed offset %d", p, o, committedAtCrash[p])
				}
			}
		}
		if len(lost) > 0 {
			t.Errorf("partition %d: %d offsets never handled (lost), first %v", p, len(lost), lost[:min(10, len(lost))])
		}
	}
	t.Logf("first consumer handled %d before SIGKILL (committed %v); second handled %d; %d repeated above the committed offsets (allowed after a crash)",
		len(handledFirst), committedAtCrash, len(handledSecond), repeated)
}

// startChild runs TestCrashChild in a new process consuming the rig's topic
// as group "crash", recording what it handles in log; env adds to its
// environment.
func startChild(t *testing.T, r *rig, log string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		"ORDERLY_CRASH_CHILD=1",
		"ORDERLY_CRASH_BROKERS="+strings.Join(r.b.Addrs(), ","),
		"ORDERLY_CRASH_TOPIC="+r.topic,
		"ORDERLY_CRASH_LOG="+log)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// TestCrashChild is the consumer process of TestCrashLosesNothing.
func TestCrashChild(t *testing.T) {
	if os.Getenv("ORDERLY_CRASH_CHILD") != "1" {
		t.Skip("only run as TestCrashLosesNothing's child process")
	}
	f, err := os.OpenFile(os.Getenv("ORDERLY_CRASH_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg := fastConfig(t, strings.Split(os.Getenv("ORDERLY_CRASH_BROKERS"), ","), os.Getenv("ORDERLY_CRASH_TOPIC"), "crash")
	// About 25k msg/s: slow enough that several auto-commits (every 100 ms
	// here) happen before the parent kills the first consumer.
	cfg.Size, cfg.Num = 16, 8
	slowKey := os.Getenv("ORDERLY_CRASH_SLOW_KEY")
	if slowKey != "" {
		cfg.Size = 1
	}
	// ORDERLY_CRASH_FAIL: offset of partition 0 that fails on its first
	// two attempts (its attempts are logged in ORDERLY_CRASH_ATTEMPTS);
	// with ORDERLY_CRASH_PARK (a DataPath), Unordered, and the offset is
	// deferred once (a marker file says it was) instead.
	target, _ := strconv.ParseInt(os.Getenv("ORDERLY_CRASH_FAIL"), 10, 64)
	parkDir := os.Getenv("ORDERLY_CRASH_PARK")
	var attempts *os.File
	if os.Getenv("ORDERLY_CRASH_FAIL") != "" {
		cfg.Size, cfg.Num = 1, 4
		cfg.Retry = Retry{Backoff: 2 * time.Second, MaxBackoff: 2 * time.Second, Jitter: -1}
		if parkDir != "" {
			cfg.Ordering, cfg.DataPath = Unordered, parkDir
		}
		if attempts, err = os.OpenFile(os.Getenv("ORDERLY_CRASH_ATTEMPTS"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			t.Fatal(err)
		}
		defer attempts.Close()
	}
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		time.Sleep(5 * time.Millisecond)
		if slowKey != "" && string(batch[0].Key) == slowKey {
			time.Sleep(500 * time.Millisecond) // a slow lane: the frontier waits, the rest finishes above it
		}
		if m := batch[0]; attempts != nil && m.Partition == 0 && m.Offset == target {
			fmt.Fprintf(attempts, "%d %d\n", m.Attempt, time.Now().UnixNano())
			marker := filepath.Join(parkDir, "deferred")
			switch _, statErr := os.Stat(marker); {
			case parkDir == "" && m.Attempt < 3:
				return errors.New("fails twice")
			case parkDir != "" && statErr != nil:
				if err := os.WriteFile(marker, nil, 0o644); err != nil {
					return err
				}
				var be BatchError
				be.Defer(0, 4*time.Second)
				return be.Err()
			}
		}
		buf := make([]byte, 0, 16*len(batch)) // Do runs on many workers at once
		for _, m := range batch {
			buf = fmt.Appendf(buf, "%d %d\n", m.Partition, m.Offset)
		}
		// One write(2) per batch, before Do returns: it survives SIGKILL.
		_, err := f.Write(buf)
		return err
	})
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCrashRepeatsOnlyWorkAfterLastCommit: a consumer process with a slow
// lane (its partition's frontier waits for it while the rest finishes) is
// killed with SIGKILL. Its last commit's metadata lists the finished
// messages above the frontier; the next owner skips every one of them and
// repeats only what the first process finished after that commit.
func TestCrashRepeatsOnlyWorkAfterLastCommit(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	if testing.Short() {
		t.Skip("runs child processes")
	}
	const partitions, n, keys = 4, 40_000, 200
	r := newRig(t, "crash", partitions, n, keys)
	dir := t.TempDir()
	first := startChild(t, r, filepath.Join(dir, "first.log"), "ORDERLY_CRASH_SLOW_KEY=k0")
	listed := func() (total int64) {
		for _, c := range r.b.Commits("crash", r.topic) {
			if d, err := commit.DecodeMeta(c.Metadata); err == nil {
				total += d.Count()
			}
		}
		return total
	}
	waitFor(t, time.Minute, "the first consumer's commits to list 2000 finished messages above the frontier", func() bool {
		return listed() >= 2000
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	atCrash := r.b.Commits("crash", r.topic)
	handledFirst := readHandled(t, filepath.Join(dir, "first.log"))
	skippable := map[[2]int64]bool{} // below the committed offset or listed in its metadata
	listedAtCrash := 0
	for p, c := range atCrash {
		d, err := commit.DecodeMeta(c.Metadata)
		if err != nil && !errors.Is(err, commit.ErrNotOrderlyMetadata) {
			t.Fatalf("partition %d: metadata at the crash %q: %v", p, c.Metadata, err)
		}
		for o := range c.Offset {
			skippable[[2]int64{int64(p), o}] = true
		}
		for _, rg := range d.Ranges {
			for o := rg.Start; o < rg.End; o++ {
				skippable[[2]int64{int64(p), o}] = true
				listedAtCrash++
			}
		}
	}
	for k := range skippable {
		if !handledFirst[k] && k[1] < r.b.HighWatermarks(r.topic)[int32(k[0])] {
			t.Fatalf("partition %d offset %d committed or listed as finished at the crash, but never handled", k[0], k[1])
		}
	}
	second := startChild(t, r, filepath.Join(dir, "second.log"))
	r.waitAllCommitted("crash", 2*time.Minute)
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second consumer did not exit cleanly on SIGTERM: %v", err)
	}
	handledSecond := readHandled(t, filepath.Join(dir, "second.log"))
	finishedAfterCommit, repeated := 0, 0
	for k := range handledFirst {
		if !skippable[k] {
			finishedAfterCommit++
		}
	}
	hw := r.b.HighWatermarks(r.topic)
	for p, h := range hw {
		for o := range h {
			k := [2]int64{int64(p), o}
			switch a, b := handledFirst[k], handledSecond[k]; {
			case !a && !b:
				t.Fatalf("partition %d offset %d never handled (lost)", p, o)
			case a && b:
				repeated++
				if skippable[k] {
					t.Fatalf("partition %d offset %d handled again although the last commit listed it as finished", p, o)
				}
			}
		}
	}
	if repeated > finishedAfterCommit {
		t.Fatalf("repeated %d, more than the %d the first consumer finished after its last commit", repeated, finishedAfterCommit)
	}
	// The bound is what finished while the last commit was on its way:
	// a commit interval, or as long as sarama's commit waits behind a
	// long-polling fetch on the same connection (Consumer.MaxWaitTime,
	// DefaultFetchMaxWait), whichever is longer.
	t.Logf("first consumer handled %d; its last commit listed %d finished above the frontiers; the second skipped all of them and repeated %d (bound: the %d the first finished after that commit)",
		len(handledFirst), listedAtCrash, repeated, finishedAfterCommit)
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "\n")
}

func readHandled(t *testing.T, path string) map[[2]int64]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[[2]int64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p, o int64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &p, &o); err != nil {
			continue // a line cut short by the kill
		}
		out[[2]int64{p, o}] = true
	}
	return out
}

// readAttempts reads an attempts log of TestCrashChild.
func readAttempts(t *testing.T, path string) (attempts []int, at []time.Time) {
	t.Helper()
	data, _ := os.ReadFile(path)
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var a int
		var ns int64
		if _, err := fmt.Sscanf(line, "%d %d", &a, &ns); err == nil {
			attempts = append(attempts, a)
			at = append(at, time.Unix(0, ns))
		}
	}
	return attempts, at
}

// TestCrashKeepsAttempts: a message fails under a consumer process, which
// is killed with SIGKILL while the message waits for its retry; the next
// process goes on at attempt 2 (the commit metadata carried it), then 3,
// and not before the backoff the first one set.
func TestCrashKeepsAttempts(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	if testing.Short() {
		t.Skip("runs child processes")
	}
	const n, keys, target = 2000, 20, 10
	r := newRig(t, "crash-attempts", 1, n, keys)
	dir := t.TempDir()
	env := []string{"ORDERLY_CRASH_FAIL=" + strconv.Itoa(target), "ORDERLY_CRASH_ATTEMPTS=" + filepath.Join(dir, "attempts.log")}
	first := startChild(t, r, filepath.Join(dir, "first.log"), env...)
	var notBefore time.Time
	waitFor(t, time.Minute, "a commit carrying the failed message's attempt 2", func() bool {
		d, err := commit.DecodeMeta(r.b.Commits("crash", r.topic)[0].Metadata)
		w, ok := d.WaitingAt(target)
		notBefore = w.NotBefore
		return err == nil && ok && w.Attempt == 2
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if a, _ := readAttempts(t, filepath.Join(dir, "attempts.log")); len(a) != 1 || a[0] != 1 {
		t.Fatalf("attempts under the first process: %v, want [1]", a)
	}
	second := startChild(t, r, filepath.Join(dir, "second.log"), env...)
	r.waitAllCommitted("crash", time.Minute)
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = second.Wait()
	a, at := readAttempts(t, filepath.Join(dir, "attempts.log"))
	if len(a) != 3 || a[1] != 2 || a[2] != 3 {
		t.Fatalf("attempts over both processes: %v, want [1 2 3]", a)
	}
	if at[1].Before(notBefore.Add(-100 * time.Millisecond)) {
		t.Fatalf("attempt 2 at %v, before the committed not-before %v", at[1], notBefore)
	}
}

// TestCrashKeepsParked: Unordered with a DataPath; a message deferred by
// 4s is parked and committed past; the process is killed with SIGKILL
// before it is due; the next process on the same DataPath hands it to Do
// once due: handled once, by the second process.
func TestCrashKeepsParked(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	if testing.Short() {
		t.Skip("runs child processes")
	}
	const n, keys, target = 2000, 20, 10
	r := newRig(t, "crash-park", 1, n, keys)
	dir := t.TempDir()
	park := filepath.Join(dir, "data")
	env := []string{"ORDERLY_CRASH_FAIL=" + strconv.Itoa(target), "ORDERLY_CRASH_ATTEMPTS=" + filepath.Join(dir, "attempts.log"), "ORDERLY_CRASH_PARK=" + park}
	first := startChild(t, r, filepath.Join(dir, "first.log"), env...)
	waitFor(t, time.Minute, "the commit to pass the parked message", func() bool {
		return r.b.Committed("crash", r.topic)[0] > target
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if a, _ := readAttempts(t, filepath.Join(dir, "attempts.log")); len(a) != 1 {
		t.Fatalf("deliveries under the first process: %v, want one (deferred)", a)
	}
	second := startChild(t, r, filepath.Join(dir, "second.log"), env...)
	waitFor(t, time.Minute, "the parked message to be handled by the second process", func() bool {
		if _, err := os.Stat(filepath.Join(dir, "second.log")); err != nil {
			return false
		}
		return readHandled(t, filepath.Join(dir, "second.log"))[[2]int64{0, target}]
	})
	r.waitAllCommitted("crash", time.Minute)
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = second.Wait()
	if readHandled(t, filepath.Join(dir, "first.log"))[[2]int64{0, target}] {
		t.Fatal("the first process handled the parked message: it was not deferred")
	}
	if a, _ := readAttempts(t, filepath.Join(dir, "attempts.log")); len(a) != 2 {
		t.Fatalf("deliveries over both processes: %v, want two (deferred, then handled)", a)
	}
}
