package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/internal/broker"
)

// TestHelp: the help of the root and of every subcommand goes to stdout,
// exits 0, starts with the same header and ends with the environment and
// exit status rules; the root's lists every subcommand.
func TestHelp(t *testing.T) {
	tests := []struct {
		args   []string
		path   string // the command whose help it is
		status string // its exit status
	}{
		{[]string{"--help"}, "orderly", helpExitStatusTimeout},
		{[]string{"-h"}, "orderly", helpExitStatusTimeout},
		{[]string{"help"}, "orderly", helpExitStatusTimeout},
		{[]string{"demo", "--help"}, "orderly demo", helpExitStatusTimeout},
		{[]string{"broker", "--help"}, "orderly broker", brokerExitStatus},
		{[]string{"help", "broker"}, "orderly broker", brokerExitStatus},
		{[]string{"bench", "-h"}, "orderly bench", helpExitStatusTimeout},
		{[]string{"dlq", "list", "-h"}, "orderly dlq list", helpExitStatus},
	}
	for _, tt := range tests {
		r := runBin(t, nil, tt.args...)
		header := "Usage: " + tt.path + " ["
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, header) ||
			!strings.Contains(r.stdout, "\nFlags:\n") || !endsWithFooter(r.stdout, tt.status) {
			t.Errorf("orderly %q: got exit %d, stderr %q, stdout:\n%s\nwant exit 0, no stderr, help starting %q and ending with the environment rule",
				tt.args, r.code, r.stderr, r.stdout, header)
		}
		if tt.path == "orderly" {
			for _, sub := range []string{"demo", "broker", "bench", "dlq", "group", "consume"} {
				if !strings.Contains(r.stdout, "\n  "+sub+" ") {
					t.Errorf("orderly %q lists no %q command:\n%s", tt.args, sub, r.stdout)
				}
			}
		}
	}
}

// endsWithFooter reports whether help ends with the environment rule and
// then status.
func endsWithFooter(help, status string) bool {
	return strings.HasSuffix(help, "\n"+helpEnvironment+"\n"+status)
}

