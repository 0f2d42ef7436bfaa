package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
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
	"github.com/orderly-go/orderly/internal/loadgen"
)

// lockedBuffer is a bytes.Buffer a process's output is copied into while
// a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// consumeProc is an `orderly consume` process a test started.
type consumeProc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
}

// startConsume starts the orderly binary with `consume` and args; the
// process is killed at the end of the test if it still runs.
func startConsume(t *testing.T, args ...string) *consumeProc {
	t.Helper()
	return startConsumeWith(t, nil, args...)
}

// startConsumeWith is startConsume with the ORDERLY_* variables vars.
func startConsumeWith(t *testing.T, vars []string, args ...string) *consumeProc {
	t.Helper()
	p := &consumeProc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(orderlyBin(t), append([]string{"consume"}, args...)...)
	p.cmd.Env = procEnv(vars...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends sig and waits (up to a minute) for the process to end; it
// returns the exit code.
func (p *consumeProc) stop(sig syscall.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	return p.wait(time.Minute)
}

// wait waits for the process to end by itself and returns its exit code.
func (p *consumeProc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("orderly consume did not end within %v\nstdout:\n%s\nstderr:\n%s", d, p.stdout.String(), p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// output is the process's stdout and stderr, for failure messages.
func (p *consumeProc) output() string {
	return "stdout:\n" + p.stdout.String() + "\nstderr:\n" + p.stderr.String()
}

// waitFor polls cond every 20ms until it holds, failing the test after d
// or if the process ends first.
func (p *consumeProc) waitFor(d time.Duration, what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		select {
		case <-p.done:
			p.t.Fatalf("orderly consume ended before %s (exit %d)\n%s", what, p.cmd.ProcessState.ExitCode(), p.output())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %s within %v\n%s", what, d, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCommitted waits until group's committed offsets on topic are at
// the high watermarks.
func (p *consumeProc) waitCommitted(b *broker.Broker, group, topic string) {
	p.t.Helper()
	p.waitFor(90*time.Second, "commit at the high watermarks", func() bool { return b.CaughtUp(group, topic) })
}

// finalFigures reads the "name N" pairs of consume's final line.
func finalFigures(t *testing.T, stdout string) map[string]float64 {
	t.Helper()
	var line string
	for l := range strings.Lines(stdout) {
		if strings.HasPrefix(l, "orderly consume: stopped") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no final line in stdout:\n%s", stdout)
	}
	out := map[string]float64{}
	for _, m := range figureRE.FindAllStringSubmatch(line, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("figure %q in %q: %v", m[0], line, err)
		}
		out[m[1]] = v
	}
	return out
}

var figureRE = regexp.MustCompile(`([a-z_][a-z_ -]*?) (-?[0-9.]+)s?\b`)

// wantFigures compares some figures of the final line.
func wantFigures(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		if g, ok := got[k]; !ok || g != want[k] {
			t.Errorf("final line: %s got %v (present %v), want %v", k, g, ok, want[k])
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// produceKeyed produces n records to topic: key fmt.Sprintf("k%02d",
// i%keys), value fmt.Sprintf("v%d", i).
func produceKeyed(t *testing.T, b *broker.Broker, topic string, n, keys int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := loadgen.Produce(ctx, b.Addrs(), topic, n, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "k%02d", i%keys), Value: fmt.Appendf(nil, "v%d", i)}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// newTopic starts a broker with topic of parts partitions.
func newTopic(t *testing.T, topic string, parts int32) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// produceRecords produces recs to topic with a sync producer (keys,
// values and headers as given).
func produceRecords(t *testing.T, b *broker.Broker, recs ...*sarama.ProducerMessage) {
	t.Helper()
	cfg := group.DefaultSarama()
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(b.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SendMessages(recs); err != nil {
		t.Fatal(err)
	}
}
