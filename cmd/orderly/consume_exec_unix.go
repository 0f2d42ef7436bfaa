//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// runCommand runs cmd in a process group of its own and waits for it.
// The cancellation of its context (a timeout, a shutdown) kills the whole
// group, so that what the shell started dies with it; and so does the
// death of consume, even by kill -9: the exec guard (execGuard) kills
// the groups of the commands in flight when consume is gone, and on
// Linux the command itself also has SIGKILL as its parent-death signal.
// That signal alone would not do: it reaches the shell only, and dash
// forks for `sh -c CMD` (CMD is the shell's child); it covers the moment
// between the start and the guard hearing of the group.
func runCommand(cmd *exec.Cmd, log *zap.Logger) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// The parent-death signal comes when the thread that started the
	// command ends, not the process: the thread must outlive the
	// command. Go ends a thread only when a goroutine locked to it
	// returns, so this one stays locked until the command has ended.
	unlock := lockThread()
	defer unlock()
	guard.ready(log) // before the start: the guard is told of the group at once
	if err := cmd.Start(); err != nil {
		return err
	}
	pgid := cmd.Process.Pid
	guard.add(pgid, log)
	err := cmd.Wait()
	guard.remove(pgid, log)
	return err
}

// execGuard is consume's side of the exec guard: a process (orderly
// itself, run with execGuardArg) that reads the process groups of the
// commands in flight from a pipe, "+PGID" when one starts and "-PGID"
// when it has ended, and when the pipe closes (consume is gone, however
// it died: the kernel closes the write end, which only consume holds)
// kills the groups still listed. It is started with the first command
// and runs for consume's life; one guard serves every command, so a call
// costs two small writes. If it dies, the next write fails and a new one
// is started with the groups in flight.
type execGuard struct {
	mu     sync.Mutex
	w      *os.File // the pipe's write end; nil: no guard (yet, or it died)
	proc   *exec.Cmd
	active map[int]bool // the groups in flight
	warned bool
	// retryAt is when a guard that could not start is tried again: not
	// at every call (a fork and exec each).
	retryAt time.Time
}

var guard = &execGuard{active: map[int]bool{}}

// ready starts the guard unless it runs (or could not start a minute
// ago), so that a command's group is told to it as soon as it starts.
func (g *execGuard) ready(log *zap.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil && !time.Now().Before(g.retryAt) {
		g.start(log)
	}
}

// add tells the guard of pgid, if one runs (ready started it).
func (g *execGuard) add(pgid int, log *zap.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active[pgid] = true
	if g.w != nil {
		g.write(fmt.Sprintf("+%d\n", pgid), log)
	}
}

func (g *execGuard) remove(pgid int, log *zap.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.active, pgid)
	if g.w != nil {
		g.write(fmt.Sprintf("-%d\n", pgid), log)
	}
}

// write sends one line (a single write: shorter than PIPE_BUF, so lines
// of concurrent writers never mix). If the guard is gone it starts
// another with the active groups.
func (g *execGuard) write(line string, log *zap.Logger) {
	if _, err := g.w.WriteString(line); err == nil {
		return
	}
	g.stopGuard()
	g.start(log)
}

// start starts a guard and tells it the active groups. If it cannot, the
// commands run unguarded until a try a minute later succeeds: it warns
// once.
func (g *execGuard) start(log *zap.Logger) {
	err := g.startGuard()
	if err == nil {
		for pgid := range g.active {
			if _, err = fmt.Fprintf(g.w, "+%d\n", pgid); err != nil {
				break
			}
		}
	}
	if err != nil {
		if g.w != nil {
			g.stopGuard()
		}
		g.retryAt = time.Now().Add(time.Minute)
		if !g.warned {
			g.warned = true
			log.Warn("could not start the guard that kills the commands' process groups if consume dies; a kill -9 of consume leaves them running",
				zap.Error(err))
		}
	}
}

// stopGuard ends the guard after a failed write: it is gone already
// (its end of the pipe is closed), or cannot be told anything.
func (g *execGuard) stopGuard() {
	g.w.Close()
	g.w = nil
	g.proc.Process.Kill()
	g.proc.Wait()
}

func (g *execGuard) startGuard() error {
	exe, err := selfExecutable()
	if err != nil {
		return fmt.Errorf("exec guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec guard: %w", err)
	}
	cmd := exec.Command(exe, execGuardArg)
	cmd.Args[0] = "orderly"
	cmd.Stdin = r
	cmd.Env = commandEnv(os.Environ())
	// A group of its own: the terminal's Ctrl-C, meant for consume (which
	// drains), does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("exec guard %s: %w", exe, err)
	}
	g.w, g.proc = w, cmd
	return nil
}

// execGuardMain is the guard process (see execGuard): it returns the exit
// code once its stdin is closed, after killing the groups still listed.
func execGuardMain() int {
	// Only the end of consume ends it: the signals that stop consume
	// (which drains its commands first) do not.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	groups := map[int]bool{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return 0
}