// TestHelpExitStatus: every command's help states its exit status, naming
// --timeout only when the command has such a flag; the broker and consume,
// which run until a signal, exit 0 on one; consume's names exitFenced.
func TestHelpExitStatus(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		var out strings.Builder
		c.SetOut(&out)
		if err := c.Help(); err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		help := out.String()
		i := strings.LastIndex(help, "Exit status:")
		if i < 0 {
			t.Fatalf("%s: no exit status in its help:\n%s", c.CommandPath(), help)
		}
		status := help[i:]
		// consume's --timeout is a call's deadline, not the run's.
		untilSignal := c.Name() == "broker" || c.Name() == "consume"
		endsRun := c.LocalFlags().Lookup("timeout") != nil && !untilSignal
		if strings.Contains(status, "--timeout") != endsRun {
			t.Errorf("%s (a --timeout that ends the run: %v): exit status %q", c.CommandPath(), endsRun, status)
		}
		if untilSignal != strings.HasPrefix(status, "Exit status: 0 stopped by SIGINT or SIGTERM") {
			t.Errorf("%s: exit status %q; a signal is its normal end: %v", c.CommandPath(), status, untilSignal)
		}
		// Only consume can be fenced (--instance-id): its help names the
		// status report gives then, no other's does.
		fenced := c.Name() == "consume"
		if want := fmt.Sprintf("; %d fenced: ", exitFenced); strings.Contains(status, want) != fenced {
			t.Errorf("%s: exit status %q; names %q: want %v", c.CommandPath(), status, want, fenced)
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(newRoot(env{lookup: func(string) (string, bool) { return "", false }}))
}

// TestUsageErrors runs the binary with every kind of command-line mistake,
// for the root and every subcommand: stderr must be exactly one line
// naming the flag (or variable) and the value, then the hint; nothing on
// stdout, exit 2.
func TestUsageErrors(t *testing.T) {
	consumeArgs := func(extra ...string) []string {
		return append([]string{"consume", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "t"}, extra...)
	}
	tests := []struct {
		name string
		vars []string // ORDERLY_* variables
		args []string
		want string // the error line after "orderly: "
		hint string // the command whose help the hint names
	}{
		{"root unknown flag", nil, []string{"--nosuchflag"}, "unknown flag --nosuchflag", "orderly"},
		{"root bad value", nil, []string{"--partitions", "abc"}, `invalid value "abc" for --partitions: not an integer`, "orderly"},
		{"root no value", nil, []string{"--brokers"}, "flag --brokers needs a value", "orderly"},
		{"root empty value", nil, []string{"--topic", ""}, `invalid value "" for --topic: must not be empty`, "orderly"},
		{"root unknown command", nil, []string{"dmo"}, `unknown command "dmo" (did you mean "demo"?)`, "orderly"},
		{"root bad env", []string{"ORDERLY_MESSAGES=lots"}, nil, `invalid value "lots" for ORDERLY_MESSAGES (--messages): not an integer`, "orderly"},
		{"help unknown command", nil, []string{"help", "nosuch"}, `unknown command "nosuch"`, "orderly"},

		{"demo unknown flag", nil, []string{"demo", "--nosuchflag"}, "unknown flag --nosuchflag", "orderly demo"},
		{"demo single dash", nil, []string{"demo", "-messages", "5"}, "unknown flag -messages (long flags take two dashes: --messages)", "orderly demo"},
		{"demo bad value", nil, []string{"demo", "--num", "0"}, `invalid value "0" for --num: must be between 1 and 65536`, "orderly demo"},
		{"demo bad list", nil, []string{"demo", "--brokers", "a:1,,b:2"}, `invalid value "a:1,,b:2" for --brokers: empty entry`, "orderly demo"},
		{"demo no value", nil, []string{"demo", "--timeout"}, "flag --timeout needs a value", "orderly demo"},
		{"demo empty value", nil, []string{"demo", "--topic="}, `invalid value "" for --topic: must not be empty`, "orderly demo"},
		{"demo batches too large", nil, []string{"demo", "--num", "65536", "--size", "1024"},
			"--num 65536 with --size 1024: --num times --size must be at most 16777216 (each worker holds a batch of --size)", "orderly demo"},
		{"demo argument", nil, []string{"demo", "extra"}, `unexpected argument "extra" (orderly demo takes only flags)`, "orderly demo"},
		{"demo bad env", []string{"ORDERLY_FAIL=2"}, []string{"demo"}, `invalid value "2" for ORDERLY_FAIL (--fail): must be at least 0 and below 1`, "orderly demo"},
		// --pprof is served on the admin server: without --admin it did
		// nothing, silently (no broker listens on 127.0.0.1:1).
		{"demo pprof without admin", nil, []string{"demo", "--brokers", "127.0.0.1:1", "--pprof"},
			"--pprof needs --admin host:port (pprof is served on the admin server)", "orderly demo"},
		{"root pprof from env without admin", []string{"ORDERLY_PPROF=true"}, []string{"--brokers", "127.0.0.1:1"},
			"--pprof (from ORDERLY_PPROF) needs --admin host:port (pprof is served on the admin server)", "orderly"},

		{"broker unknown flag", nil, []string{"broker", "--nosuchflag"}, "unknown flag --nosuchflag", "orderly broker"},
		{"broker bad value", nil, []string{"broker", "--partitions", "abc"}, `invalid value "abc" for --partitions: not an integer`, "orderly broker"},
		{"broker no value", nil, []string{"broker", "--addr"}, "flag --addr needs a value", "orderly broker"},
		{"broker empty value", nil, []string{"broker", "--addr", ""}, `invalid value "" for --addr: must be host:port (e.g. 127.0.0.1:9092)`, "orderly broker"},
		{"broker needs data", nil, []string{"broker", "--sync"}, "--sync needs --data (there is nothing to fsync in memory)", "orderly broker"},
		{"broker needs data, from env", []string{"ORDERLY_SYNC=true"}, []string{"broker"}, "--sync (from ORDERLY_SYNC) needs --data (there is nothing to fsync in memory)", "orderly broker"},
		{"broker argument", nil, []string{"broker", "stray"}, `unexpected argument "stray" (orderly broker takes only flags)`, "orderly broker"},
		{"broker bad env", []string{"ORDERLY_ADDR=nohost"}, []string{"broker"}, `invalid value "nohost" for ORDERLY_ADDR (--addr): must be host:port (e.g. 127.0.0.1:9092)`, "orderly broker"},

		// A value that came from a variable: the error names the variable,
		// as nothing on the command line says the flag.
		{"dlq two sources, one from env", []string{"ORDERLY_TOPIC=orders"}, []string{"dlq", "list", "--data", "d13"},
			"give one source: --data d13 or --topic orders (from ORDERLY_TOPIC), not both", "orderly dlq list"},
		{"dlq two sources, both from env", []string{"ORDERLY_TOPIC=orders", "ORDERLY_DATA=d13"}, []string{"dlq", "show"},
			"give one source: --data d13 (from ORDERLY_DATA) or --topic orders (from ORDERLY_TOPIC), not both", "orderly dlq show"},
		{"dlq topic from env without brokers", []string{"ORDERLY_TOPIC=orders"}, []string{"dlq", "list"},
			"--topic orders (from ORDERLY_TOPIC) needs --brokers (the cluster it is on)", "orderly dlq list"},
		{"dlq offsets from env", []string{"ORDERLY_FROM_OFFSET=9"}, []string{"dlq", "list", "--data", "d", "--to-offset", "3"},
			"--from-offset 9 (from ORDERLY_FROM_OFFSET) is after --to-offset 3", "orderly dlq list"},
		{"dlq purge before from env", []string{"ORDERLY_BEFORE=5"}, []string{"dlq", "purge", "--data", "d", "--yes"},
			"--before (from ORDERLY_BEFORE) is for a Kafka topic (DeleteRecords); select the records of a local store with the filters", "orderly dlq purge"},
		{"consume http and exec, one from env", []string{"ORDERLY_EXEC=cat"}, consumeArgs("--http", "http://127.0.0.1:1/"),
			"give one of --http and --exec (from ORDERLY_EXEC), not both", "orderly consume"},
		{"consume dead-letter topic from env", []string{"ORDERLY_DEAD_LETTER_TOPIC=t"}, consumeArgs("--exec", "cat"),
			"--dead-letter-topic t (from ORDERLY_DEAD_LETTER_TOPIC) is one of --topic t: consume would read its own dead letters", "orderly consume"},
		{"consume session timeout from env", []string{"ORDERLY_SESSION_TIMEOUT=1h"}, consumeArgs("--exec", "cat"),
			`invalid value "1h0m0s" for ORDERLY_SESSION_TIMEOUT (--session-timeout): above 30m0s, Kafka's default group.max.session.timeout.ms`, "orderly consume"},
		{"consume password from env without SASL", []string{"ORDERLY_SASL_PASSWORD=s3cret"}, consumeArgs("--exec", "cat"),
			"--sasl-user and --sasl-password (from ORDERLY_SASL_PASSWORD) need --sasl-mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", "orderly consume"},
		{"consume mechanism from env without password", []string{"ORDERLY_SASL_MECHANISM=PLAIN"}, consumeArgs("--exec", "cat", "--sasl-user", "alice"),
			"--sasl-mechanism PLAIN (from ORDERLY_SASL_MECHANISM) needs --sasl-password (better set as ORDERLY_SASL_PASSWORD)", "orderly consume"},
		{"consume pprof without admin", nil, consumeArgs("--exec", "cat", "--pprof"),
			"--pprof needs --admin host:port (pprof is served on the admin server)", "orderly consume"},
		{"consume pprof from env without admin", []string{"ORDERLY_PPROF=1"}, consumeArgs("--exec", "cat"),
			"--pprof (from ORDERLY_PPROF) needs --admin host:port (pprof is served on the admin server)", "orderly consume"},
		{"consume flag given wins over env", []string{"ORDERLY_MAX_ATTEMPTS=5"}, consumeArgs("--exec", "cat", "--max-attempts", "3"),
			"--max-attempts 3 needs a dead-letter destination: --dead-letter-topic or --data", "orderly consume"},

		{"bench unknown flag", nil, []string{"bench", "--nosuchflag"}, "unknown flag --nosuchflag", "orderly bench"},
		{"bench bad value", nil, []string{"bench", "--num", "8,x"}, `invalid value "8,x" for --num: "x" is not an integer`, "orderly bench"},
		{"bench no value", nil, []string{"bench", "--scenario"}, "flag --scenario needs a value", "orderly bench"},
		{"bench empty value", nil, []string{"bench", "--scenario", ""}, `invalid value "" for --scenario: must name at least one`, "orderly bench"},
		{"bench argument", nil, []string{"bench", "noop"}, `unexpected argument "noop" (orderly bench takes only flags)`, "orderly bench"},
		{"bench bad env", []string{"ORDERLY_ROUNDS=-1"}, []string{"bench"}, `invalid value "-1" for ORDERLY_ROUNDS (--rounds): must not be negative`, "orderly bench"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, tt.args...)
			want := "orderly: " + tt.want + "\nsee '" + tt.hint + " --help'\n"
			if r.code != exitUsage || r.stderr != want || r.stdout != "" {
				t.Errorf("%s orderly %q: got exit %d, stdout %q, stderr:\n%s\nwant exit 2, no stdout, stderr:\n%s",
					strings.Join(tt.vars, " "), tt.args, r.code, r.stdout, r.stderr, want)
			}
			if strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "panic") {
				t.Errorf("stderr has a stack trace:\n%s", r.stderr)
			}
		})
	}
}

