package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
)

// TestBrokerAddrCannotListen: `orderly broker` on an address it cannot
// listen on (a port in use, an address of no interface here) exits 1 with
// one line naming --addr, and ORDERLY_ADDR when the value came from
// there, and why it cannot listen: the address appears once, after the
// flag, not again in net.Listen's error. The error wraps broker.ErrListen
// and the cause.
func TestBrokerAddrCannotListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy, foreign := ln.Addr().String(), "192.0.2.1:0" // 192.0.2.0/24: TEST-NET-1, no host's
	for _, tt := range []struct {
		name, addr string
		vars, args []string
		flag       string // how the error names the flag
		why        string // what follows it
	}{
		{"port in use", busy, nil, []string{"--addr", busy}, "--addr " + busy, "cannot listen: bind: " + syscall.EADDRINUSE.Error()},
		{"port in use, variable", busy, []string{"ORDERLY_ADDR=" + busy}, nil, "--addr " + busy + " (from ORDERLY_ADDR)", "cannot listen: bind: " + syscall.EADDRINUSE.Error()},
		{"no such interface", foreign, nil, []string{"--addr", foreign}, "--addr " + foreign, "cannot listen: bind: " + syscall.EADDRNOTAVAIL.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, append([]string{"broker"}, tt.args...)...)
			want := "orderly: " + tt.flag + ": " + tt.why + "\n"
			if r.code != exitError || r.stderr != want || strings.Count(r.stderr, tt.addr) != 1 {
				t.Fatalf("got exit %d, stderr %q; want exit %d and stderr %q, naming %s once", r.code, r.stderr, exitError, want, tt.addr)
			}
		})
	}
	_, _, err = runCmd2(context.Background(), "broker", "--addr", busy)
	if !errors.Is(err, broker.ErrListen) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("broker --addr %s in-process: got error %v, want one wrapping broker.ErrListen and EADDRINUSE", busy, err)
	}
}

// TestBrokerDataNotADir: `orderly broker` on a --data it cannot create
// (a path under a file) exits 1 with one line naming --data and its
// path, and ORDERLY_DATA when the value came from there.
func TestBrokerDataNotADir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(file, "sub")
	for _, tt := range []struct {
		name       string
		vars, args []string
		flag       string // how the error names the flag
	}{
		{"flag", nil, []string{"--data", data}, "--data " + data},
		{"variable", []string{"ORDERLY_DATA=" + data}, nil, "--data " + data + " (from ORDERLY_DATA)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, append([]string{"broker", "--addr", "127.0.0.1:0"}, tt.args...)...)
			want := "orderly: " + tt.flag + ": mkdir " + file + ": not a directory\n"
			if r.code != exitError || r.stderr != want {
				t.Errorf("got exit %d, stderr %q; want exit %d, stderr %q", r.code, r.stderr, exitError, want)
			}
		})
	}
}

// TestBrokerDataLockUnopenable: a --data whose lock file cannot be
// opened (here a directory stands in its place) is named by its flag.
func TestBrokerDataLockUnopenable(t *testing.T) {
	data := t.TempDir()
	lock := filepath.Join(data, "broker.lock")
	if err := os.Mkdir(lock, 0o755); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, nil, "broker", "--addr", "127.0.0.1:0", "--data", data)
	want := "orderly: --data " + data + ": "
	if r.code != exitError || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, lock) {
		t.Errorf("got exit %d, stderr %q; want exit %d, stderr starting %q and naming %s", r.code, r.stderr, exitError, want, lock)
	}
}

// lines collects what a broker writes, line by line, and signals "ready".
type lines struct {
	mu    sync.Mutex
	all   []string
	ready chan struct{}
	done  chan struct{} // closed at EOF
}

func readLines(r io.Reader) *lines {
	l := &lines{ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.mu.Unlock()
			if sc.Text() == "ready" {
				close(l.ready)
			}
		}
		io.Copy(io.Discard, r)
	}()
	return l
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// addr waits for "ready" and returns the address the broker printed.
func (l *lines) addr(t *testing.T) string {
	t.Helper()
	select {
	case <-l.ready:
	case <-l.done:
		t.Fatalf("broker ended before ready:\n%s", l.text())
	case <-time.After(20 * time.Second):
		t.Fatalf("broker not ready after 20s:\n%s", l.text())
	}
	for line := range strings.Lines(l.text()) {
		if a, ok := strings.CutPrefix(line, "orderly broker listening on "); ok {
			return strings.TrimSpace(a)
		}
	}
	t.Fatalf("broker printed no address:\n%s", l.text())
	return ""
}

