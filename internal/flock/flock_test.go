//go:build linux

package flock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestExiting: this process and a live child are not exiting; a killed
// child is, before it is reaped (a zombie) and after (gone).
func TestExiting(t *testing.T) {
	if Exiting(os.Getpid()) {
		t.Fatalf("Exiting(this process): got true, want false")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if Exiting(pid) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("Exiting(a running sleep): got true, want false")
	}
	cmd.Process.Kill()
	deadline := time.Now().Add(2 * time.Second)
	for !Exiting(pid) {
		if time.Now().After(deadline) {
			cmd.Wait()
			t.Fatalf("Exiting(a killed, unreaped sleep): got false for 2 s, want true")
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Wait()
	if !Exiting(pid) {
		t.Fatalf("Exiting(a reaped process): got false, want true")
	}
}

// TestLockHeldHere: a second Lock in the same process is refused at
// once with a *HeldError (matching ErrHeld) that names the lock file and
// this process, read from the file; Close lets go.
func TestLockHeldHere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, err := Lock(path, 0o600)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	start := time.Now()
	_, err = Lock(path, 0o600)
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) || held.PID != os.Getpid() || held.Path != path {
		t.Fatalf("second Lock: got %v, want a *HeldError matching ErrHeld with PID %d and Path %s", err, os.Getpid(), path)
	}
	if want := fmt.Sprintf("process %d holds the lock %s", os.Getpid(), path); err.Error() != want {
		t.Errorf("second Lock: got %q, want %q", err, want)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("refused after %v, want at once", took)
	}
	f.Close()
	f, err = Lock(path, 0o600)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	f.Close()
}

// TestStatFields: the fields of a process whose command name holds
// spaces and parentheses start with its state and its parent's ID.
func TestStatFields(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "a) (b c")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	fields, err := StatFields(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) < 13 || (fields[0] != "S" && fields[0] != "R") || fields[1] != strconv.Itoa(os.Getpid()) {
		t.Fatalf("StatFields of %q: got %q, want state S or R, then ppid %d, and at least 13 fields", bin, fields, os.Getpid())
	}
}