// topicRule is the usage error's reason for a topic name Kafka refuses.
const topicRule = `use at most 249 letters, digits, '.', '_' and '-' (not "." or "..")`

// TestTopicNames: every flag that names a topic to create, consume or
// produce to refuses a name Kafka would refuse (a character other than
// [a-zA-Z0-9._-], over 249 of them, "." or ".."), from the command line
// or from its variable: a usage error naming the flag (and the variable)
// and the rule, before anything connects (no broker listens on
// 127.0.0.1:1). Consume's --topic and --dead-letter-topic, the demo's
// --topic and the dlq commands' --topic and --to took any name.
func TestTopicNames(t *testing.T) {
	long := strings.Repeat("t", 250)
	consume := func(extra ...string) []string {
		return append([]string{"consume", "--brokers", "127.0.0.1:1", "--group", "g", "--exec", "cat"}, extra...)
	}
	dlq := func(cmd string, extra ...string) []string {
		return append([]string{"dlq", cmd, "--brokers", "127.0.0.1:1"}, extra...)
	}
	tests := []struct {
		name string
		vars []string
		args []string
		want string // the error line after `orderly: invalid value `
		hint string // the command whose help the hint names
	}{
		{"consume --topic, a space", nil, consume("--topic", "a b"), `"a b" for --topic: ` + topicRule, "orderly consume"},
		{"consume --topic, dot", nil, consume("--topic", "."), `"." for --topic: ` + topicRule, "orderly consume"},
		{"consume --topic, dotdot in a list", nil, consume("--topic", "orders,.."), `"orders,.." for --topic: "..": ` + topicRule, "orderly consume"},
		{"consume --topic, too long", nil, consume("--topic", long), `"` + long + `" for --topic: ` + topicRule, "orderly consume"},
		{"consume --topic from env", []string{"ORDERLY_TOPIC=orders:eu"}, consume(), `"orders:eu" for ORDERLY_TOPIC (--topic): ` + topicRule, "orderly consume"},
		{"consume --dead-letter-topic", nil, consume("--topic", "orders", "--dead-letter-topic", "orders dlq"),
			`"orders dlq" for --dead-letter-topic: ` + topicRule, "orderly consume"},
		{"consume --dead-letter-topic from env", []string{"ORDERLY_DEAD_LETTER_TOPIC=.."}, consume("--topic", "orders"),
			`".." for ORDERLY_DEAD_LETTER_TOPIC (--dead-letter-topic): ` + topicRule, "orderly consume"},
		{"demo --topic", nil, []string{"demo", "--brokers", "127.0.0.1:1", "--topic", "démo"}, `"démo" for --topic: ` + topicRule, "orderly demo"},
		{"demo --topic from env", []string{"ORDERLY_TOPIC=" + long}, []string{"demo", "--brokers", "127.0.0.1:1"},
			`"` + long + `" for ORDERLY_TOPIC (--topic): ` + topicRule, "orderly demo"},
		{"root --topic", nil, []string{"--brokers", "127.0.0.1:1", "--topic", "a*"}, `"a*" for --topic: ` + topicRule, "orderly"},
		{"dlq list --topic", nil, dlq("list", "--topic", "orders dlq"), `"orders dlq" for --topic: ` + topicRule, "orderly dlq list"},
		{"dlq show --topic from env", []string{"ORDERLY_TOPIC=."}, dlq("show"), `"." for ORDERLY_TOPIC (--topic): ` + topicRule, "orderly dlq show"},
		{"dlq purge --topic", nil, dlq("purge", "--yes", "--topic", "a/b"), `"a/b" for --topic: ` + topicRule, "orderly dlq purge"},
		{"dlq replay --to", nil, dlq("replay", "--topic", "orders-dlq", "--to", "orders retry"), `"orders retry" for --to: ` + topicRule, "orderly dlq replay"},
		{"dlq replay --to from env", []string{"ORDERLY_TO=.."}, dlq("replay", "--topic", "orders-dlq"), `".." for ORDERLY_TO (--to): ` + topicRule, "orderly dlq replay"},
		{"broker --topics", nil, []string{"broker", "--topics", "a,b c"}, `"a,b c" for --topics: "b c": ` + topicRule, "orderly broker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, tt.args...)
			want := "orderly: invalid value " + tt.want + "\nsee '" + tt.hint + " --help'\n"
			if r.code != exitUsage || r.stdout != "" || r.stderr != want {
				t.Errorf("%s orderly %q: got exit %d, stdout %q, stderr:\n%s\nwant exit 2, no stdout, stderr:\n%s",
					strings.Join(tt.vars, " "), tt.args, r.code, r.stdout, r.stderr, want)
			}
		})
	}
	// The longest legal name, and each legal kind of character, pass.
	for _, name := range []string{strings.Repeat("t", 249), "Orders_v2.eu-1", "..."} {
		if err := kafkaName(name); err != nil {
			t.Errorf("kafkaName(%q): got %v, want nil", name, err)
		}
	}
}

