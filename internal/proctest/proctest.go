// Package proctest runs the processes of Orderly's multi-process tests
// and benchmarks: the orderly binary built from cmd/orderly, `orderly
// broker` processes, and the test binary itself run again as a child.
// Only tests import it.
package proctest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// StatFields reads /proc/PID/stat (Linux) and returns its fields from the
// third on (state, ppid, ...: fields[0] is the state, fields[11] and
// [12] utime and stime). The command name, field 2, may hold spaces and
// parentheses, so the fields are those after its last ')'.
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])), nil
}
