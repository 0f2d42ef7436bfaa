//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/group"
)

// killScript is the --exec command of TestConsumeExecKilled: it writes
// its own pid and that of a background sleep to pids (one line a run)
// and waits for the sleep.
const killScript = `#!/bin/sh
cat >/dev/null
sleep 30 &
echo "$$ $!" >> %s
wait
`

// TestConsumeExecKilled: a kill -9 of consume takes the commands it runs
// with it, their children too, so that a restarted consumer cannot run
// the same records beside them.
func TestConsumeExecKilled(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "slow", 2)
	produceKeyed(t, b, "slow", 20, 4)
	state := t.TempDir()
	pidsFile := filepath.Join(state, "pids")
	script := filepath.Join(state, "handle.sh")
	if err := os.WriteFile(script, []byte(strings.Replace(killScript, "%s", pidsFile, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "slow", "--group", "slow",
		"--exec", script, "--size", "5", "--num", "2", "--ticker", "20ms", "--timeout", "1m",
		"--progress", "off", "--log-level", "warn")
	var pids []int
	p.waitFor(30*time.Second, "two commands running", func() bool {
		pids = readPids(t, pidsFile)
		return len(pids) >= 4
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(10 * time.Second)
	pids = readPids(t, pidsFile)
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for i, pid := range pids {
		what := "command"
		if i%2 == 1 {
			what = "command's child (sleep 30)"
		}
		if !processEnded(pid, 2*time.Second) {
			t.Errorf("%s %d still runs 2s after kill -9 of consume, want it killed", what, pid)
		}
	}
}

// readPids reads the pids the runs of killScript wrote.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue // a line being written
		}
		for _, s := range f {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: line %q", path, line)
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// guardPid is the pid of the running exec guard, 0 if none.
func guardPid() int {
	guard.mu.Lock()
	defer guard.mu.Unlock()
	if guard.w == nil {
		return 0
	}
	return guard.proc.Process.Pid
}

// TestExecGuardRestarts: a guard that died is replaced at the next
// command and told the groups in flight, so that it kills them when its
// pipe from consume closes: here a command whose background sleep
// outlives nothing.
func TestExecGuardRestarts(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "sleep.pid")
	opts := func(cmd string) *consumeOpts {
		return &consumeOpts{execCmd: cmd, backoff: time.Second, maxBackoff: time.Second}
	}
	long := newExecSink(opts("cat >/dev/null; sleep 30 & echo $! > "+pidFile+"; wait"), &gate{}, &sinkCounters{}, zap.NewNop())
	short := newExecSink(opts("cat >/dev/null"), &gate{}, &sinkCounters{}, zap.NewNop())
	batch := []*group.Message{{Topic: "t", Offset: 1, Value: []byte("v"), Attempt: 1}}
	longDone := make(chan error, 1)
	go func() { longDone <- long.send(context.Background(), batch) }()
	var sleepPid int
	deadline := time.Now().Add(10 * time.Second)
	for sleepPid == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the long command did not start its sleep within 10s")
		}
		time.Sleep(10 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		if strings.HasSuffix(string(b), "\n") {
			sleepPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	t.Cleanup(func() { syscall.Kill(sleepPid, syscall.SIGKILL) })

	old := guardPid()
	if old == 0 {
		t.Fatal("no guard while a command runs")
	}
	syscall.Kill(old, syscall.SIGKILL)
	if !processEnded(old, 5*time.Second) {
		t.Fatalf("guard %d still runs after SIGKILL", old)
	}
	if err := short.send(context.Background(), batch); err != nil {
		t.Fatalf("send after the guard died: got %v, want nil", err)
	}
	now := guardPid()
	if now == 0 || now == old || processGoneOrZombie(now) {
		t.Fatalf("guard after the old one (%d) died: got pid %d, want a new one running", old, now)
	}

	// What consume's death does to the guard's pipe.
	guard.mu.Lock()
	guard.w.Close()
	guard.w = nil
	proc := guard.proc
	guard.mu.Unlock()
	proc.Wait()
	select {
	case <-longDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the long command still runs 5s after its guard's pipe closed, want its group killed")
	}
	if !processEnded(sleepPid, 2*time.Second) {
		t.Errorf("the long command's background sleep %d still runs after its guard's pipe closed, want its group killed", sleepPid)
	}
}
