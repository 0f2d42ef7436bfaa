package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/localqueue"
)

// TestConsumeBadInput runs the binary with each kind of bad input: stderr
// is one line naming the flag (then the hint for a usage error), the exit
// is 2 for a usage error and 1 for what only running can find (an
// unreachable endpoint or broker, a topic that does not exist), and no
// stack trace.
func TestConsumeBadInput(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "present", 1)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	kafka := []string{"--brokers", b.Addrs()[0], "--group", "g"}
	args := func(extra ...string) []string { return append(append([]string{"consume"}, kafka...), extra...) }
	tests := []struct {
		name string
		vars []string
		args []string
		code int
		want string // the error line after "orderly: "
	}{
		{"no scheme", nil, args("--topic", "present", "--http", "localhost:8080/hook"), exitUsage,
			`invalid value "localhost:8080/hook" for --http: no scheme: give http://HOST/PATH or https://HOST/PATH`},
		{"other scheme", nil, args("--topic", "present", "--http", "ftp://example.com/x"), exitUsage,
			`invalid value "ftp://example.com/x" for --http: scheme "ftp": must be http or https`},
		{"both", nil, args("--topic", "present", "--http", ep.url(), "--exec", "cat"), exitUsage,
			"give one of --http and --exec, not both"},
		{"neither", nil, args("--topic", "present"), exitUsage,
			"nothing to forward to: give --http URL or --exec CMD"},
		{"no topic", nil, args("--http", ep.url()), exitUsage,
			"missing --topic: give the topics to consume"},
		{"no brokers", nil, []string{"consume", "--topic", "present", "--group", "g", "--http", ep.url()}, exitUsage,
			"missing --brokers: give the Kafka cluster's host:port"},
		{"max attempts without destination", nil, args("--topic", "present", "--http", ep.url(), "--max-attempts", "3"), exitUsage,
			"--max-attempts 3 needs a dead-letter destination: --dead-letter-topic or --data"},
		// What group.New refused: exit 1, naming its Config fields, not the flags.
		{"dead-letter topic consumed", nil, args("--topic", "other,present", "--http", ep.url(), "--dead-letter-topic", "present"), exitUsage,
			"--dead-letter-topic present is one of --topic other,present: consume would read its own dead letters"},
		{"batches too large", nil, args("--topic", "present", "--http", ep.url(), "--num", "65536", "--size", "1024"), exitUsage,
			"--num 65536 with --size 1024: --num times --size must be at most 16777216"},
		{"largest size at the default num", nil, args("--topic", "present", "--http", ep.url(), "--size", "1048576"), exitUsage,
			"--num 32 with --size 1048576: --num times --size must be at most 16777216"},
		{"SASL without a password", nil, args("--topic", "present", "--http", ep.url(), "--sasl-mechanism", "PLAIN", "--sasl-user", "alice"), exitUsage,
			"--sasl-mechanism PLAIN needs --sasl-password (better set as ORDERLY_SASL_PASSWORD)"},
		{"bad header", nil, args("--topic", "present", "--http", ep.url(), "--header", "nocolon"), exitUsage,
			`invalid --header: must be "Name: value"`},
		// Headers Go's client would refuse at every request, so that every
		// record failed its attempts and was dead-lettered: refused here,
		// the value never echoed (it may be a credential).
		{"header name not a token", nil, args("--topic", "present", "--http", ep.url(), "--header", "Bad@Name: v"), exitUsage,
			"invalid --header: header name \"Bad@Name\" holds '@': a name is letters, digits and !#$%&'*+-.^_`|~"},
		{"header value with a control character", nil, args("--topic", "present", "--http", ep.url(), "--header", "X-Token: ab\x01cd"), exitUsage,
			"invalid --header: the value of header X-Token holds a control character (byte 2)"},
		{"password in a bad URL", nil, args("--topic", "present", "--http", "ftp://svc:s3cret@example.com/x"), exitUsage,
			`invalid value "ftp://svc:xxxxx@example.com/x" for --http: scheme "ftp": must be http or https`},
		{"password in a URL that does not parse", nil, args("--topic", "present", "--http", "https://svc:50%off@example.com/hook"), exitUsage,
			`invalid value "https://xxxxx@example.com/hook" for --http: not a URL`},
		{"password with a slash", nil, args("--topic", "present", "--http", "https://svc:pa/ss@example.com/hook"), exitUsage,
			`invalid value "https://xxxxx@example.com/hook" for --http: `},
		{"password without a scheme", nil, args("--topic", "present", "--http", "svc:s3cret@example.com/hook"), exitUsage,
			`invalid value "xxxxx@example.com/hook" for --http: `},
		{"bad env", []string{"ORDERLY_SIZE=big"}, args("--topic", "present", "--http", ep.url()), exitUsage,
			`invalid value "big" for ORDERLY_SIZE (--size): not an integer`},
		{"unknown strategy", nil, args("--topic", "present", "--http", ep.url(), "--assignment-strategy", "cooperative-sticky,fair"), exitUsage,
			`invalid value "cooperative-sticky,fair" for --assignment-strategy: "fair": must be one of cooperative-sticky, sticky, range, roundrobin`},
		{"strategy twice", nil, args("--topic", "present", "--http", ep.url(), "--assignment-strategy", "range,cooperative-sticky,range"), exitUsage,
			`invalid value "range,cooperative-sticky,range" for --assignment-strategy: "range" is listed twice`},
		{"bad offset reset", nil, args("--topic", "present", "--http", ep.url(), "--offset-reset", "smallest"), exitUsage,
			`invalid value "smallest" for --offset-reset: must be one of earliest, latest`},
		{"short session timeout", nil, args("--topic", "present", "--http", ep.url(), "--session-timeout", "2s"), exitUsage,
			`invalid value "2s" for --session-timeout: must be at least 6s`},
		{"long session timeout", nil, args("--topic", "present", "--http", ep.url(), "--session-timeout", "1h"), exitUsage,
			`invalid value "1h0m0s" for --session-timeout: above 30m0s, Kafka's default group.max.session.timeout.ms`},
		{"bad instance id", nil, args("--topic", "present", "--http", ep.url(), "--instance-id", "pod 0"), exitUsage,
			`invalid value "pod 0" for --instance-id: use at most 249 letters, digits, '.', '_' and '-' (not "." or "..")`},
		{"bad SASL mechanism", nil, args("--topic", "present", "--http", ep.url(), "--sasl-mechanism", "GSSAPI"), exitUsage,
			`invalid value "GSSAPI" for --sasl-mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, or empty`},
		{"bad ordering", nil, args("--topic", "present", "--http", ep.url(), "--ordering", "strict"), exitUsage,
			`invalid value "strict" for --ordering: must be one of key, partition, none`},
		{"unreachable endpoint", nil, args("--topic", "present", "--http", "http://127.0.0.1:1/hook"), exitError,
			"--http http://127.0.0.1:1/hook: endpoint unreachable (--no-check skips this check): dial tcp 127.0.0.1:1: connect: connection refused"},
		{"missing topic", nil, args("--topic", "absent", "--http", ep.url()), exitError,
			"--topic absent: the topic does not exist (consume does not create it)"},
		{"missing dead-letter topic", nil, args("--topic", "present", "--http", ep.url(), "--dead-letter-topic", "absent-dlq"), exitError,
			"--dead-letter-topic absent-dlq: the topic does not exist (consume does not create it)"},
		// Run's errors name the variable a value came from, as usage
		// errors do.
		{"missing topic from env", []string{"ORDERLY_TOPIC=absent"}, args("--http", ep.url()), exitError,
			"--topic absent (from ORDERLY_TOPIC): the topic does not exist (consume does not create it)"},
		{"missing dead-letter topic from env", []string{"ORDERLY_DEAD_LETTER_TOPIC=absent-dlq"}, args("--topic", "present", "--http", ep.url()), exitError,
			"--dead-letter-topic absent-dlq (from ORDERLY_DEAD_LETTER_TOPIC): the topic does not exist (consume does not create it)"},
		{"unreachable endpoint from env", []string{"ORDERLY_HTTP=http://127.0.0.1:1/hook"}, args("--topic", "present"), exitError,
			"--http http://127.0.0.1:1/hook (from ORDERLY_HTTP): endpoint unreachable (--no-check skips this check)"},
		{"unreachable broker from env", []string{"ORDERLY_BROKERS=127.0.0.1:1"}, []string{"consume", "--group", "g", "--topic", "present", "--http", ep.url()}, exitError,
			"--brokers 127.0.0.1:1 (from ORDERLY_BROKERS): group: cannot reach brokers"},
		{"unreachable broker", nil, []string{"consume", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "present", "--http", ep.url()}, exitError,
			"--brokers 127.0.0.1:1: group: cannot reach brokers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, tt.args...)
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			wantLines := 1
			if tt.code == exitUsage {
				wantLines = 2
			}
			if r.code != tt.code || len(lines) != wantLines || !strings.HasPrefix(lines[0], "orderly: "+tt.want) ||
				strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
				t.Errorf("got exit %d, stderr:\n%s\nwant exit %d and one line starting %q", r.code, r.stderr, tt.code, "orderly: "+tt.want)
			}
			// A run that failed at start prints no final line of zeros
			// before its error (it did, found by the --http prober).
			if strings.Contains(r.stdout, "orderly consume: stopped") {
				t.Errorf("a run that failed at start printed a final line:\n%s", r.stdout)
			}
			if tt.code == exitUsage && lines[len(lines)-1] != "see 'orderly consume --help'" {
				t.Errorf("got hint %q, want see 'orderly consume --help'", lines[len(lines)-1])
			}
		})
	}
}

