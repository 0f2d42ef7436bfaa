package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair (Linux's /dev/ptmx), 250 columns
// wide.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 250}); err != nil {
		t.Fatal(err)
	}
	return m, s
}

// onTerminal is a process started with its stdout on a pseudo-terminal:
// screen is what the terminal showed, copied until the process and its
// terminal close (copied).
type onTerminal struct {
	screen, stderr lockedBuffer
	copied         chan struct{}
}

// startOnTerminal starts cmd with its stdout on a new pseudo-terminal and
// its stderr in a buffer.
func startOnTerminal(t *testing.T, cmd *exec.Cmd) *onTerminal {
	t.Helper()
	master, slave := openPTY(t)
	t.Cleanup(func() { master.Close() })
	o := &onTerminal{copied: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = slave, &o.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	go func() {
		defer close(o.copied)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			o.screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	return o
}

// shown is what the terminal showed once the process has ended, with the
// terminal's newline translation undone.
func (o *onTerminal) shown() string {
	<-o.copied
	return strings.ReplaceAll(o.screen.String(), "\r\n", "\n")
}

// TestConsumeTerminalProgress runs consume with its stdout on a
// pseudo-terminal: the progress line is redrawn in place (\r, no newline
// between redraws), and after SIGTERM the final line follows on a line of
// its own.
func TestConsumeTerminalProgress(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "tty", 2)
	produceKeyed(t, b, "tty", 200, 10)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	cmd := exec.Command(orderlyBin(t), "consume", "--brokers", b.Addrs()[0], "--topic", "tty", "--group", "tty",
		"--http", ep.url(), "--log-level", "error")
	cmd.Env = procEnv()
	term := startOnTerminal(t, cmd)
	screen, stderr := &term.screen, &term.stderr
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(screen.String(), "\r") < 4 || !b.CaughtUp("tty", "tty") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no redrawn progress within 60s; screen:\n%q\nstderr:\n%s", screen.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\nstderr:\n%s", err, stderr.String())
	}
	out := term.shown()
	_, after, ok := strings.Cut(out, "\r")
	if !ok {
		t.Fatalf("no redraw in %q", out)
	}
	live, final, ok := strings.Cut(after, "\n")
	if !ok || !strings.HasPrefix(final, "orderly consume: stopped") {
		t.Fatalf("want the redrawn line, a newline, then the final line; got %q", after)
	}
	if strings.Count(live, "\r") < 3 || !strings.Contains(live, "handled 200  committed") {
		t.Errorf("redrawn part %q: want several redraws on one line, the last showing handled 200", live)
	}
}
