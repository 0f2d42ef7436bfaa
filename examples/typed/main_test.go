package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// syncBuffer is a bytes.Buffer the group's goroutines may write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTyped(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"orders"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = loadgen.Produce(ctx, b.Addrs(), "orders", 300, func(i int) loadgen.Record {
		if i == 17 {
			return loadgen.Record{Value: []byte("not json")} // skipped past, not fatal
		}
		return loadgen.Record{Value: fmt.Appendf(nil, `{"customer":"c%d","item":"i%d","cents":%d}`, i%7, i, 100+i)}
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err = b.WaitCaughtUp(ctx, "example-typed", "orders", func(ctx context.Context) error {
		return run(ctx, []string{"--brokers", b.Addrs()[0], "--topic", "orders"}, &stdout, &stderr)
	})
	if err != nil {
		t.Fatalf("run: got %v, want nil after catching up and a clean shutdown", err)
	}
	inserted := 0
	for line := range strings.Lines(stdout.String()) {
		var n int
		if _, err := fmt.Sscanf(line, "inserted %d orders", &n); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		inserted += n
	}
	if inserted != 299 {
		t.Errorf("inserted %d orders, want 299 (300 records, one not JSON):\n%s", inserted, stdout.String())
	}
	// The default log level is info: joining, the claims, the record that
	// does not decode and the release are logged to stderr.
	for _, want := range []string{"INFO\tsession started", "INFO\tclaim started", "WARN\tdecode failed; message skipped", "INFO\tpartition released"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "DEBUG") {
		t.Errorf("stderr has debug lines at the default level:\n%s", stderr.String())
	}
}

// runMain runs the example's main in a process of its own (see asMain)
// and returns its stdout, stderr and exit code.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string // contained in stdout
		wantStderr string // contained in stderr
	}{
		{[]string{"--help"}, 0, "Usage: typed [flags]", ""},
		{[]string{"-h"}, 0, "-log-level", ""},
		{[]string{"--nosuch"}, 2, "", "typed: flag provided but not defined: -nosuch\nsee 'typed --help'\n"},
		{[]string{"--log-level", "loud"}, 2, "", `invalid value "loud" for -log-level`},
		{[]string{"extra"}, 2, "", `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		stdout, stderr, code := runMain(t, tt.args...)
		if code != tt.wantCode || !strings.Contains(stdout, tt.wantStdout) || !strings.Contains(stderr, tt.wantStderr) {
			t.Errorf("typed %q: got exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tt.args, code, stdout, stderr, tt.wantCode, tt.wantStdout, tt.wantStderr)
		}
		if tt.wantCode == 0 && stderr != "" {
			t.Errorf("typed %q: stderr %q, want nothing", tt.args, stderr)
		}
		if tt.wantCode != 0 && (stdout != "" || strings.Count(stderr, "\n") != 2) {
			t.Errorf("typed %q: stdout %q, stderr %q; want nothing on stdout, the error and a hint on stderr", tt.args, stdout, stderr)
		}
	}
}
