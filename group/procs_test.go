package group

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
	"github.com/orderly-go/orderly/internal/proctest"
)

// Processes for the multi-process scenarios (3, 4, 11): `orderly broker`
// built from cmd/orderly, and consumer processes that are this test binary
// run again as TestScenarioChild, logging every completion to a file
// before Do returns (one write per batch, so it survives SIGKILL) for the
// oracle to read afterwards.

// brokerProc runs `orderly broker --data dir` on addr (port 0: a free
// one) and returns once it printed "ready", with its address.
func brokerProc(t *testing.T, bin, addr, dir, topic string, partitions int) (*proctest.Proc, string) {
	t.Helper()
	return proctest.StartBroker(t, bin, "--addr", addr, "--data", dir, "--topics", topic, "--partitions", strconv.Itoa(partitions))
}

// brokerCommits reads group's commits on topic (offset and metadata) from
// the brokers over the wire.
func brokerCommits(admin sarama.ClusterAdmin, group, topic string) (map[int32]broker.Commit, error) {
	resp, err := admin.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		return nil, err
	}
	out := map[int32]broker.Commit{}
	for p, b := range resp.Blocks[topic] {
		if b.Err == sarama.ErrNoError && b.Offset >= 0 {
			out[p] = broker.Commit{Offset: b.Offset, Metadata: b.Metadata}
		}
	}
	return out, nil
}

// sampleCommits feeds the oracle what the brokers hold every 50 ms, until
// the returned stop is called.
func sampleCommits(t *testing.T, o *oracle, admin sarama.ClusterAdmin, group string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			// A sample stands for the time its answer came: a commit it
			// shows may have been made while the request was under way,
			// covering work finished after the request went out.
			if c, err := brokerCommits(admin, group, o.topic); err == nil {
				o.sample(c, time.Now())
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// childOpts configures one TestScenarioChild process.
type childOpts struct {
	brokers  []string
	topic    string
	group    string
	log      string // completions log
	tag      string // member name in the oracle
	instance string // static membership: Config.InstanceID
	park     string // a DataPath: Unordered, parking deferred messages, dead letters to the local store
}

func startScenarioChild(t *testing.T, o childOpts) *proctest.Proc {
	t.Helper()
	// -test.v: the child's log lines reach its .stderr file as they are
	// written, so that a killed child's are kept too.
	cmd := exec.Command(os.Args[0], "-test.run=^TestScenarioChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		"ORDERLY_SC_CHILD=1",
		"ORDERLY_SC_BROKERS="+strings.Join(o.brokers, ","),
		"ORDERLY_SC_TOPIC="+o.topic,
		"ORDERLY_SC_GROUP="+o.group,
		"ORDERLY_SC_LOG="+o.log,
		"ORDERLY_SC_TAG="+o.tag,
		"ORDERLY_SC_INSTANCE="+o.instance,
		"ORDERLY_SC_PARK="+o.park)
	logf, err := os.Create(o.log + ".stderr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			logChildWarnings(t, o.tag, o.log+".stderr")
		}
	})
	cmd.Stdout, cmd.Stderr = logf, logf
	return proctest.Start(t, cmd)
}

// logChildWarnings logs the warnings and errors a child process logged
// (the first 20), for a failed test: its log files go with t.TempDir.
func logChildWarnings(t *testing.T, tag, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("consumer %s: %v", tag, err)
		return
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if !strings.Contains(line, "\tWARN\t") && !strings.Contains(line, "\tERROR\t") {
			continue
		}
		if n++; n <= 20 {
			t.Logf("consumer %s: %s", tag, strings.TrimSpace(line))
		}
	}
	if n > 20 {
		t.Logf("consumer %s: %d more warnings", tag, n-20)
	}
}

// waitReady waits until the child logging to log handles SIGTERM as a
// graceful stop (a SIGTERM before that kills it).
func waitReady(t *testing.T, log string) {
	t.Helper()
	waitFor(t, time.Minute, "the consumer process "+log+" to start", func() bool {
		_, err := os.Stat(log + ".ready")
		return err == nil
	})
}

// parkFate is what the park-mode child does with a message: 1 in 20 is
// deferred by 300 ms (parked on disk) the first time a process sees it, 1
// in 100 fails every time (dead-lettered after 3 attempts), the rest
// succeed.
func parkFate(p int32, off int64) (deferred, poison bool) {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", p, off)
	v := h.Sum32() % 100
	return v < 5, v == 99
}