// TestConsumeNoDeadLetterTopic: a --dead-letter-topic that does not
// exist ends consume with one sentence naming the flag and the topic
// once, wrapping group.ErrDeadLetterTopic and group.ErrUnknownTopic. It
// read "--dead-letter-topic absent-dlq: group: dead-letter topic does
// not exist: group: topic does not exist: group "g", dead-letter topic
// "absent-dlq": absent-dlq: kafka server: ...".
func TestConsumeNoDeadLetterTopic(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "present", 1)
	_, _, err := runCmd2(context.Background(), "consume", "--brokers", b.Addrs()[0], "--group", "g", "--topic", "present",
		"--exec", "cat", "--dead-letter-topic", "absent-dlq", "--progress", "off")
	want := "--dead-letter-topic absent-dlq: the topic does not exist (consume does not create it)"
	if err == nil || err.Error() != want || !errors.Is(err, group.ErrDeadLetterTopic) || !errors.Is(err, group.ErrUnknownTopic) {
		t.Errorf("consume --dead-letter-topic absent-dlq: got error %v, want %q wrapping group.ErrDeadLetterTopic and group.ErrUnknownTopic", err, want)
	}
}

// TestConsumeNoTopic: a --topic that does not exist ends consume with one
// sentence naming the flag and, among several topics, the missing ones,
// once each, wrapping group.ErrUnknownTopic. It read "--topic absent:
// group: topic does not exist: group "g", topics [absent]: absent: kafka
// server: ...".
func TestConsumeNoTopic(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "present", 1)
	for _, tt := range []struct{ topics, want string }{
		{"absent", "--topic absent: the topic does not exist (consume does not create it)"},
		{"present,absent", "--topic present,absent: absent does not exist (consume does not create it)"},
		{"absent,present,other", "--topic absent,present,other: absent, other do not exist (consume does not create them)"},
	} {
		t.Run(tt.topics, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCmd2(context.Background(), "consume", "--brokers", b.Addrs()[0], "--group", "g", "--topic", tt.topics,
				"--exec", "cat", "--progress", "off")
			if err == nil || err.Error() != tt.want || !errors.Is(err, group.ErrUnknownTopic) {
				t.Errorf("consume --topic %s: got error %v, want %q wrapping group.ErrUnknownTopic", tt.topics, err, tt.want)
			}
		})
	}
}