// TestRuntimeErrorLine: an error that is not about the command line is one
// line, exit 1, and names the flag's value once.
func TestRuntimeErrorLine(t *testing.T) {
	r := runBin(t, nil, "broker", "--addr", "nosuchhost.invalid:1")
	if r.code != exitError || strings.Count(r.stderr, "\n") != 1 || strings.Count(r.stderr, "nosuchhost.invalid:1") != 1 ||
		!strings.HasPrefix(r.stderr, "orderly: ") {
		t.Errorf("broker on an unknown host: got exit %d, stderr %q; want exit 1 and one line naming the address once", r.code, r.stderr)
	}
}

// TestFlagChecks checks, in-process, that each flag's value check rejects
// what it should with a usage error naming the flag and the value.
func TestFlagChecks(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--messages", "0"}, `"0" for --messages: must be between 1 and 2147483648`},
		{[]string{"demo", "--keys", "-3"}, `"-3" for --keys: must be between 1 and 16777216`},
		{[]string{"demo", "--partitions", "0"}, `"0" for --partitions: must be between 1 and 65536`},
		{[]string{"demo", "--zipf", "-1"}, `"-1" for --zipf: must not be negative`},
		{[]string{"demo", "--poison", "-1"}, `"-1" for --poison: must not be negative`},
		{[]string{"demo", "--rate", "fast"}, `"fast" for --rate: not a number`},
		{[]string{"demo", "--fail", "1"}, `"1" for --fail: must be at least 0 and below 1`},
		{[]string{"demo", "--size", "-1"}, `"-1" for --size: must be between 1 and 1048576`},
		{[]string{"demo", "--size", "1048577"}, `"1048577" for --size: must be between 1 and 1048576`},
		{[]string{"demo", "--num", "65537"}, `"65537" for --num: must be between 1 and 65536`},
		{[]string{"demo", "--max-in-flight", "1073741825"}, `"1073741825" for --max-in-flight: must be between 0 and 1073741824`},
		{[]string{"demo", "--io", "-1ms"}, `"-1ms" for --io: must not be negative`},
		{[]string{"demo", "--io-item", "1"}, `"1" for --io-item: not a duration`},
		{[]string{"demo", "--timeout", "0s"}, `"0s" for --timeout: must be positive`},
		{[]string{"demo", "--seed", "-1"}, `"-1" for --seed: not an unsigned integer`},
		{[]string{"demo", "--progress", "sometimes"}, `"sometimes" for --progress: must be one of auto, on, off`},
		{[]string{"demo", "--log-level", "loud"}, `"loud" for --log-level: must be debug, info, warn or error`},
		{[]string{"demo", "--brokers", "a:1,b"}, `"a:1,b" for --brokers: "b": must be host:port`},
		{[]string{"demo", "--brokers", "a:0"}, `"a:0" for --brokers: port must be a number in 1-65535`},
		{[]string{"demo", "--messages", "99999999999999999999"}, `for --messages: out of range`},
		{[]string{"broker", "--addr", "x"}, `"x" for --addr: must be host:port`},
		{[]string{"broker", "--addr", "127.0.0.1:99999"}, `"127.0.0.1:99999" for --addr: port must be a number in 0-65535`},
		{[]string{"broker", "--addr", ":9092"}, `":9092" for --addr: must name a host (e.g. 127.0.0.1:9092)`},
		{[]string{"broker", "--partitions", "0"}, `"0" for --partitions: must be between 1 and 65536`},
		{[]string{"broker", "--topics", "a,,b"}, `"a,,b" for --topics: empty entry`},
		{[]string{"broker", "--topics", "a,a"}, `"a,a" for --topics: "a" is listed twice`},
		{[]string{"broker", "--topics", "bad topic"}, `"bad topic" for --topics: use at most 249 letters, digits, '.', '_' and '-' (not "." or "..")`},
		{[]string{"broker", "--topics", "ok," + strings.Repeat("t", 250)}, `for --topics: "` + strings.Repeat("t", 250) + `": use at most 249`},
		{[]string{"bench", "--scenario", "noop,noop"}, `"noop,noop" for --scenario: "noop" is listed twice`},
		{[]string{"bench", "--num", "8,+8"}, `"8,+8" for --num: 8 is listed twice`},
		{[]string{"broker", "--sync=maybe"}, `"maybe" for --sync`},
		{[]string{"bench", "--num", "0"}, `"0" for --num: must be positive`},
		{[]string{"bench", "--num", "8,0"}, `"8,0" for --num: 0: must be positive`},
		{[]string{"bench", "--scenario", "nope"}, `"nope" for --scenario: no such scenario (known: all, noop,`},
		{[]string{"bench", "--scenario", "noop,"}, `"noop," for --scenario: empty entry`},
		{[]string{"bench", "--contenders", "raw,kafka-streams"}, `"raw,kafka-streams" for --contenders: "kafka-streams": no such contender`},
		{[]string{"bench", "--partitions", "-1"}, `"-1" for --partitions: must be between 0 and 65536`},
		{[]string{"bench", "--chan", "-2"}, `"-2" for --chan: must not be negative`},
		{[]string{"bench", "--timeout", "-1s"}, `"-1s" for --timeout: must not be negative`},
		{[]string{"bench", "--duration", "-5s"}, `"-5s" for --duration: must not be negative`},
		{[]string{"bench", "--max-in-flight", "-1"}, `"-1" for --max-in-flight: must not be negative`},
		{[]string{"bench", "--max-inflight", "-1"}, `"-1" for --max-in-flight: must not be negative`}, // the older spelling
	}
	for _, tt := range tests {
		_, err := runCmd(context.Background(), tt.args...)
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), "invalid value ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("orderly %q: got %v, want a usage error with %q", tt.args, err, tt.want)
		}
	}
}

