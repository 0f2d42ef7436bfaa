package main

import (
	"bytes"
	"context"
	"encoding/json"
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
// either protocol. Under an eager one, where the other members wait in
// JoinGroup for this one's drain and sarama waits for that answer only
// Net.ReadTimeout, consume's group (group.New, as the consume it logs at
// info shows) raises the read timeout to a heartbeat interval (3s), the
// drain, the read-back of its final commit (a quarter of the rebalance
// timeout) and 5s: a member joining behind a 50s drain got "i/o timeout"
// under range with sarama's 30s. Under a cooperative one it stays 30s.
func TestConsumeDrainTimeouts(t *testing.T) {
	for _, tt := range []struct {
		name                     string
		timeout                  time.Duration
		strategies               []string
		drain, rebalance, reader time.Duration
	}{
		{"defaults", 30 * time.Second, []string{"cooperative-sticky"}, 31 * time.Second, 62 * time.Second, 30 * time.Second},
		{"short --timeout, range", time.Second, []string{"range"}, 30 * time.Second, 60 * time.Second, 53 * time.Second},
		{"--timeout 29s, range", 29 * time.Second, []string{"range"}, 30 * time.Second, 60 * time.Second, 53 * time.Second},
		{"short --timeout, cooperative", time.Second, []string{"cooperative-sticky"}, 30 * time.Second, 60 * time.Second, 30 * time.Second},
		{"long --timeout, cooperative", 60 * time.Second, []string{"cooperative-sticky"}, 61 * time.Second, 122 * time.Second, 30 * time.Second},
		{"long --timeout, range", 60 * time.Second, []string{"range"}, 61 * time.Second, 122 * time.Second, 99500 * time.Millisecond},
		{"long --timeout, both", 60 * time.Second, []string{"cooperative-sticky", "range"}, 61 * time.Second, 122 * time.Second, 99500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &consumeOpts{timeout: tt.timeout, strategies: tt.strategies}
			sc := group.DefaultSarama()
			sc.Consumer.Group.Rebalance.GroupStrategies = o.balanceStrategies()
			o.setRebalanceTimeout(sc)
			drain := group.DefaultDrainTimeout(sc.Consumer.Group.Rebalance.Timeout, o.timeout)
			if got := [2]time.Duration{drain, sc.Consumer.Group.Rebalance.Timeout}; got != [2]time.Duration{tt.drain, tt.rebalance} {
				t.Errorf("drain and rebalance timeouts: got %v, want %v", got, [2]time.Duration{tt.drain, tt.rebalance})
			}
			if got := consumeReadTimeout(t, tt.timeout, tt.strategies); got != tt.reader {
				t.Errorf("consume's group's Net.ReadTimeout: got %v, want %v", got, tt.reader)
			}
		})
	}
}

// consumeReadTimeout runs consume with --timeout timeout and
// --assignment-strategy strategies, stopped before it connects, and
// returns the Net.ReadTimeout its group uses: the one group.New logs
// raising (at info, from sarama's 30s), else 30s.
func consumeReadTimeout(t *testing.T, timeout time.Duration, strategies []string) time.Duration {
	t.Helper()
	const raised = "Net.ReadTimeout raised: "
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // New runs, Run returns at once
	var stdout, stderr bytes.Buffer
	args := []string{"consume", "--brokers", "127.0.0.1:1", "--topic", "t", "--group", "g", "--exec", "true", "--progress", "off",
		"--log-level", "info", "--timeout", timeout.String(), "--assignment-strategy", strings.Join(strategies, ",")}
	if err := run(ctx, args, env{stdout: &stdout, stderr: &stderr, lookup: noEnv}); err != nil {
		t.Fatalf("consume: %v\n%s", err, stderr.String())
	}
	var lines []string
	for line := range strings.Lines(stderr.String()) {
		if strings.Contains(line, raised) {
			lines = append(lines, line)
		}
	}
	switch len(lines) {
	case 0:
		return 30 * time.Second
	case 1:
	default:
		t.Fatalf("consume logged %d raises, want at most one:\n%s", len(lines), stderr.String())
	}
	var fields struct {
		Set  string `json:"net_read_timeout_set"`
		Used string `json:"net_read_timeout"`
	}
	if err := json.Unmarshal([]byte(lines[0][strings.Index(lines[0], "{"):]), &fields); err != nil {
		t.Fatalf("the raise's fields: %v\n%s", err, lines[0])
	}
	if fields.Set != "30s" {
		t.Errorf("the raise's net_read_timeout_set: got %q, want 30s (sarama's)", fields.Set)
	}
	used, err := time.ParseDuration(fields.Used)
	if err != nil {
		t.Fatalf("the raise's net_read_timeout: %v\n%s", err, lines[0])
	}
	return used
}