// TestConsumeDataInUse: a --data whose local dead-letter store or parked
// messages this process holds, as a consumer running on it would, ends
// consume with exit 1 and one sentence naming --data (and ORDERLY_DATA
// when the value came from there) and its path, which store is held and
// its lock file, and the holder, each once. The sentence was rebuilt from
// the lock's error alone, naming the path twice and not the store.
func TestConsumeDataInUse(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "present", 1)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	dead, parked := t.TempDir(), t.TempDir()
	store, err := deadletter.Open(storeDir(dead), deadletter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	q, err := localqueue.Open(localqueue.Options{Name: "orderly-parked", DataPath: parked})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	pid := os.Getpid()
	deadLock := filepath.Join(deadletter.DirName, deadletter.LockFile)
	tests := []struct {
		name string
		vars []string
		args []string
		want string // all of stderr
	}{
		{"dead-letter store", nil, []string{"--data", dead},
			fmt.Sprintf("orderly: --data %s: in use (another consumer on it?): process %d holds the lock of its local dead-letter store, %s\n", dead, pid, deadLock)},
		{"dead-letter store, variable", []string{"ORDERLY_DATA=" + dead}, nil,
			fmt.Sprintf("orderly: --data %s (from ORDERLY_DATA): in use (another consumer on it?): process %d holds the lock of its local dead-letter store, %s\n", dead, pid, deadLock)},
		{"parked messages", nil, []string{"--ordering", "none", "--data", parked},
			fmt.Sprintf("orderly: --data %s: in use (another consumer on it?): process %d holds the lock of its parked messages, orderly-parked.lock\n", parked, pid)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"consume", "--brokers", b.Addrs()[0], "--group", "g", "--topic", "present", "--http", ep.url()}, tt.args...)
			r := runBin(t, tt.vars, args...)
			if r.code != exitError || r.stderr != tt.want {
				t.Errorf("orderly %q: got exit %d, stderr:\n%s\nwant exit %d, stderr:\n%s", args, r.code, r.stderr, exitError, tt.want)
			}
		})
	}
}

