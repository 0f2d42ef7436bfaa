package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDemoInterrupted stops a demo whose producer is paced far below its
// plan, by --timeout and by SIGINT, and checks that the report and the
// exit say so: produced less than planned, lost only what a commit passed
// without handling (nothing), what is not handled is the produced rest,
// exit 3 with a one-line summary.
func TestDemoInterrupted(t *testing.T) {
	args := []string{"demo", "--messages", "200000", "--keys", "1000", "--rate", "2000",
		"--io", "0", "--io-item", "0", "--fail", "0.05", "--progress", "off"}
	tests := []struct {
		name   string
		args   []string
		signal bool   // send SIGINT 1.5s after the producer starts
		cause  string // what the report and the error say stopped the run
	}{
		{"timeout", []string{"--timeout", "3s"}, false, "timed out after --timeout 3s"},
		{"SIGINT", nil, true, "interrupted by SIGINT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runInterrupted(t, append(args, tt.args...), tt.signal)
			if r.code != exitInterrupted {
				t.Errorf("exit %d, want %d (interrupted)\nstdout:\n%s\nstderr:\n%s", r.code, exitInterrupted, r.stdout, r.stderr)
			}
			out := r.stdout
			wantLines(t, out, map[string]string{
				"run":                 "interrupted (" + tt.cause + "): the figures are what happened until then",
				"planned":             "200000",
				"lost":                "0",
				"duplicates":          "0",
				"order violations":    "0",
				"balances mismatched": "0",
			})
			num := func(name string) int {
				t.Helper()
				n, err := strconv.Atoi(reportValue(t, out, name))
				if err != nil {
					t.Fatalf("%s: %v\n%s", name, err, out)
				}
				return n
			}
			produced, handled, notHandled, committed := num("produced"), num("handled"), num("not handled"), num("committed")
			if produced == 0 || produced >= 100_000 {
				t.Errorf("produced %d, want some, far fewer than planned (2000/s for a few seconds)", produced)
			}
			if notHandled != produced-handled || handled > produced || committed > produced {
				t.Errorf("produced %d, handled %d, not handled %d, committed %d: want not handled = produced - handled, and handled, committed <= produced",
					produced, handled, notHandled, committed)
			}
			wantErr := "orderly: " + tt.cause + ": " + strconv.Itoa(produced) + " of 200000 transfers produced, " +
				strconv.Itoa(handled) + " handled, " + strconv.Itoa(committed) + " records committed, 0 lost\n"
			if r.stderr != wantErr {
				t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, wantErr)
			}
		})
	}
}

// runInterrupted runs the orderly binary with args; with signal it sends
// SIGINT 1.5s after the demo says it is producing.
func runInterrupted(t *testing.T, args []string, signal bool) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orderlyBin(t), args...)
	cmd.Env = procEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		out       strings.Builder
		producing = make(chan struct{})
		once      sync.Once
		copied    = make(chan struct{})
	)
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "producing ") {
				once.Do(func() { close(producing) })
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	if signal {
		select {
		case <-producing:
		case <-copied:
			t.Fatalf("demo ended before producing\nstderr:\n%s", stderr.String())
		}
		time.Sleep(1500 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	}
	<-copied
	cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("demo did not end within a minute\nstdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
	}
	return result{stdout: out.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// TestDemoSecondInterrupt: a second SIGINT while the demo drains after the
// first ends the process at once, killed by the signal (a shell shows
// 130), with no report.
func TestDemoSecondInterrupt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orderlyBin(t), "demo", "--messages", "200000", "--rate", "2000",
		"--io", "5s", "--progress", "off")
	cmd.Env = procEnv()
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "producing ") {
		if time.Now().After(deadline) {
			t.Fatalf("demo not producing after 30s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // calls of 5s in flight: the drain after the first signal takes seconds
	for range 2 {
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Fatalf("exit: got %v, want killed by SIGINT\nstdout:\n%s\nstderr:\n%s", cmd.ProcessState, stdout.String(), stderr.String())
	}
	if strings.Contains(stdout.String(), "run ") || strings.Contains(stdout.String(), "handled") {
		t.Fatalf("a report was printed:\n%s", stdout.String())
	}
}

// TestInterruptedWhileConnecting: `group describe` and the dlq commands,
// waiting on a broker that accepts connections and never answers, stop at
// SIGINT with exit 3 and a line saying what they were doing, as their help
// says, rather than waiting for the client's timeouts.
func TestInterruptedWhileConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	addr := ln.Addr().String()
	tests := []struct {
		args []string
		what string
	}{
		{[]string{"group", "describe", "--brokers", addr, "--group", "g"}, "describing group g"},
		{[]string{"dlq", "list", "--brokers", addr, "--topic", "dlq"}, "connecting to the Kafka cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.args[0], func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(orderlyBin(t), tt.args...)
			cmd.Env = procEnv()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // connected, waiting for an answer
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			ended := make(chan struct{})
			go func() { cmd.Wait(); close(ended) }()
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-ended
				t.Fatalf("orderly %s still running 5s after SIGINT", strings.Join(tt.args, " "))
			}
			want := "orderly: interrupted by SIGINT while " + tt.what + "\n"
			if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || stderr.String() != want {
				t.Fatalf("got exit %d, stderr %q; want exit %d, stderr %q", code, stderr.String(), exitInterrupted, want)
			}
		})
	}
}