func TestBrokerInProcess(t *testing.T) {
	pr, pw := io.Pipe()
	out := readLines(pr)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"broker", "--addr", "127.0.0.1:0", "--partitions", "3", "--topics", "a,b"},
			env{stdout: pw, stderr: io.Discard, lookup: noEnv})
		pw.Close()
	}()
	addr := out.addr(t)
	parts := topicPartitions(t, addr)
	if parts["a"] != 3 || parts["b"] != 3 {
		t.Errorf("topics %v, want a and b with 3 partitions", parts)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("broker: %v", err)
	}
	<-out.done
	if !strings.HasSuffix(out.text(), "stopped") {
		t.Errorf("broker did not print stopped:\n%s", out.text())
	}
}

// TestBrokerStopAtStart: a broker whose stop comes before its start has
// listed its topics (here ctx is cancelled before it starts) stops
// cleanly: it lists them, prints "ready" and "stopped", and returns nil;
// the listing, a Metadata round trip to itself, ran on ctx and failed
// with "context canceled".
func TestBrokerStopAtStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stdout, _, err := runCmd2(ctx, "broker", "--addr", "127.0.0.1:0", "--partitions", "2", "--topics", "a")
	if err != nil {
		t.Fatalf("broker stopped at its start: got error %v, want a clean stop\n%s", err, stdout)
	}
	if want := "topic: a (2 partitions)\nready\nstopped\n"; !strings.HasSuffix(stdout, want) {
		t.Errorf("broker stopped at its start: got output\n%s\nwant it to end\n%s", stdout, want)
	}
}

// TestWriteTopics: the start's topic lines: --topics first, then the
// others, sorted. Without --data a topic the start did not create was
// created by a client (since it listened), not reloaded.
func TestWriteTopics(t *testing.T) {
	tests := []struct {
		name   string
		topics map[string]int
		named  []string
		data   bool
		want   string
	}{
		{"named only", map[string]int{"a": 3}, []string{"a"}, false, "topic: a (3 partitions)\n"},
		{"reloaded", map[string]int{"a": 3, "z": 1, "k": 2}, []string{"a"}, true,
			"topic: a (3 partitions)\ntopic: k (2 partitions, from --data)\ntopic: z (1 partition, from --data)\n"},
		{"kept from --data", map[string]int{"a": 2}, []string{"a"}, true,
			"topic: a (2 partitions, kept from --data; --partitions 3 applies only to new topics)\n"},
		{"a client's, no --data", map[string]int{"a": 3, "k": 2}, []string{"a"}, false,
			"topic: a (3 partitions)\ntopic: k (2 partitions, created by a client)\n"},
		{"a client's first, no --data", map[string]int{"a": 1}, []string{"a"}, false,
			"topic: a (1 partition, created by a client first; --partitions 3 applies only to new topics)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeTopics(&b, tt.topics, tt.named, 3, tt.data)
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

// topicPartitions returns the partition count of each topic at addr.
func topicPartitions(t *testing.T, addr string) map[string]int {
	t.Helper()
	c := saramaClient(t, addr)
	defer c.Close()
	ts, err := c.Topics()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int)
	for _, topic := range ts {
		ps, err := c.Partitions(topic)
		if err != nil {
			t.Fatal(err)
		}
		out[topic] = len(ps)
	}
	return out
}

func saramaClient(t *testing.T, addr string) sarama.Client {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	c, err := sarama.NewClient([]string{addr}, cfg)
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	return c
}

// brokerProc is `orderly broker` running as a separate process.
type brokerProc struct {
	cmd  *exec.Cmd
	out  *lines
	addr string
}

// startBrokerProc starts `orderly broker args` with the ORDERLY_*
// variables vars and waits until it is ready.
func startBrokerProc(t *testing.T, vars []string, args ...string) *brokerProc {
	t.Helper()
	cmd := exec.Command(orderlyBin(t), append([]string{"broker"}, args...)...)
	cmd.Env = procEnv(vars...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &brokerProc{cmd: cmd, out: readLines(stdout)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // not stopped by the test
			cmd.Process.Kill()
			<-b.out.done
			cmd.Wait()
		}
	})
	b.addr = b.out.addr(t)
	return b
}

// stop sends SIGTERM and checks the broker exits 0 after printing
// "stopped".
func (b *brokerProc) stop(t *testing.T) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.out.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("broker did not exit 30s after SIGTERM:\n%s", b.out.text())
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("broker exit: %v\n%s", err, b.out.text())
	}
	if !strings.HasSuffix(b.out.text(), "stopped") {
		t.Errorf("broker did not print stopped:\n%s", b.out.text())
	}
}

