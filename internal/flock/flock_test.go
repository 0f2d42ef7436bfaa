//go:build linux

package flock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
// once and names this process; the file names the holder; Close lets go.
func TestLockHeldHere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, _, err := Lock(path, 0o600)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	start := time.Now()
	_, holder, err := Lock(path, 0o600)
	if !errors.Is(err, ErrHeld) || holder != os.Getpid() {
		t.Fatalf("second Lock: got %d, %v; want %d, ErrHeld", holder, err, os.Getpid())
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("refused after %v, want at once", took)
	}
	f.Close()
	f, _, err = Lock(path, 0o600)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	f.Close()
}