// TestEnvBroker: a variable sets its flag, and a flag on the command line
// wins over it, as the broker's start lines show.
func TestEnvBroker(t *testing.T) {
	vars := []string{"ORDERLY_PARTITIONS=3", "ORDERLY_TOPICS=a,b", "ORDERLY_ADDR=127.0.0.1:0"}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"topic: a (3 partitions)", "topic: b (3 partitions)"}},
		{[]string{"--partitions", "5", "--topics", "c"}, []string{"topic: c (5 partitions)"}},
	} {
		b := startBrokerProc(t, vars, tt.args...)
		b.stop(t)
		got := b.out.text()
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s orderly broker %q: output lacks %q:\n%s", strings.Join(vars, " "), tt.args, w, got)
			}
		}
		if len(tt.args) > 0 && strings.Contains(got, "topic: a ") {
			t.Errorf("--topics c did not override ORDERLY_TOPICS:\n%s", got)
		}
	}
}

// TestFlagArg: flagArg and flagSource name a flag's variable when bindEnv
// set the flag from it, and only then.
func TestFlagArg(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var topic, data, group string
	stringVar(fs, &topic, "topic", "", nil, "")
	stringVar(fs, &data, "data", "", nil, "")
	stringVar(fs, &group, "group", "dflt", nil, "")
	if err := fs.Parse([]string{"--data", "d13"}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"ORDERLY_TOPIC": "orders", "ORDERLY_DATA": "ignored"}
	if err := bindEnv(fs, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		fs          *pflag.FlagSet
		name        string
		value       []any
		arg, source string
	}{
		{fs, "topic", []any{topic}, "--topic orders (from ORDERLY_TOPIC)", "ORDERLY_TOPIC (--topic)"},
		{fs, "topic", nil, "--topic (from ORDERLY_TOPIC)", "ORDERLY_TOPIC (--topic)"},
		{fs, "data", []any{data}, "--data d13", "--data"},      // the command line wins
		{fs, "group", []any{group}, "--group dflt", "--group"}, // the default
		{fs, "nosuch", []any{3}, "--nosuch 3", "--nosuch"},     // not a flag of fs
		{nil, "topic", []any{"t"}, "--topic t", "--topic"},     // options built without flags
	}
	for _, tt := range tests {
		if got := flagArg(tt.fs, tt.name, tt.value...); got != tt.arg {
			t.Errorf("flagArg(%s, %v): got %q, want %q", tt.name, tt.value, got, tt.arg)
		}
		if got := flagSource(tt.fs, tt.name); got != tt.source {
			t.Errorf("flagSource(%s): got %q, want %q", tt.name, got, tt.source)
		}
	}
}

