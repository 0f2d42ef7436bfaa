//go:build linux

package localqueue

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The lock tests run this test binary again as a child (TestLockChild)
// that opens queue "q" on $LOCALQUEUE_LOCK_DIR, prints "locked" and
// waits to be killed.
const lockDirEnv = "LOCALQUEUE_LOCK_DIR"

func TestLockChild(t *testing.T) {
	dir := os.Getenv(lockDirEnv)
	if dir == "" {
		t.Skip("the child process of TestLockAfterKill")
	}
	q, err := Open(Options{Name: "q", DataPath: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	// Some memory to tear down, as a consumer has: the kernel drops the
	// lock only after it freed the address space.
	ballast := make([]byte, 64<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Hour) // until killed
	runtime.KeepAlive(q)  // or a GC closes the lock file
}

// startLockHolder starts TestLockChild on dir and returns once it holds
// the lock.
func startLockHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("lock holder: got %q (%v), want \"locked\"", line, err)
	}
	return cmd
}

// TestLockAfterKill: an Open right after the holder was SIGKILLed gets
// the lock (it waits for the kernel to finish tearing the holder down
// instead of refusing), round after round.
func TestLockAfterKill(t *testing.T) {
	dir := t.TempDir()
	sc := idleScanner(t)
	const rounds = 10
	failed := 0
	for round := range rounds {
		cmd := startLockHolder(t, dir)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		q, err := Open(Options{Name: "q", DataPath: dir, Scanner: sc})
		if err != nil {
			failed++
			t.Errorf("round %d: Open right after kill -9 of the holder: got %v, want the lock", round, err)
		} else if err := q.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		cmd.Wait()
	}
	if failed > 0 {
		t.Errorf("%d of %d Opens right after kill -9 refused, want 0", failed, rounds)
	}
}

// TestLockLiveHolder: a holder that lives on is refused at once, with
// an error naming the lock file and the holder's ID.
func TestLockLiveHolder(t *testing.T) {
	dir := t.TempDir()
	cmd := startLockHolder(t, dir)
	start := time.Now()
	_, err := Open(Options{Name: "q", DataPath: dir, Scanner: idleScanner(t)})
	took := time.Since(start)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open beside a live holder: got %v, want ErrLocked", err)
	}
	for _, want := range []string{dir + "/q.lock", fmt.Sprintf("process %d", cmd.Process.Pid)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took > 500*time.Millisecond {
		t.Errorf("refused after %v, want at once (a live holder is not waited for)", took)
	}
}