// TestScenarioChild is a consumer process of the multi-process scenarios.
// Log lines: "d p off key seq attempt gen unixnano" for each message Do
// finished, "x p off attempt unixnano" for a failed attempt (park mode),
// "q p off unixnano" for a deferral (park mode).
func TestScenarioChild(t *testing.T) {
	if os.Getenv("ORDERLY_SC_CHILD") != "1" {
		t.Skip("only run as a child process of the multi-process scenarios")
	}
	f, err := os.OpenFile(os.Getenv("ORDERLY_SC_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// From here on SIGTERM is a graceful stop: say so (see waitReady).
	if err := os.WriteFile(os.Getenv("ORDERLY_SC_LOG")+".ready", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	topic := os.Getenv("ORDERLY_SC_TOPIC")
	cfg := fastConfig(t, strings.Split(os.Getenv("ORDERLY_SC_BROKERS"), ","), topic, os.Getenv("ORDERLY_SC_GROUP"))
	cfg.Sarama.ClientID = "orderly-" + os.Getenv("ORDERLY_SC_TAG")
	cfg.InstanceID = os.Getenv("ORDERLY_SC_INSTANCE")
	if cfg.InstanceID != "" {
		// kfake (pinned) miscounts the members it waits for when a static
		// member rejoins while its killed predecessor waits in SyncGroup:
		// the next rebalance then ends only when the rebalance timeout runs
		// out, and members waiting in JoinGroup that long outlive their
		// session (6 s) and are dropped unanswered, their last work
		// uncommitted. A kill-and-restart every 0.4-0.8 s meets that
		// often. A 3 s timeout ends such a rebalance before any session.
		cfg.Sarama.Consumer.Group.Rebalance.Timeout = 3 * time.Second
	}
	cfg.Size, cfg.Num, cfg.Ticker = 8, 4, 5*time.Millisecond
	park := os.Getenv("ORDERLY_SC_PARK")
	if park != "" {
		cfg.Ordering, cfg.DataPath = Unordered, park
		cfg.Size = 4
		cfg.Retry = Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: 3}
	}
	var g *Group[*Message]
	var mu sync.Mutex                // one write per call, in order
	deferredHere := map[tpOff]bool{} // a deferral is not charged an attempt: defer each message once per process
	g = newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		time.Sleep(time.Millisecond)
		now := time.Now().UnixNano()
		var be BatchError
		buf := make([]byte, 0, 64*len(batch))
		gens := map[int32]int32{}
		for i, m := range batch {
			if park != "" {
				deferred, poison := parkFate(m.Partition, m.Offset)
				switch {
				case poison:
					buf = fmt.Appendf(buf, "x %d %d %d %d\n", m.Partition, m.Offset, m.Attempt, now)
					be.Fail(i, errors.New("poison: fails every time"))
					continue
				case deferred:
					mu.Lock()
					again := deferredHere[tpOff{m.Partition, m.Offset}]
					deferredHere[tpOff{m.Partition, m.Offset}] = true
					mu.Unlock()
					if !again {
						buf = fmt.Appendf(buf, "q %d %d %d\n", m.Partition, m.Offset, now)
						be.Defer(i, 300*time.Millisecond)
						continue
					}
				}
			}
			key, seq, _, _, err := ledger.Decode(m.Value)
			if err != nil {
				return err
			}
			gen, ok := gens[m.Partition]
			if !ok {
				if c := claimOf(g, m.Topic, m.Partition); c != nil {
					gen = c.sess.GenerationID()
				}
				gens[m.Partition] = gen
			}
			buf = fmt.Appendf(buf, "d %d %d %d %d %d %d %d\n", m.Partition, m.Offset, key, seq, m.Attempt, gen, now)
		}
		mu.Lock()
		_, err := f.Write(buf)
		mu.Unlock()
		if err != nil {
			return err
		}
		return be.Err()
	})
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// childLog is what one child process logged.
type childLog struct {
	tag      string
	done     []logDone           // completions, in the order logged
	deferred map[tpOff]time.Time // first deferral
	failed   map[tpOff]failure
}

// logDone is one completion in a child's log.
type logDone struct {
	p        int32
	off      int64
	key, seq uint32
	attempt  int
	gen      int32
	at       time.Time
}

// failure is a message's failed attempts in a child's log.
type failure struct {
	attempts    int       // the most attempts seen
	first, last time.Time // when the first and the last of them failed
}

// readChildLog reads what the child tag logged to path (nothing if it
// never started); a line the kill cut short is left out, any other line
// that does not parse fails the test.
func readChildLog(t *testing.T, tag, path string) childLog {
	t.Helper()
	out := childLog{tag: tag, deferred: map[tpOff]time.Time{}, failed: map[tpOff]failure{}}
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return out
		}
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if !strings.HasSuffix(line, "\n") {
			break // cut short by the kill
		}
		var d logDone
		var ns int64
		switch line[0] {
		case 'd':
			_, err = fmt.Sscanf(line, "d %d %d %d %d %d %d %d", &d.p, &d.off, &d.key, &d.seq, &d.attempt, &d.gen, &ns)
			d.at = time.Unix(0, ns)
			out.done = append(out.done, d)
		case 'x':
			_, err = fmt.Sscanf(line, "x %d %d %d %d", &d.p, &d.off, &d.attempt, &ns)
			at, k := time.Unix(0, ns), tpOff{d.p, d.off}
			f := out.failed[k]
			if f.first.IsZero() || at.Before(f.first) {
				f.first = at
			}
			if d.attempt >= f.attempts {
				f.attempts, f.last = d.attempt, at
			}
			out.failed[k] = f
		case 'q':
			_, err = fmt.Sscanf(line, "q %d %d %d", &d.p, &d.off, &ns)
			if _, ok := out.deferred[tpOff{d.p, d.off}]; !ok {
				out.deferred[tpOff{d.p, d.off}] = time.Unix(0, ns)
			}
		default:
			err = errors.New("unknown record")
		}
		if err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
	}
	return out
}

// feedLogs gives the oracle the completions of every log in the order
// they happened (each log's own order kept for equal times): the lane
// order check looks at each key's first completions in that order, and a
// log read after another may hold earlier completions.
func feedLogs(o *oracle, logs []childLog) {
	type entry struct {
		tag string
		d   logDone
	}
	var all []entry
	for _, l := range logs {
		for _, d := range l.done {
			all = append(all, entry{l.tag, d})
		}
	}
	slices.SortStableFunc(all, func(a, b entry) int { return a.d.at.Compare(b.d.at) })
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range all {
		o.doneLocked(e.tag, e.d.gen, e.d.p, e.d.off, e.d.attempt, e.d.key, e.d.seq, e.d.at)
	}
}
