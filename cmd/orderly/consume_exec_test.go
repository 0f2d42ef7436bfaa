//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/flock"
)

// execScript is the --exec command of TestConsumeExec. Each run takes the
// next call.N directory (mkdir is atomic), keeps its stdin there, and:
// exits 75 on the first 3 runs; exits 1 on every batch holding v57 (the
// group halves such a batch until v57 stands alone, and dead-letters only
// v57); the first time v170 comes, starts
// a sleep in the background, records its pid and waits (the --timeout
// kills the process group, sleep included); names v99 for a retry the
// first time it comes and v150 for rejection on stdout, the others done.
// The exit status is written to call.N/exit before it exits.
const execScript = `#!/bin/sh
state=%s
batch=$(cat)
i=0
while ! mkdir "$state/call.$i" 2>/dev/null; do i=$((i+1)); done
dir="$state/call.$i"
printf '%%s\n' "$batch" > "$dir/stdin"
finish() { echo "$1" > "$dir/exit"; exit "$1"; }
if [ "$i" -lt 3 ]; then echo "database busy" >&2; finish 75; fi
case "$batch" in *'"value":"v57"'*) echo "bad record v57" >&2; finish 1;; esac
case "$batch" in *'"value":"v170"'*)
	if mkdir "$state/v170" 2>/dev/null; then
		sleep 60 &
		echo $! > "$state/sleep.pid"
		echo timeout > "$dir/exit"
		wait
	fi;;
esac
retry=
case "$batch" in *'"value":"v99"'*)
	if mkdir "$state/v99" 2>/dev/null; then retry=v99; : > "$dir/retried"; fi;;
esac
printf '%%s\n' "$batch" | awk -v retry="$retry" '
	/"value":"v99"/ && retry == "v99" { printf "{\"index\": %%d, \"outcome\": \"retry\", \"error\": \"v99 not yet\"}\n", NR-1 }
	/"value":"v150"/ { printf "{\"index\": %%d, \"outcome\": \"reject\", \"error\": \"v150 is malformed\"}\n", NR-1 }
	{ print "log line, not an outcome" }'
finish 0
`

// execCall is one run of the script as it recorded it.
type execCall struct {
	i       int
	recs    []recordJSON
	exit    string // 0, 1, 75, or timeout (killed)
	retried bool   // it named v99 for a retry
	at      time.Time
}

func readCalls(t *testing.T, state string) []execCall {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(state, "call.*"))
	if err != nil {
		t.Fatal(err)
	}
	var calls []execCall
	for _, d := range dirs {
		i, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(d), "."))
		if err != nil {
			t.Fatal(err)
		}
		c := execCall{i: i}
		in, err := os.ReadFile(filepath.Join(d, "stdin"))
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(filepath.Join(d, "stdin")); err == nil {
			c.at = fi.ModTime() // written as the run started
		}
		for line := range strings.Lines(string(in)) {
			if strings.TrimSpace(line) == "" {
				continue
			}
			var r recordJSON
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: stdin line %q: %v", d, line, err)
			}
			c.recs = append(c.recs, r)
		}
		ex, _ := os.ReadFile(filepath.Join(d, "exit"))
		c.exit = strings.TrimSpace(string(ex))
		_, err = os.Stat(filepath.Join(d, "retried"))
		c.retried = err == nil
		calls = append(calls, c)
	}
	slices.SortFunc(calls, func(a, b execCall) int { return a.i - b.i })
	return calls
}

