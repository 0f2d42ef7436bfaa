package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/lograte"
)

// execGuardArg, as orderly's only argument, makes it the exec guard
// (execGuardMain) instead of the command line tool.
const execGuardArg = "__orderly-exec-guard"

// Exit codes of an --exec command that mean something to consume.
const (
	exitTempFail      = 75  // EX_TEMPFAIL: retry with backoff
	exitNotExecutable = 126 // the shell found the command but could not run it
	exitNotFound      = 127 // the shell did not find the command
)

// execSink runs --exec once per batch.
type execSink struct {
	sinkCore
	cmd         string
	leftOpenLog lograte.Limit // commands that left a process holding their output
}

func newExecSink(o *consumeOpts, gt *gate, ctr *sinkCounters, log *zap.Logger) *execSink {
	return &execSink{sinkCore: newSinkCore(o, gt, ctr, log), cmd: o.execCmd, leftOpenLog: lograte.Limit{Every: warnEvery}}
}

func (s *execSink) describe() string { return fmt.Sprintf("exec %q (JSON lines on stdin)", s.cmd) }
func (s *execSink) close()           {}

// tail keeps the last n bytes written to it.
type tail struct {
	mu sync.Mutex
	n  int
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.n {
		t.b = append(t.b[:0], t.b[len(t.b)-t.n:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// maxOutcomes bounds what is read of a command's stdout.
type limited struct {
	b     bytes.Buffer
	limit int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.limit - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// secretVars are not passed on to the command: it needs the records, not
// consume's credentials.
var secretVars = []string{envName("sasl-password")}

// commandEnv is consume's environment without secretVars.
func commandEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(secretVars, name) {
			out = append(out, kv)
		}
	}
	return out
}

// send is the group's Do: one run of the command for the batch.
func (s *execSink) send(ctx context.Context, batch []*group.Message) error {
	if d := s.gate.remaining(); d > 0 {
		return deferAll(len(batch), d)
	}
	var in bytes.Buffer
	if err := appendLinesJSON(&in, batch); err != nil {
		return fmt.Errorf("encode %s: %w", where(batch), err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", s.cmd)
	cmd.WaitDelay = 2 * time.Second // a leftover child holding the pipes cannot hold the call
	cmd.Stdin = &in
	cmd.Env = commandEnv(os.Environ())
	stdout := &limited{limit: maxResponse}
	stderr := &tail{n: 2048}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	s.ctr.calls.Add(1)
	err := runCommand(cmd, s.log)
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited 0, but something it started still holds its stdout
		// or stderr: the batch is done; what that child writes is lost.
		s.leftOpenLog.Warn(s.log, "command exited 0 but left a process holding its output open; not waiting for it",
			append(batchFields(batch), zap.String("exec", s.cmd))...)
		err = nil
	}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		// Timed out (the process group was killed; the group counts a
		// failed attempt), or a shutdown or revoke (uncharged).
		return fmt.Errorf("%s for %s: %w", s.flag(), where(batch), callCause(ctx, s.timeout))
	case err == nil:
		s.endpoint.ok()
		err := s.outcomes(batch, stdout.b.Bytes())
		if errors.Is(err, errBadOutcome) {
			s.ctr.failed.Add(1)
			s.warnf(batch, "bad outcomes on the command's stdout; retrying the batch", err, stderr)
			return failAll(batch, err)
		}
		s.ctr.ok.Add(1)
		return err
	case !errors.As(err, &exit):
		s.ctr.failed.Add(1)
		s.warnf(batch, "could not run the command; retrying with backoff", err, stderr)
		return failAll(batch, fmt.Errorf("%s: %w", s.flag(), err))
	}
	code := exit.ExitCode()
	why := runError(s.cmd, err, stderr.String(), itemPrefixLen(batch))
	switch code {
	case exitTempFail:
		s.ctr.failed.Add(1)
		s.warnf(batch, "command exited 75 (EX_TEMPFAIL): retrying with backoff", err, stderr)
		return failAll(batch, why)
	case exitNotExecutable, exitNotFound:
		return s.endpointFault(batch, fmt.Sprintf("exit %d", code), "command not found or not executable: check --exec; retrying, never dead-lettered",
			zap.String("exec", s.cmd), zap.Int("exit", code), zap.String("stderr", stderr.String()))
	}
	return s.rejectedCall(batch, why)
}

// runError is the error of a run that exited non-zero: the command (its
// first maxQuotedCommand bytes), its exit status and the end of its stderr, cut at the front so that the
// whole, behind a prefix of up to prefix bytes (itemErr's), fits a dead
// letter's message (deadletter.MaxMessage): the last lines a command
// prints are the ones that say why it failed.
func runError(cmd string, err error, stderr string, prefix int) error {
	flag := execFlag(cmd)
	head := fmt.Sprintf("%s: %v; stderr: ", flag, err)
	return fmt.Errorf("%s: %w; stderr: %s", flag, err, deadletter.CutFront(stderr, max(deadletter.MaxMessage-prefix-len(head), 256)))
}

// execFlag is how an error names the --exec command: its first
// maxQuotedCommand bytes, quoted. The operator has the command, and a dead
// letter's room is for what went wrong.
func execFlag(cmd string) string {
	return fmt.Sprintf("--exec %q", deadletter.Cut(cmd, maxQuotedCommand))
}

const maxQuotedCommand = 120

// flag is execFlag of the sink's command.
func (s *execSink) flag() string { return execFlag(s.cmd) }

// itemPrefixLen is the longest prefix itemErr puts before an error of
// batch's items.
func itemPrefixLen(batch []*group.Message) int {
	n := 0
	for _, m := range batch {
		n = max(n, len(itemErr(m, errEmpty).Error()))
	}
	return n
}

// errEmpty has no text: itemErr's prefix alone.
var errEmpty = errors.New("")

func (s *execSink) warnf(batch []*group.Message, msg string, err error, stderr *tail) {
	s.failLog.Warn(s.log, msg, append(batchFields(batch), zap.String("exec", s.cmd), zap.Error(err), zap.String("stderr", stderr.String()))...)
}

// outcomes reads per-item outcomes from the command's stdout: each line
// that is a JSON object with an "outcome" names one item; other lines are
// ignored.
func (s *execSink) outcomes(batch []*group.Message, out []byte) error {
	var outs []outcomeJSON
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), maxResponse)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var o outcomeJSON
		if json.Unmarshal(line, &o) != nil || o.Outcome == "" {
			continue
		}
		outs = append(outs, o)
	}
	if len(outs) == 0 {
		return nil
	}
	return applyOutcomes(batch, outs, s.defDelay, s.flag(), s.ctr)
}
