package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/leakcheck"
)

// binDir holds the orderly binary built once for the multi-process tests.
var binDir string

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == execGuardArg {
		// The exec guard of the exec sinks the tests run in this
		// process: it runs this binary again.
		os.Exit(execGuardMain())
	}
	dir, err := os.MkdirTemp("", "orderly-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	// Like leakcheck.Main, but removing binDir first: once every test has
	// run, nothing the in-process demo, broker or bench started may still
	// be running.
	if code == 0 {
		if err := leakcheck.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
	binPath   string
)

// orderlyBin builds the orderly binary once and returns its path.
func orderlyBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "orderly")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// runCmd runs the command line args in-process, with no ORDERLY_*
// variables, and returns what it printed on stdout and its error.
func runCmd(ctx context.Context, args ...string) (string, error) {
	stdout, _, err := runCmd2(ctx, args...)
	return stdout, err
}

// runCmd2 is runCmd that also returns what was printed on stderr.
func runCmd2(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(ctx, args, env{stdout: &out, stderr: &errb, lookup: noEnv})
	return out.String(), errb.String(), err
}

func noEnv(string) (string, bool) { return "", false }

// procEnv is the environment of an orderly process a test starts: this
// process's, without ORDERLY_* variables (a developer's own settings must
// not change what a test sees), plus vars.
func procEnv(vars ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}

// result is how an orderly process ended.
type result struct {
	stdout, stderr string
	code           int
}

// runBin runs the orderly binary with args and the ORDERLY_* variables in
// vars ("NAME=value"), and returns its output and exit code; it fails the
// test if the process cannot run or takes longer than a minute.
func runBin(t *testing.T, vars []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orderlyBin(t), args...)
	cmd.Env = procEnv(vars...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) || ctx.Err() != nil {
		t.Fatalf("orderly %q: %v (ctx: %v)\nstdout:\n%s\nstderr:\n%s", args, err, ctx.Err(), stdout.String(), stderr.String())
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}