// TestConsumeExec runs `orderly consume --exec` with execScript: the runs
// that exit 75 are retried, the runs that exit 1 (those holding v57) are
// halved until v57 runs alone and only v57 is dead-lettered, its batch
// mates done in the runs on the halves, a run past --timeout is killed with its process
// group (its background sleep is gone) and retried, and the outcomes on
// stdout retry v99 and reject v150 (their keys' later records in the run
// come again). Every record is done in exactly one successful run, per
// key in offset order, or dead-lettered with reason rejected; the commit
// is at the high watermarks.
func TestConsumeExec(t *testing.T) {
	t.Parallel()
	const n, keys = 200, 10
	b := newTopic(t, "jobs", 2)
	produceKeyed(t, b, "jobs", n, keys)
	state, data := t.TempDir(), t.TempDir()
	script := filepath.Join(t.TempDir(), "handle.sh")
	if err := os.WriteFile(script, fmt.Appendf(nil, execScript, state), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "jobs", "--group", "scripts",
		"--exec", script, "--size", "10", "--num", "4", "--ticker", "20ms", "--timeout", "2s",
		"--backoff", "50ms", "--max-backoff", "200ms", "--data", data, "--progress", "off", "--log-level", "warn")
	p.waitCommitted(b, "scripts", "jobs")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}

	calls := readCalls(t, state)
	defer func() {
		if t.Failed() {
			dumpCalls(t, calls)
			t.Log(p.output())
		}
	}()
	// What a run did, as the group sees it: in a run that exits 0, a
	// record named on stdout (retry, reject) holds its key, so the later
	// records of that key in the run come again (lane order: BatchError);
	// the others are done. A run that exits 1 does nothing; one of v57
	// alone dead-letters it.
	exits := map[string]int{}
	done := map[coord]int{}
	dead := map[coord]string{} // dead-lettered, with what its error names
	lastOff := map[string]int64{}
	exit1v57 := 0 // runs that exited 1 holding v57
	for _, c := range calls {
		exits[c.exit]++
		if c.exit != "0" && c.exit != "1" {
			continue
		}
		held := map[string]bool{}
		for _, r := range c.recs {
			k, v, at := *r.Key, *r.Value, coord{r.Topic, r.Partition, r.Offset}
			switch {
			case held[k]:
				continue
			case c.exit == "1":
				if v != "v57" {
					continue // halved: done in a later run
				}
				if len(c.recs) == 1 {
					dead[at] = "exit status 1; stderr: bad record v57"
				}
				exit1v57++
				continue
			case v == "v150":
				dead[at] = "v150 is malformed"
				held[k] = true
				continue
			case v == "v99" && c.retried:
				held[k] = true
				continue
			}
			if prev, ok := lastOff[k]; ok && r.Offset <= prev {
				t.Errorf("key %s: offset %d done after offset %d, want offset order", k, r.Offset, prev)
			}
			lastOff[k] = r.Offset
			done[at]++
		}
	}
	if exits["75"] != 3 || exits["1"] == 0 || exits["1"] != exit1v57 || exits["timeout"] != 1 {
		t.Errorf("runs by exit: got %v (%d holding v57), want 3 x 75, some x 1 (v57's batch, its halves, v57 alone), each holding v57, 1 timed out, the rest 0",
			exits, exit1v57)
	}
	// The sink's own entries carry group, as the group's do.
	temp := 0
	for line := range strings.Lines(p.stderr.String()) {
		if strings.Contains(line, "EX_TEMPFAIL") {
			temp++
			if !strings.Contains(line, `"group": "scripts"`) {
				t.Errorf("log entry without the group field: %s", line)
			}
		}
	}
	if temp == 0 {
		t.Errorf("no log entry of the runs that exited 75 (EX_TEMPFAIL):\n%s", p.stderr.String())
	}
	for at, k := range done {
		if _, isDead := dead[at]; k != 1 || isDead {
			t.Errorf("%v done %d times (dead-lettered too: %v), want once", at, k, isDead)
		}
	}
	if len(done)+len(dead) != n {
		t.Errorf("got %d records done and %d dead-lettered, want %d in all", len(done), len(dead), n)
	}
	letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	if len(letters) != len(dead) {
		t.Errorf("got %d dead letters, want %d: v57, alone in a run that exited 1, and v150", len(letters), len(dead))
	}
	for _, d := range letters {
		want, ok := dead[coord{d.Topic, d.Partition, d.Offset}]
		if !ok || d.Reason != "rejected" || !strings.Contains(d.Error, want) {
			t.Errorf("dead letter %s/%d@%d reason %s error %q: want reason rejected, error naming %q", d.Topic, d.Partition, d.Offset, d.Reason, d.Error, want)
		}
	}
	pid, err := os.ReadFile(filepath.Join(state, "sleep.pid"))
	if err != nil {
		t.Fatalf("the timed-out run left no sleep.pid: %v", err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(pid))); n <= 0 || !processEnded(n, 5*time.Second) {
		t.Errorf("the timed-out run's background sleep (pid %q) still runs: want its process group killed", pid)
	}
	got := finalFigures(t, p.stdout.String())
	wantFigures(t, got, map[string]float64{"committed": n, "handled": float64(n - len(dead)), "failed calls": 3, "timed out": 1,
		"dead-lettered": float64(len(dead)), "rejected": float64(len(dead)), "rejected calls": float64(exits["1"]),
		"items named retry or defer": 1, "items named reject": 1})
	if committed, hw := b.Committed("scripts", "jobs"), b.HighWatermarks("jobs"); fmt.Sprint(committed) != fmt.Sprint(hw) {
		t.Errorf("committed %v, want the high watermarks %v", committed, hw)
	}
}