// TestEnvDemo: ORDERLY_MESSAGES sets the demo's traffic; --keys wins over
// ORDERLY_KEYS; the report shows both.
func TestEnvDemo(t *testing.T) {
	vars := []string{"ORDERLY_MESSAGES=123", "ORDERLY_KEYS=7", "ORDERLY_IO=0", "ORDERLY_IO_ITEM=0",
		"ORDERLY_RATE=0", "ORDERLY_PROGRESS=off", "ORDERLY_PARTITIONS=2"}
	r := runBin(t, vars, "demo", "--keys", "9")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	wantLines(t, r.stdout, okReport)
	wantLines(t, r.stdout, map[string]string{"planned": "123", "produced": "123", "handled": "123", "accounts": "9", "partitions": "2"})
}

// TestFlagNamesAgree: one concept has one flag name across subcommands.
// Names that differ only in their hyphens (max-inflight, max-in-flight)
// are one concept spelt two ways.
func TestFlagNamesAgree(t *testing.T) {
	root := newRoot(env{stdout: io.Discard, stderr: io.Discard, lookup: func(string) (string, bool) { return "", false }})
	spelt := map[string]string{} // name without hyphens -> first spelling seen, and where
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			key := strings.ReplaceAll(f.Name, "-", "")
			where := c.CommandPath() + " --" + f.Name
			if first, ok := spelt[key]; ok && !strings.HasSuffix(first, " --"+f.Name) {
				t.Errorf("%s and %s: one flag spelt two ways", first, where)
				return
			}
			if _, ok := spelt[key]; !ok {
				spelt[key] = where
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if len(spelt) < 20 {
		t.Fatalf("got %d flag names across the commands, want the whole tree walked", len(spelt))
	}
}

// TestRunErrorsNameVariables: errors that end a run and quote a flag's
// value name the variable the value came from, as usage errors do: the
// CA files of --tls-ca and --http-ca, group describe's --brokers and
// --topic, whose errors quoted the bare flag (two reviews of the variable
// naming), and --admin, the demo's --brokers and bench's --out, which did
// too (a third).
func TestRunErrorsNameVariables(t *testing.T) {
	dir := t.TempDir()
	missing, notPEM := filepath.Join(dir, "missing.pem"), filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0") // an address in use, for --admin
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	inUse := busy.Addr().String()
	b, err := broker.Start(broker.Config{Topics: []string{"orders"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addrs()[0]
	if err := b.ResetCommitted(context.Background(), "old", "orders", map[int32]int64{0: 0}); err != nil {
		t.Fatal(err) // a group that exists (Empty)
	}
	describe := []string{"group", "describe", "--brokers", "127.0.0.1:1", "--group", "g"}
	consume := []string{"consume", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "t", "--http", "https://127.0.0.1:1/hook"}
	demo := []string{"demo", "--messages", "10", "--progress", "off", "--io", "0", "--io-item", "0"}
	const refused = "kafka: client has run out of available brokers to talk to: dial tcp 127.0.0.1:1: connect: connection refused\n"
	for _, tt := range []struct {
		name string
		vars []string
		args []string
		want string // all of stderr
	}{
		{"--tls-ca from its variable", []string{"ORDERLY_TLS_CA=" + missing}, describe,
			"orderly: --tls-ca " + missing + " (from ORDERLY_TLS_CA): no such file or directory\n"},
		{"--tls-ca on the command line", nil, append(slices.Clone(describe), "--tls-ca", notPEM),
			"orderly: --tls-ca " + notPEM + ": no PEM certificate in it\n"},
		{"describe's --brokers from its variable", []string{"ORDERLY_BROKERS=" + addr}, []string{"group", "describe", "--group", "nosuch"},
			`orderly: consumer group "nosuch" on --brokers ` + addr + " (from ORDERLY_BROKERS): no such consumer group (no members, no committed offsets)\n"},
		{"describe's --topic from its variable", []string{"ORDERLY_TOPIC=nosuch"}, []string{"group", "describe", "--brokers", addr, "--group", "old"},
			"orderly: --topic nosuch (from ORDERLY_TOPIC): no such topic\n"},
		{"--http-ca from its variable", []string{"ORDERLY_HTTP_CA=" + notPEM}, consume,
			"orderly: --http-ca " + notPEM + " (from ORDERLY_HTTP_CA): no PEM certificate in it\n"},
		{"describe's unreachable --brokers from its variable", []string{"ORDERLY_BROKERS=127.0.0.1:1"}, []string{"group", "describe", "--group", "g"},
			"orderly: connect to --brokers 127.0.0.1:1 (from ORDERLY_BROKERS): " + refused},
		{"demo's unreachable --brokers from its variable", []string{"ORDERLY_BROKERS=127.0.0.1:1"}, demo,
			"orderly: connect to --brokers 127.0.0.1:1 (from ORDERLY_BROKERS): " + refused},
		{"demo's unreachable --brokers on the command line", nil, append(slices.Clone(demo), "--brokers", "127.0.0.1:1"),
			"orderly: connect to --brokers 127.0.0.1:1: " + refused},
		{"demo's --admin in use, from its variable", []string{"ORDERLY_ADMIN=" + inUse}, demo,
			"orderly: admin server: listen on --admin " + inUse + " (from ORDERLY_ADMIN): bind: address already in use\n"},
		{"consume's --admin in use, from its variable", []string{"ORDERLY_ADMIN=" + inUse},
			[]string{"consume", "--brokers", addr, "--group", "g", "--topic", "orders", "--exec", "cat", "--log-level", ""},
			"orderly: admin server: listen on --admin " + inUse + " (from ORDERLY_ADMIN): bind: address already in use\n"},
		{"consume's --admin in use, on the command line", nil,
			[]string{"consume", "--brokers", addr, "--group", "g", "--topic", "orders", "--exec", "cat", "--log-level", "", "--admin", inUse},
			"orderly: admin server: listen on --admin " + inUse + ": bind: address already in use\n"},
		{"bench's --out from its variable", []string{"ORDERLY_OUT=" + filepath.Join(notPEM, "sub")}, []string{"bench", "--scenario", "noop"},
			"orderly: --out " + filepath.Join(notPEM, "sub") + " (from ORDERLY_OUT): mkdir " + notPEM + ": not a directory\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, tt.args...)
			if r.code != exitError || r.stderr != tt.want {
				t.Errorf("%s orderly %q: got exit %d, stderr:\n%s\nwant exit 1, stderr:\n%s", strings.Join(tt.vars, " "), tt.args, r.code, r.stderr, tt.want)
			}
		})
	}
}