// runDemoProc runs `orderly demo` as a separate process and returns its
// stdout; it fails the test unless the demo exits 0.
func runDemoProc(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orderlyBin(t), append([]string{"demo"}, args...)...)
	cmd.Env = procEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("orderly demo %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestProcesses runs the broker and the demo as separate processes: the
// demo against --brokers, the broker stopped with SIGTERM and restarted on
// its --data directory, where the records and the committed offsets must
// still be; then a second demo run on the topic that already holds data.
func TestProcesses(t *testing.T) {
	data := t.TempDir()
	b := startBrokerProc(t, nil, "--addr", "127.0.0.1:0", "--data", data, "--partitions", "4", "--topics", "orderly-demo")
	out := runDemoProc(t, "--brokers", b.addr, "--group", "first", "--messages", "3000", "--keys", "100",
		"--io", "0", "--io-item", "0", "--fail", "0.02", "--progress", "off")
	wantLines(t, out, okReport)
	wantLines(t, out, map[string]string{"produced": "3000", "handled": "3000", "partitions": "4", "committed": "3000"})
	b.stop(t)

	b = startBrokerProc(t, nil, "--addr", "127.0.0.1:0", "--data", data, "--partitions", "4", "--topics", "orderly-demo")
	c := saramaClient(t, b.addr)
	ps, err := c.Partitions("orderly-demo")
	if err != nil || len(ps) != 4 {
		t.Fatalf("after restart: partitions %v, %v", ps, err)
	}
	var newest int64
	for _, p := range ps {
		off, err := c.GetOffset("orderly-demo", p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		newest += off
	}
	if newest != 3000 {
		t.Errorf("after restart the topic holds %d records, want 3000", newest)
	}
	r := &remote{client: c}
	if r.admin, err = sarama.NewClusterAdminFromClient(c); err != nil {
		t.Fatal(err)
	}
	hw, err1 := r.highWatermarks("orderly-demo")
	committed, err2 := r.committed("first", "orderly-demo")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if offsets(committed) != offsets(hw) {
		t.Errorf("after restart group first committed %s, high watermarks %s", offsets(committed), offsets(hw))
	}
	r.close()

	// The topic now has data: a new run starts its group at the end.
	out = runDemoProc(t, "--brokers", b.addr, "--messages", "1000", "--keys", "30",
		"--io", "0", "--io-item", "0", "--progress", "on")
	wantLines(t, out, okReport)
	wantLines(t, out, map[string]string{"produced": "1000", "handled": "1000", "committed": "1000"})
	b.stop(t)
}

// TestBrokerRestartOtherPartitions restarts the broker on its --data with
// another --partitions: a topic it reloads is kept as it is (the help's
// "existing ones are kept"), and the start says so; the restart failed
// with TOPIC_ALREADY_EXISTS when the count grew.
func TestBrokerRestartOtherPartitions(t *testing.T) {
	tests := []struct {
		name        string
		first, then int    // --partitions of the first start and of the restart
		want        string // the restart's topic line
	}{
		{"more", 2, 3, "topic: t (2 partitions, kept from --data; --partitions 3 applies only to new topics)"},
		{"fewer", 3, 2, "topic: t (3 partitions, kept from --data; --partitions 2 applies only to new topics)"},
		{"same", 2, 2, "topic: t (2 partitions)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			b := startBrokerProc(t, nil, "--addr", "127.0.0.1:0", "--data", data, "--topics", "t", "--partitions", strconv.Itoa(tt.first))
			b.stop(t)
			// The variable, as README's ORDERLY_PARTITIONS, and a new
			// topic beside the kept one.
			b = startBrokerProc(t, []string{"ORDERLY_PARTITIONS=" + strconv.Itoa(tt.then)}, "--addr", "127.0.0.1:0", "--data", data, "--topics", "t,u")
			if !slices.Contains(strings.Split(b.out.text(), "\n"), tt.want) {
				t.Errorf("restart printed:\n%s\nwant the line %q", b.out.text(), tt.want)
			}
			parts := topicPartitions(t, b.addr)
			if want := map[string]int{"t": tt.first, "u": tt.then}; parts["t"] != want["t"] || parts["u"] != want["u"] {
				t.Errorf("after the restart: got partitions %v, want %v", parts, want)
			}
			b.stop(t)
		})
	}
}

// TestBrokerBannerListsReloaded: a broker restarted on its --data with
// other --topics lists, at start, every topic it serves: those of
// --topics and those it reloaded, each with its partitions. It listed
// only --topics.
func TestBrokerBannerListsReloaded(t *testing.T) {
	data := t.TempDir()
	b := startBrokerProc(t, nil, "--addr", "127.0.0.1:0", "--data", data, "--topics", "kept", "--partitions", "1")
	b.stop(t)
	b = startBrokerProc(t, nil, "--addr", "127.0.0.1:0", "--data", data, "--topics", "new", "--partitions", "3")
	var got []string
	for _, line := range strings.Split(b.out.text(), "\n") {
		if strings.HasPrefix(line, "topic: ") {
			got = append(got, line)
		}
	}
	if want := []string{"topic: new (3 partitions)", "topic: kept (1 partition, from --data)"}; !slices.Equal(got, want) {
		t.Errorf("restart's topic lines: got %q, want %q", got, want)
	}
	if parts := topicPartitions(t, b.addr); len(parts) != 2 || parts["kept"] != 1 || parts["new"] != 3 {
		t.Errorf("after the restart: got partitions %v, want kept 1, new 3", parts)
	}
	b.stop(t)
}

// TestBrokerDataLocked: a second `orderly broker` on the --data of a
// running one is refused (exit 1, naming the directory's lock file and
// the running broker's process ID) before it listens; it started and both
// wrote the same partition logs, which after a restart held offsets
// 0..99 and then 0..4 again. The first broker serves on.
func TestBrokerDataLocked(t *testing.T) {
	data := t.TempDir()
	first := startBrokerProc(t, nil, "--addr", "127.0.0.1:0", "--data", data, "--partitions", "1", "--topics", "t")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orderlyBin(t), "broker", "--addr", "127.0.0.1:0", "--data", data, "--partitions", "1", "--topics", "t")
	cmd.Env = procEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	second := readLines(stdout)
	select {
	case <-second.ready:
		t.Fatalf("a second broker on the same --data started:\n%s", second.text())
	case <-second.done:
	case <-ctx.Done():
		t.Fatalf("a second broker on the same --data neither started nor ended in a minute:\n%s", second.text())
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitError {
		t.Errorf("second broker: exit status %d, want %d", code, exitError)
	}
	lock := filepath.Join(data, broker.LockFile)
	want := fmt.Sprintf("orderly: --data %s: in use (another orderly broker?): process %d holds the lock %s\n", data, first.cmd.Process.Pid, lock)
	if stderr.String() != want {
		t.Errorf("second broker's error: got %q, want %q", stderr.String(), want)
	}
	if parts := topicPartitions(t, first.addr); parts["t"] != 1 {
		t.Errorf("first broker after the refusal: partitions %v, want t with 1", parts)
	}
	first.stop(t)
}

// TestBrokerKillRestart: README's kill-and-restart workflow. A broker
// started at once after a kill -9 of the one before on the same --data
// gets the data directory's lock (it waits for the kernel to tear the
// killed one down instead of refusing it), round after round, and finds
// what the killed one held: the next offset follows on.
func TestBrokerKillRestart(t *testing.T) {
	data := t.TempDir()
	args := []string{"--addr", "127.0.0.1:0", "--data", data, "--partitions", "1", "--topics", "t"}
	b := startBrokerProc(t, nil, args...)
	const rounds, per = 3, 20
	for round := range rounds {
		produceTo(t, b.addr, "t", per)
		if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := b
		b = startBrokerProc(t, nil, args...) // not waiting for the killed one
		<-killed.out.done
		killed.cmd.Wait()
		c := saramaClient(t, b.addr)
		hw, err := c.GetOffset("t", 0, sarama.OffsetNewest)
		c.Close()
		if want := int64(per * (round + 1)); err != nil || hw != want {
			t.Fatalf("round %d: after the restart the high watermark is %d (%v), want %d", round, hw, err, want)
		}
	}
	b.stop(t)
}

// produceTo produces n records to partition 0 of topic at addr.
func produceTo(t *testing.T, addr, topic string, n int) {
	t.Helper()
	cfg := group.DefaultSarama()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
}
