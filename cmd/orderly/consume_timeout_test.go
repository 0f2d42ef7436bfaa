package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-go/orderly/group"
)

// TestConsumeTimeoutNamesFlag: a record whose only allowed run goes past
// --timeout is dead-lettered with reason timeout and an error that names
// --timeout and its value, the flag consume's user set (the group's own
// error names its MsgTimeout), and ORDERLY_TIMEOUT when the value came
// from there, since nothing on the command line then says --timeout. So
// does one whose --exec command is long: the error quotes only the
// command's start, and a 1.5 KB command used to fill the dead letter's
// 1 KiB message before the cause.
func TestConsumeTimeoutNamesFlag(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "slow.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat >/dev/null\nsleep 10\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	flag := []string{"--timeout", "300ms"}
	for _, tt := range []struct {
		name, cmd string
		vars      []string // ORDERLY_* variables
		args      []string
		want      string // in the dead letter's error
	}{
		{"script", script, nil, flag, "ran past --timeout 300ms: "},
		{"long command", script + " # " + strings.Repeat("x", 1500), nil, flag, "ran past --timeout 300ms: "},
		{"variable", script, []string{"ORDERLY_TIMEOUT=300ms"}, nil, "ran past --timeout 300ms (from ORDERLY_TIMEOUT): "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newTopic(t, "slow", 1)
			produceKeyed(t, b, "slow", 1, 1)
			data := t.TempDir()
			p := startConsumeWith(t, tt.vars, append([]string{"--brokers", b.Addrs()[0], "--topic", "slow", "--group", "slow",
				"--exec", tt.cmd, "--max-attempts", "1", "--data", data, "--progress", "off", "--log-level", "error"}, tt.args...)...)
			p.waitCommitted(b, "slow", "slow")
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
			}
			letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
			if len(letters) != 1 || letters[0].Reason != "timeout" || !strings.Contains(letters[0].Error, tt.want) {
				t.Fatalf("dead letters: got %+v, want one, reason timeout, its error saying %q", letters, tt.want)
			}
		})
	}
}

// TestConsumeStopWaitsForTimeout: SIGTERM lets a call in flight finish
// within its --timeout, past the group's default drain of 30s: a command
// that runs 32s of a --timeout 40s completes, its record is committed,
// and consume exits 0. The drain used to cut it at 30s whatever --timeout
// said (the binary prober), killing the command and leaving the record for
// the next run.
func TestConsumeStopWaitsForTimeout(t *testing.T) {
	t.Parallel() // mostly waits on the command
	if testing.Short() {
		t.Skip("runs a 32s command")
	}
	dir := t.TempDir()
	started, done := filepath.Join(dir, "started"), filepath.Join(dir, "done")
	script := filepath.Join(dir, "long.sh")
	body := "#!/bin/sh\ncat >/dev/null\ntouch " + started + "\nsleep 32\ntouch " + done + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	b := newTopic(t, "long", 1)
	produceKeyed(t, b, "long", 1, 1)
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "long", "--group", "long",
		"--exec", script, "--timeout", "40s", "--progress", "off", "--log-level", "error")
	p.waitFor(time.Minute, "the command to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	if _, err := os.Stat(done); err != nil {
		t.Fatalf("the command in flight at SIGTERM did not finish within its --timeout 40s: %v\n%s", err, p.output())
	}
	if got := b.Committed("long", "long")[0]; got != 1 {
		t.Fatalf("committed offset after the stop: got %d, want 1", got)
	}
}

// TestConsumeDrainTimeouts: the group's default drain, with the timeouts
// consume sets, covers a call's whole --timeout and a second; the
// rebalance timeout is raised to twice the drain when it is below, under
// either protocol (group.New raises Net.ReadTimeout for an eager one:
// group's TestJoinReadTimeout).
func TestConsumeDrainTimeouts(t *testing.T) {
	for _, tt := range []struct {
		name             string
		timeout          time.Duration
		strategies       []string
		drain, rebalance time.Duration
	}{
		{"defaults", 30 * time.Second, []string{"cooperative-sticky"}, 31 * time.Second, 62 * time.Second},
		{"short --timeout, range", time.Second, []string{"range"}, 30 * time.Second, 60 * time.Second},
		{"--timeout 29s, range", 29 * time.Second, []string{"range"}, 30 * time.Second, 60 * time.Second},
		{"short --timeout, cooperative", time.Second, []string{"cooperative-sticky"}, 30 * time.Second, 60 * time.Second},
		{"long --timeout, cooperative", 60 * time.Second, []string{"cooperative-sticky"}, 61 * time.Second, 122 * time.Second},
		{"long --timeout, range", 60 * time.Second, []string{"range"}, 61 * time.Second, 122 * time.Second},
		{"long --timeout, both", 60 * time.Second, []string{"cooperative-sticky", "range"}, 61 * time.Second, 122 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &consumeOpts{timeout: tt.timeout, strategies: tt.strategies}
			sc := group.DefaultSarama()
			sc.Consumer.Group.Rebalance.GroupStrategies = o.balanceStrategies()
			o.setRebalanceTimeouts(sc)
			drain := group.DefaultDrainTimeout(sc.Consumer.Group.Rebalance.Timeout, o.timeout)
			if got := [2]time.Duration{drain, sc.Consumer.Group.Rebalance.Timeout}; got != [2]time.Duration{tt.drain, tt.rebalance} {
				t.Errorf("drain and rebalance timeouts: got %v, want %v", got, [2]time.Duration{tt.drain, tt.rebalance})
			}
		})
	}
}