// processEnded reports whether process pid has ended within the wait. A
// killed process whose parent died too stays a zombie until PID 1 reaps
// it, and signal 0 still reaches a zombie; so on Linux a zombie counts as
// ended, read from the state field of /proc/PID/stat.
func processEnded(pid int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		if processGoneOrZombie(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func processGoneOrZombie(pid int) bool {
	fields, err := flock.StatFields(pid)
	if err != nil {
		return syscall.Kill(pid, 0) != nil // no /proc (not Linux), or gone
	}
	return len(fields) > 0 && fields[0] == "Z"
}

func dumpCalls(t *testing.T, calls []execCall) {
	for _, c := range calls {
		var vs []string
		for _, r := range c.recs {
			vs = append(vs, fmt.Sprintf("%s@%d/%d#%d", *r.Value, r.Partition, r.Offset, r.Attempt))
		}
		t.Logf("call %d exit %s retried %v: %v", c.i, c.exit, c.retried, vs)
	}
}

// rejectScript is the --exec command of TestConsumeExecRejectedBatch:
// each run takes the next call.N directory, keeps its stdin there, and
// exits 1 when the batch holds rejBad, else 0, writing the status to
// call.N/exit.
const rejectScript = `#!/bin/sh
state=%s
batch=$(cat)
i=0
while ! mkdir "$state/call.$i" 2>/dev/null; do i=$((i+1)); done
dir="$state/call.$i"
printf '%%s\n' "$batch" > "$dir/stdin"
case "$batch" in *'"value":"%s"'*) echo 1 > "$dir/exit"; echo "bad record %s" >&2; exit 1;; esac
echo 0 > "$dir/exit"
`

// TestConsumeExecRejectedBatch: a command that exits 1 for every batch
// holding one bad record dead-letters that record alone, in the local
// store, and every batch mate is done. A rejected batch used to
// dead-letter the first record of each of its keys: got 5 dead letters,
// want 1.
func TestConsumeExecRejectedBatch(t *testing.T) {
	t.Parallel()
	const topic = "rejected-run"
	b := newTopic(t, topic, 1)
	state, data := t.TempDir(), t.TempDir()
	script := filepath.Join(t.TempDir(), "handle.sh")
	if err := os.WriteFile(script, fmt.Appendf(nil, rejectScript, state, rejBad, rejBad), 0o755); err != nil {
		t.Fatal(err)
	}
	fig := runRejectedBatch(t, b, topic, "--exec", script, "--data", data)
	var calls []sinkCall
	for _, c := range readCalls(t, state) {
		if c.exit != "0" && c.exit != "1" {
			t.Fatalf("run %d exit %q, want 0 or 1", c.i, c.exit)
		}
		sc := sinkCall{rejected: c.exit == "1", at: c.at}
		for _, r := range c.recs {
			sc.recs = append(sc.recs, hit{topic: r.Topic, partition: r.Partition, offset: r.Offset, key: *r.Key, value: *r.Value, attempt: r.Attempt})
		}
		calls = append(calls, sc)
	}
	letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	checkRejectedAlone(t, calls, letters, fig, "exit status 1; stderr: bad record "+rejBad)
}