// TestConsumeDataUnusable: a --data consume cannot make or write in (a
// file, a path under a file, a directory it may not write) ends it before
// it starts, with exit 1 and one line naming --data (and ORDERLY_DATA when
// the value came from there): no start line, no log entry first. It ended
// once the group had started, after a warning, with "consume: group: local
// dead-letter store: deadletter: create ...".
func TestConsumeDataUnusable(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "present", 1)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(dir, "readonly")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(file, "sub")
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "gone"), dangling); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		vars     []string
		args     []string
		want     string // all of stderr
		needUser bool   // root may write anywhere
	}{
		{"a file", nil, []string{"--data", file}, "orderly: --data " + file + ": not a directory\n", false},
		{"under a file", nil, []string{"--data", under}, "orderly: --data " + under + ": " + file + " is not a directory\n", false},
		{"under a file, variable", []string{"ORDERLY_DATA=" + under}, nil,
			"orderly: --data " + under + " (from ORDERLY_DATA): " + file + " is not a directory\n", false},
		{"a dangling symbolic link", nil, []string{"--data", dangling},
			"orderly: --data " + dangling + ": a symbolic link to " + filepath.Join(dir, "gone") + ", which does not exist\n", false},
		{"a directory it cannot write", nil, []string{"--data", readOnly}, "orderly: --data " + readOnly + ": cannot write in it: permission denied\n", true},
		{"missing, under a directory it cannot write", nil, []string{"--data", filepath.Join(readOnly, "a", "b")},
			"orderly: --data " + filepath.Join(readOnly, "a", "b") + ": cannot create it in " + readOnly + ": permission denied\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needUser && os.Geteuid() == 0 {
				t.Skip("root may write in a directory of mode 0555")
			}
			args := append([]string{"consume", "--brokers", b.Addrs()[0], "--group", "g", "--topic", "present", "--http", ep.url()}, tt.args...)
			r := runBin(t, tt.vars, args...)
			if r.code != exitError || r.stdout != "" || r.stderr != tt.want {
				t.Errorf("orderly %q: got exit %d, stdout %q, stderr %q; want exit %d, no stdout, stderr %q", args, r.code, r.stdout, r.stderr, exitError, tt.want)
			}
		})
	}
}

