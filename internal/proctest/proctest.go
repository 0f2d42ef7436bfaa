// Package proctest runs the processes of Orderly's multi-process tests
// and benchmarks: the orderly binary built from cmd/orderly, `orderly
// broker` processes, and the test binary itself run again as a child.
// Only tests import it.
package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/flock"
)

// Proc is a process a test started.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// Start starts cmd and, at the test's cleanup, kills it (SIGKILL) unless
// it has ended by then.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.Stop(syscall.SIGKILL) })
	return p
}

// Stop sends sig and waits for the process to end, killing it after 30 s.
// A process that has ended already is left alone.
func (p *Proc) Stop(sig syscall.Signal) {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Exited reports whether the process has ended (and been waited for).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed once the process has ended and been waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// BuildOrderly builds cmd/orderly into the test's temporary directory
// and returns its path (the build cache makes every build after the first
// a link).
func BuildOrderly(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "orderly")
	cmd := exec.Command("go", "build", "-o", out, "github.com/orderly-go/orderly/cmd/orderly")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build ./cmd/orderly: %v", err)
	}
	return out
}

// StartBroker runs `bin broker args...` (its stderr to the test's) and
// returns it with its address once it printed "ready".
func StartBroker(t testing.TB, bin string, args ...string) (*Proc, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"broker"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	p := Start(t, cmd)
	sc := bufio.NewScanner(stdout)
	addr := ""
	for sc.Scan() {
		line := sc.Text()
		if a, ok := strings.CutPrefix(line, "orderly broker listening on "); ok {
			addr = a
		}
		if line == "ready" {
			break
		}
	}
	if addr == "" {
		t.Fatalf("%s broker %s printed no address", bin, strings.Join(args, " "))
	}
	go func() {
		for sc.Scan() { // drain until it exits
		}
	}()
	return p, addr
}

// lockDirEnv names the directory a lock-holder child locks (HoldLock).
const lockDirEnv = "ORDERLY_TEST_LOCK_DIR"

// HoldLock is the child side of a lock test: run as the child that
// StartLockHolder starts, it calls open on the directory it was given,
// takes some memory to tear down (the kernel drops a killed process's
// flock only after it freed the address space, as a consumer's would
// be), prints "locked" and waits until killed, or until its stdin (a
// pipe from the parent test) closes: a parent that dies without its
// cleanups does not leave it holding the lock and the memory. It returns
// at once, false, in any other run of the test.
func HoldLock(open func(dir string) (any, error)) bool {
	dir := os.Getenv(lockDirEnv)
	if dir == "" {
		return false
	}
	held, err := open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	ballast := make([]byte, 64<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	os.Stdout.WriteString("locked\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed, or the parent is gone
	runtime.KeepAlive(held)              // or a GC closes the lock file
	return true
}

// StartLockHolder runs test, a test of this binary that calls HoldLock,
// as a child locking dir, and returns once the child holds the lock. The
// child is killed at the test's cleanup.
func StartLockHolder(t testing.TB, test, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	lifeline, err := cmd.StdinPipe() // closed when this process ends, however it ends
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = lifeline.Close() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("lock holder: got %q (%v), want \"locked\"", line, err)
	}
	return cmd
}

// OpenAfterKills checks that a lock's holder killed with SIGKILL does not
// keep the next Open out: rounds times, it starts test's lock holder on
// dir (StartLockHolder), kills it and calls open at once, which must get
// the lock (the holder is torn down by the kernel meanwhile). It fails t
// for each open refused.
func OpenAfterKills(t *testing.T, test, dir string, rounds int, open func() (io.Closer, error)) {
	t.Helper()
	failed := 0
	for round := range rounds {
		cmd := StartLockHolder(t, test, dir)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		c, err := open()
		if err != nil {
			failed++
			t.Errorf("round %d: Open right after kill -9 of the holder: got %v, want the lock", round, err)
		} else if err := c.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		_ = cmd.Wait()
	}
	if failed > 0 {
		t.Errorf("%d of %d Opens right after kill -9 refused, want 0", failed, rounds)
	}
}

// RefusedBesideHolder checks that a lock's live holder is refused at
// once: it starts test's lock holder on dir (StartLockHolder), calls open
// beside it, and fails t unless open returned, within 500 ms (a live
// holder is not waited for), an error that wraps a *flock.HeldError with
// the holder's process ID and names each of names and the holder's
// "process <pid>". It returns the error for the caller's own checks.
func RefusedBesideHolder(t *testing.T, test, dir string, open func() error, names ...string) error {
	t.Helper()
	cmd := StartLockHolder(t, test, dir)
	pid := cmd.Process.Pid
	start := time.Now()
	err := open()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("Open beside a live holder (process %d): got the lock, want a refusal", pid)
	}
	var held *flock.HeldError
	if !errors.As(err, &held) || held.PID != pid {
		t.Errorf("Open beside a live holder: got %v, want a *flock.HeldError with PID %d", err, pid)
	}
	for _, want := range append(names, fmt.Sprintf("process %d", pid)) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took > 500*time.Millisecond {
		t.Errorf("refused after %v, want at once (a live holder is not waited for)", took)
	}
	return err
}