// TestConsumeDataNotLeftBehind: a --data that does not exist yet is
// checked at its nearest existing parent and not made by the check: a
// run that fails before it starts (an endpoint that refuses connections,
// a topic missing) leaves no --data behind, where it left an empty
// directory; a run that starts makes it, and keeps the committed offsets
// it saw there with a --dead-letter-topic too.
func TestConsumeDataNotLeftBehind(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "present", 1)
	produceKeyed(t, b, "present", 5, 1)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	for _, tt := range []struct {
		name string
		args []string
		want string // how stderr starts
	}{
		{"unreachable endpoint", []string{"--topic", "present", "--http", "http://127.0.0.1:1/hook"}, "orderly: --http http://127.0.0.1:1/hook: endpoint unreachable"},
		{"missing topic", []string{"--topic", "absent", "--http", ep.url()}, "orderly: --topic absent: the topic does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			top := filepath.Join(t.TempDir(), "new")
			data := filepath.Join(top, "data")
			r := runBin(t, nil, append([]string{"consume", "--brokers", b.Addrs()[0], "--group", "g", "--data", data}, tt.args...)...)
			if r.code != exitError || !strings.HasPrefix(r.stderr, tt.want) {
				t.Fatalf("got exit %d, stderr %q; want exit %d, stderr starting %q", r.code, r.stderr, exitError, tt.want)
			}
			if _, err := os.Stat(top); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after a run that failed before it started: got Stat(%s) error %v, want it absent", top, err)
			}
		})
	}
	t.Run("a run that starts", func(t *testing.T) {
		if err := b.CreateTopic("present-dlq", 1); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(t.TempDir(), "new", "data")
		p := startConsume(t, "--brokers", b.Addrs()[0], "--group", "g", "--topic", "present", "--http", ep.url(),
			"--dead-letter-topic", "present-dlq", "--data", data, "--progress", "off", "--log-level", "error")
		p.waitCommitted(b, "g", "present")
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
		}
		if _, err := os.Stat(filepath.Join(data, "committed-offsets.json")); err != nil {
			t.Errorf("after a run that started: got %v, want --data made and holding committed-offsets.json", err)
		}
	})
}

// TestConsumeEnvBinding checks that every flag of `orderly consume` is
// read from its ORDERLY_* variable when not given, and that a flag given
// wins over its variable.
func TestConsumeEnvBinding(t *testing.T) {
	c := consumeCommand(env{})
	fs := c.Flags()
	vals := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		switch f.Value.Type() {
		case "bool":
			vals[envName(f.Name)] = "true"
		case "duration":
			vals[envName(f.Name)] = "7s"
		case "int":
			vals[envName(f.Name)] = "7"
		case "float":
			vals[envName(f.Name)] = "0.5"
		case "list":
			vals[envName(f.Name)] = "127.0.0.1:7"
		default:
			vals[envName(f.Name)] = "PLAIN" // a valid value of every string flag (--sasl-mechanism's included)
		}
	})
	vals[envName("ordering")], vals[envName("progress")], vals[envName("log-level")] = "none", "off", "warn"
	vals[envName("admin")] = "127.0.0.1:0"
	vals[envName("topic")], vals[envName("dead-letter-topic")] = "orders", "orders-dlq" // topic names, not addresses
	vals[envName("assignment-strategy")] = "range"
	vals[envName("offset-reset")] = "latest"
	if err := fs.Parse([]string{"--num", "3"}); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	if err := bindEnv(fs, lookup); err != nil {
		t.Fatalf("bindEnv: %v", err)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		want := strings.Trim(vals[envName(f.Name)], "[]")
		if f.Name == "num" {
			want = "3"
		}
		if got := strings.Trim(f.Value.String(), "[]"); !f.Changed || got != want {
			t.Errorf("--%s: got %q (changed %v), want %q from %s", f.Name, got, f.Changed, want, envName(f.Name))
		}
	})
}

// TestConsumeHelp: consume's help has the common header and environment
// rule, every flag, and consume's own exit status (a signal is its normal
// end: exit 0).
func TestConsumeHelp(t *testing.T) {
	r := runBin(t, nil, "consume", "--help")
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "Usage: orderly consume [flags]") ||
		!endsWithFooter(r.stdout, consumeExitStatus) || !strings.Contains(r.stdout, "ORDERLY_<FLAG>") {
		t.Errorf("got exit %d, stderr %q, stdout:\n%s\nwant the help with consume's exit status", r.code, r.stderr, r.stdout)
	}
	consumeCommand(env{}).Flags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(r.stdout, "--"+f.Name+" ") {
			t.Errorf("help lacks --%s", f.Name)
		}
	})
}
