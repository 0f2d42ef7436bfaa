package group

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/internal/ledger"
)

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, GroupID: "g"}
	do := func(context.Context, []*Message) error { return nil }
	slowRebalance := sarama.NewConfig()
	slowRebalance.Consumer.Group.Rebalance.Timeout = time.Second
	badSarama := sarama.NewConfig()
	badSarama.Consumer.Group.Session.Timeout = 0
	tests := []struct {
		name  string
		edit  func(c *Config)
		field string
	}{
		{"no brokers", func(c *Config) { c.Brokers = nil }, "Brokers"},
		{"empty broker", func(c *Config) { c.Brokers = []string{"a:1", ""} }, "Brokers[1]"},
		{"no topics", func(c *Config) { c.Topics = nil }, "Topics"},
		{"empty topic", func(c *Config) { c.Topics = []string{""} }, "Topics[0]"},
		{"no group", func(c *Config) { c.GroupID = "" }, "GroupID"},
		{"negative Size", func(c *Config) { c.Size = -1 }, "Size"},
		{"negative Num", func(c *Config) { c.Num = -3 }, "Num"},
		{"negative Chan", func(c *Config) { c.Chan = -1 }, "Chan"},
		{"negative MaxInFlight", func(c *Config) { c.MaxInFlight = -1 }, "MaxInFlight"},
		{"negative backoff", func(c *Config) { c.Retry.Backoff = -time.Second }, "Retry.Backoff"},
		{"max backoff below backoff", func(c *Config) { c.Retry = Retry{Backoff: time.Second, MaxBackoff: time.Millisecond} }, "Retry.MaxBackoff"},
		{"negative drain", func(c *Config) { c.DrainTimeout = -1 }, "DrainTimeout"},
		{"drain not below rebalance timeout", func(c *Config) { c.Sarama, c.DrainTimeout = slowRebalance, 2*time.Second }, "DrainTimeout"},
		{"bad commit metadata size", func(c *Config) { c.CommitMetadata = -2 }, "CommitMetadata"},
		{"invalid sarama config", func(c *Config) { c.Sarama = badSarama }, "Sarama"},
		{"negative MaxInFlightBytes", func(c *Config) { c.MaxInFlightBytes = -1 }, "MaxInFlightBytes"},
		// Sizes no machine can allocate: a clear error, never a panic or
		// an out-of-memory kill.
		{"huge Size", func(c *Config) { c.Size = 1 << 40 }, "Size"},
		{"huge Num", func(c *Config) { c.Num = 1 << 30 }, "Num"},
		{"Num*Size too large", func(c *Config) { c.Num, c.Size = 1<<15, 1<<15 }, "Num"},
		{"huge Chan", func(c *Config) { c.Chan = 1 << 40 }, "Chan"},
		{"huge MaxInFlight", func(c *Config) { c.MaxInFlight = 1 << 40 }, "MaxInFlight"},
		{"Size just past the bound", func(c *Config) { c.Size = MaxSize + 1 }, "Size"},
		{"Num just past the bound", func(c *Config) { c.Num = MaxNum + 1 }, "Num"},
		{"bad OnOffsetReset", func(c *Config) { c.OnOffsetReset = ResetRefuse + 1 }, "OnOffsetReset"},
		{"InstanceID with a space", func(c *Config) { c.InstanceID = "pod 1" }, "InstanceID"},
		{"InstanceID too long", func(c *Config) { c.InstanceID = strings.Repeat("a", 250) }, "InstanceID"},
		{"InstanceID set twice, differently", func(c *Config) {
			sc := DefaultSarama()
			sc.Consumer.Group.InstanceId = "a"
			c.Sarama, c.InstanceID = sc, "b"
		}, "InstanceID"},
		{"jitter above 1", func(c *Config) { c.Retry.Jitter = 1.5 }, "Retry.Jitter"},
		{"negative MaxAttempts", func(c *Config) { c.Retry.MaxAttempts = -1 }, "Retry.MaxAttempts"},
		// A dead-letter queue in memory would lose what it holds.
		{"MaxAttempts with nowhere to dead-letter", func(c *Config) { c.Retry.MaxAttempts = 3 }, "Retry.MaxAttempts"},
		{"Ordering out of range", func(c *Config) { c.Ordering = Unordered + 1 }, "Ordering"},
		{"Status.Window below 2", func(c *Config) { c.Status.Window = 1 }, "Status.Window"},
		{"Status.Window above 1000", func(c *Config) { c.Status.Window = 1001 }, "Status.Window"},
		{"negative Status.StuckHead", func(c *Config) { c.Status.StuckHead = -time.Second }, "Status"},
		{"Status.ReadBack below 10ms", func(c *Config) { c.Status.ReadBack = time.Millisecond }, "Status.ReadBack"},
		{"negative ParkAfter", func(c *Config) { c.ParkAfter = -time.Second }, "ParkAfter"},
		// Settings that would do nothing, or harm, as given.
		{"jitter NaN", func(c *Config) { c.Retry.Jitter = math.NaN() }, "Retry.Jitter"},
		{"ParkAfter with OrderLanes", func(c *Config) { c.ParkAfter, c.DataPath = time.Second, "/tmp/x" }, "ParkAfter"},
		{"ParkAfter without a DataPath", func(c *Config) { c.ParkAfter, c.Ordering = time.Second, Unordered }, "ParkAfter"},
		{"dead letters to a source topic", func(c *Config) { c.DeadLetterTopic = "t" }, "DeadLetterTopic"},
		{"no rebalance timeout", func(c *Config) {
			sc := sarama.NewConfig()
			sc.Consumer.Group.Rebalance.Timeout = 0
			c.Sarama = sc
		}, "Rebalance.Timeout"},
		{"no commit interval", func(c *Config) {
			sc := sarama.NewConfig()
			sc.Consumer.Offsets.AutoCommit.Interval = 0
			c.Sarama = sc
		}, "AutoCommit.Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			_, err := New(cfg, Handler[*Message]{Do: do})
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("New: got %v, want an ErrConfig naming %s", err, tt.field)
			}
		})
	}
	t.Run("nil Do", func(t *testing.T) {
		if _, err := New(good, Handler[*Message]{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Do") {
			t.Fatalf("New: got %v, want an ErrConfig naming Do", err)
		}
	})
	t.Run("nil New with a non-Message type", func(t *testing.T) {
		_, err := New(good, Handler[string]{Do: func(context.Context, []string) error { return nil }})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "New") {
			t.Fatalf("New: got %v, want an ErrConfig naming New", err)
		}
	})
	t.Run("bounds accepted", func(t *testing.T) {
		for name, edit := range map[string]func(c *Config){
			"jitter 1":                             func(c *Config) { c.Retry.Jitter = 1 },
			"MaxAttempts with a dead-letter topic": func(c *Config) { c.Retry.MaxAttempts, c.DeadLetterTopic = 3, "dlq" },
			"Status.Window 2 and ReadBack never":   func(c *Config) { c.Status.Window, c.Status.ReadBack = 2, -1 },
		} {
			cfg := good
			edit(&cfg)
			if _, err := New(cfg, Handler[*Message]{Do: do}); err != nil {
				t.Errorf("%s: New: got %v, want it accepted", name, err)
			}
		}
	})
	t.Run("largest accepted", func(t *testing.T) {
		cfg := good
		cfg.Size, cfg.Num, cfg.Chan, cfg.MaxInFlight = MaxSize, 16, MaxChan, MaxMaxInFlight
		if _, err := New(cfg, Handler[*Message]{Do: do}); err != nil {
			t.Fatalf("New at the bounds: %v", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		g := newGroup(t, good, do)
		c := g.cfg
		if c.Size != 1024 || c.Num != 32 || c.Ticker != 100*time.Millisecond || c.Chan != 1024 || c.MaxInFlight != 65536 {
			t.Fatalf("defaults: got Size %d Num %d Ticker %v Chan %d MaxInFlight %d, want 1024 32 100ms 1024 65536",
				c.Size, c.Num, c.Ticker, c.Chan, c.MaxInFlight)
		}
		if c.Sarama.Consumer.Offsets.Initial != sarama.OffsetOldest || c.Sarama.ChannelBufferSize != 1024 {
			t.Fatalf("sarama defaults: got initial %d buffer %d, want OffsetOldest and Chan", c.Sarama.Consumer.Offsets.Initial, c.Sarama.ChannelBufferSize)
		}
		if c.MaxInFlightBytes != 64<<20 || c.Sarama.Consumer.Offsets.AutoCommit.Enable || c.Sarama.Metadata.AllowAutoTopicCreation {
			t.Fatalf("defaults: got MaxInFlightBytes %d, sarama auto-commit %v, topic creation %v; want 64 MiB, false, false",
				c.MaxInFlightBytes, c.Sarama.Consumer.Offsets.AutoCommit.Enable, c.Sarama.Metadata.AllowAutoTopicCreation)
		}
		if c.DrainTimeout >= c.Sarama.Consumer.Group.Rebalance.Timeout {
			t.Fatalf("DrainTimeout %v not below the rebalance timeout %v", c.DrainTimeout, c.Sarama.Consumer.Group.Rebalance.Timeout)
		}
	})
}

func TestUnreachableBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	sc := sarama.NewConfig()
	sc.Metadata.Retry.Max = 1
	sc.Metadata.Retry.Backoff = 10 * time.Millisecond
	g, err := New(Config{Brokers: []string{addr}, Topics: []string{"t"}, GroupID: "g", Sarama: sc},
		Handler[*Message]{Do: func(context.Context, []*Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Run(context.Background())
	if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Run: got %v, want ErrConnect naming %s", err, addr)
	}
	if err := g.Run(context.Background()); !errors.Is(err, ErrRunTwice) {
		t.Fatalf("second Run: got %v, want ErrRunTwice", err)
	}
}

// TestRunStopsWhileConnecting: a broker that accepts connections and never
// answers holds sarama's connect for Net.ReadTimeout per try; a ctx that
// ends meanwhile ends Run soon after, cleanly (nil), with nothing left
// running (leakcheck). Run went on for minutes (the API prober: 2m50s
// after a 1 s ctx).
func TestRunStopsWhileConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		mu.Unlock()
	})
	g, err := New(Config{Brokers: []string{ln.Addr().String()}, Topics: []string{"t"}, GroupID: "g"},
		Handler[*Message]{Do: func(context.Context, []*Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- g.Run(ctx) }()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run stopped while connecting: got %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run still connecting %v after its ctx (500ms) ended", time.Since(start).Round(time.Second))
	}
}

// observed returns a logger whose Warn+ entries the test can inspect.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.WarnLevel)
	return zap.New(core), logs
}

// logged reports whether an entry with msg carries every field given.
func logged(logs *observer.ObservedLogs, msg string, fields map[string]any) bool {
	for _, e := range logs.FilterMessage(msg).All() {
		ctx := e.ContextMap()
		ok := true
		for k, v := range fields {
			if ctx[k] != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestPoisonMessagesSkipped: New fails for some messages; each is counted
// (DecodeErrors, and DeadLetterSkipped: no destination, which it was not
// counted in) and skipped past (committed), the log names them by topic/partition/
// offset (at most one line a second, the lines held back counted in the
// next), and everything else is handled.
func TestPoisonMessagesSkipped(t *testing.T) {
	const n, keys = 20_000, 100
	r := newRig(t, "poison", 3, n, keys)
	logger, logs := observed()
	w := r.work(0, 0)
	cfg := r.config("poison")
	cfg.Logger = logger
	var poisoned atomic.Int64
	var poisonMu sync.Mutex
	poisonAt := map[[2]int64]bool{} // partition, offset
	g, err := New(cfg, Handler[*Message]{
		New: func(m *Message) (*Message, error) {
			_, seq, _, _, err := ledger.Decode(m.Value)
			if err != nil {
				return nil, err
			}
			if seq%50 == 7 {
				poisoned.Add(1)
				poisonMu.Lock()
				poisonAt[[2]int64{int64(m.Partition), m.Offset}] = true
				poisonMu.Unlock()
				return nil, errors.New("cannot parse transfer")
			}
			return m, nil
		},
		Do: func(ctx context.Context, batch []*Message) error { return w.Do(ctx, batch) },
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if st.DecodeErrors != poisoned.Load() || st.DecodeErrors == 0 || st.DeadLetterSkipped != st.DecodeErrors {
		t.Fatalf("DecodeErrors %d, DeadLetterSkipped %d: want both %d (> 0)", st.DecodeErrors, st.DeadLetterSkipped, poisoned.Load())
	}
	if st.Handled != int64(n)-poisoned.Load() {
		t.Fatalf("handled: got %d, want %d", st.Handled, int64(n)-poisoned.Load())
	}
	rep := r.ledger.Report()
	if rep.Lost != int(poisoned.Load()) || rep.Duplicates != 0 {
		t.Fatalf("ledger: got lost %d duplicates %d, want exactly the %d poisoned and none", rep.Lost, rep.Duplicates, poisoned.Load())
	}
	r.checkFinalCommits(cfg.GroupID)
	lines := logs.FilterMessage("decode failed; message skipped (no dead-letter destination)").All()
	var reported int64
	for _, e := range lines {
		ctx := e.ContextMap()
		part, _ := ctx["partition"].(int32)
		off, _ := ctx["offset"].(int64)
		if ctx["topic"] != "poison" || !poisonAt[[2]int64{int64(part), off}] {
			t.Fatalf("decode failure logged for %v/%v offset %v: got no poisoned message there", ctx["topic"], ctx["partition"], ctx["offset"])
		}
		s, _ := ctx["suppressed"].(int64)
		reported += 1 + s
	}
	if len(lines) == 0 || reported > poisoned.Load() {
		t.Fatalf("decode failures logged: got %d lines reporting %d, want at least 1 and at most the %d poisoned", len(lines), reported, poisoned.Load())
	}
}

// TestDoPanicRecovered: Do panics on the first attempt of some batches; the
// panic is recovered, logged with the batch's position, counted, and the
// batch retried in order.
func TestDoPanicRecovered(t *testing.T) {
	const n, keys = 10_000, 50
	r := newRig(t, "panics", 2, n, keys)
	logger, logs := observed()
	w := r.work(0, 0)
	cfg := r.config("panics")
	cfg.Logger = logger
	cfg.Size = 16
	var panicked atomic.Int64
	g, err := New(cfg, Handler[*Message]{Do: func(ctx context.Context, batch []*Message) error {
		if batch[0].Attempt == 1 && batch[0].Offset%7 == 0 {
			panicked.Add(1)
			var m map[string]int
			m["boom"]++ // a real nil-map panic
		}
		return w.Do(ctx, batch)
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
	st := g.Stats()
	if st.Panics != panicked.Load() || st.Panics == 0 || st.Failures < st.Panics {
		t.Fatalf("stats: got panics %d failures %d, want %d panics (> 0)", st.Panics, st.Failures, panicked.Load())
	}
	entries := logs.FilterMessage("Do failed; its failing items are retried or dead-lettered").All()
	if len(entries) == 0 {
		t.Fatal("no failure logged")
	}
	ctx := entries[0].ContextMap()
	if ctx["topic"] != "panics" || ctx["attempt"] != int64(1) || !strings.Contains(ctx["error"].(string), "panicked") ||
		strings.Contains(ctx["error"].(string), ErrTimeout.Error()) {
		t.Fatalf("failure log fields: got %v, want topic, attempt 1 and the panic (not a timeout)", ctx)
	}
	if _, ok := ctx["partition"]; !ok {
		t.Fatalf("failure log has no partition: %v", ctx)
	}
	if _, ok := ctx["offset"]; !ok {
		t.Fatalf("failure log has no offset: %v", ctx)
	}
}

// seedCommit commits offset with meta for group on partition 0 of r's
// topic, as another consumer (or an earlier member) would have.
func seedCommit(t *testing.T, r *rig, group string, offset int64, meta string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(r.b.Addrs(), r.config("x").withDefaults().Sarama)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.AlterConsumerGroupOffsets(group, map[string]map[int32]sarama.OffsetAndMetadata{
		r.topic: {0: {Offset: offset, Metadata: meta}},
	}, nil); err != nil {
		t.Fatalf("seed a committed offset: %v", err)
	}
}

// TestCorruptCommitMetadata: a committed offset whose metadata claims to be
// orderly's but is corrupt is reported (naming topic/partition) and
// ignored: consumption resumes from the committed offset, nothing lost.
func TestCorruptCommitMetadata(t *testing.T) {
	const n, keys = 5000, 20
	r := newRig(t, "corrupt-meta", 1, n, keys)
	const start = 1000
	seedCommit(t, r, "corrupt", start, "orderly:!!not-base64")
	logger, logs := observed()
	w := r.work(0, 0)
	cfg := r.config("corrupt")
	cfg.Logger = logger
	g := newGroup(t, cfg, w.Do)
	stop := run(t, g)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := g.Stats().Handled; got != n-start {
		t.Fatalf("handled: got %d, want %d (from the committed offset on)", got, n-start)
	}
	if !logged(logs, "ignoring corrupt commit metadata", map[string]any{"topic": "corrupt-meta", "partition": int32(0), "offset": int64(start)}) {
		t.Fatalf("corrupt metadata not reported with its topic/partition/offset: %v", logs.All())
	}
}

// TestMetadataPastHighWatermark: commit metadata that lists offsets as
// finished beyond the partition's high watermark (a truncated log, or
// metadata not written for this partition) is cut at the high watermark,
// with a warning: the records written there later are handled, not
// skipped as finished. What it lists below the high watermark cannot be
// told from real and is skipped.
func TestMetadataPastHighWatermark(t *testing.T) {
	t.Parallel() // waits on the broker
	const first, more, keys, start = 20, 10, 5, 5
	plan := make([]planned, first+more)
	for i := range plan {
		plan[i] = planned{key: uint32(i % keys), part: -1}
	}
	r := newRigQuiet(t, "past-hw", 1, plan)
	r.produce(0, first)
	meta, _, _ := commit.EncodeWaitingMeta(start, nil, []commit.Range{{Start: 10, End: 1 << 40}}, 4096)
	seedCommit(t, r, "past-hw", start, meta)
	logger, logs := observed()
	cfg := r.config("past-hw")
	cfg.Logger = logger
	var handled atomic.Int64
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		handled.Add(int64(len(batch)))
		return nil
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "offsets 5-9 handled", func() bool { return handled.Load() == 10-start })
	r.produce(first, first+more)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := handled.Load(); got != 10-start+more {
		t.Fatalf("handled: got %d, want %d (5-9, then the %d written after the start; 10-19 listed finished)", got, 10-start+more, more)
	}
	if !logged(logs, "ignoring what the commit metadata lists at or above the high watermark, where no record had been written",
		map[string]any{"topic": "past-hw", "partition": int32(0), "offset": int64(start), "high_watermark": int64(first)}) {
		t.Fatalf("no warning naming topic/partition/offset and the high watermark: %v", logs.All())
	}
}

// TestConsumerErrorsRateLimited: a consumer error repeated for as long as
// its cause lasts logs at most one line a second per cause, the rest
// counted in the next line's suppressed; every one is counted in Stats.
func TestConsumerErrorsRateLimited(t *testing.T) {
	log, logs := observed()
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, GroupID: "limited", Logger: log}
	g := newGroup(t, cfg, func(context.Context, []*Message) error { return nil })
	for i := range 100 {
		for _, e := range []error{sarama.ErrNotLeaderForPartition, sarama.ErrRequestTimedOut} {
			if err := g.consumerError(&sarama.ConsumerError{Topic: "t", Partition: int32(i % 4), Err: e}); err != nil {
				t.Fatalf("consumerError(%v): got %v, want nil (retried)", e, err)
			}
		}
	}
	if got := logs.FilterMessage("consumer error").Len(); got < 2 || got > 4 {
		t.Fatalf("consumer error lines for 200 errors of 2 causes: got %d, want 2 (one per cause) to 4", got)
	}
	if st := g.Stats(); st.Errors != 200 {
		t.Fatalf("Stats.Errors: got %d, want 200", st.Errors)
	}
}

// TestSkippedCountedCommitted: a message that does not decode, skipped (no
// dead-letter destination) while nothing else is unfinished, is passed by
// the frontier at once, outside the completions the claim loop counts:
// Stats.Committed must count it too (the demo waits for Committed to reach
// what it produced).
func TestSkippedCountedCommitted(t *testing.T) {
	sc := DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 20 * time.Millisecond
	g, err := New(Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Sarama: sc, Size: 1, Num: 1},
		Handler[*Message]{
			New: func(m *Message) (*Message, error) {
				if m.Offset%2 == 1 {
					return nil, errors.New("cannot decode")
				}
				return m, nil
			},
			Do: func(context.Context, []*Message) error { return nil },
		})
	if err != nil {
		t.Fatal(err)
	}
	stop := startWorkers(t, g)
	defer stop()
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	c := &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, 4)}
	var claim sync.WaitGroup
	claim.Go(func() { _ = g.consume(sess, c) })
	defer func() { close(c.msgs); claim.Wait() }()
	for off := range int64(6) { // 0 handled, 1 skipped, ...
		c.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: []byte("k"), Value: []byte("v")}
		waitFor(t, 10*time.Second, fmt.Sprintf("offset %d behind the frontier", off), func() bool {
			return claimOf(g, "mem", 0) != nil && claimOf(g, "mem", 0).next.Load() == off+1
		})
	}
	waitFor(t, 10*time.Second, "Stats.Committed to count all 6", func() bool { return g.Stats().Committed == 6 })
	if st := g.Stats(); st.DecodeErrors != 3 || st.Handled != 3 {
		t.Fatalf("Stats: got %d decode errors, %d handled, want 3 and 3", st.DecodeErrors, st.Handled)
	}
}

// TestBurstEndsAtClose: a claim whose messages channel closes behind its
// buffered messages (a revoke) takes the burst and ends; the burst's last
// offset, not the closed channel's nil, is what it received last.
func TestBurstEndsAtClose(t *testing.T) {
	g := newGroup(t, Config{Brokers: []string{"mem:0"}, Topics: []string{"mem"}, GroupID: "mem", Size: 4, Num: 1},
		func(context.Context, []*Message) error { return nil })
	stop := startWorkers(t, g)
	defer stop()
	sess := &memSession{ctx: context.Background(), marked: map[int32]int64{}}
	c := &memClaim{p: 0, msgs: make(chan *sarama.ConsumerMessage, 4)}
	for off := range int64(3) {
		c.msgs <- &sarama.ConsumerMessage{Topic: "mem", Offset: off, Key: []byte("k"), Value: []byte("v")}
	}
	close(c.msgs) // before the claim loop reads: its burst meets the close
	if err := g.consume(sess, c); err != nil {
		t.Fatalf("consume: got %v, want nil", err)
	}
	if got := g.Stats().Fetched; got != 3 {
		t.Fatalf("Stats.Fetched: got %d, want 3", got)
	}
}

// TestRebalanceTimeoutLeavesReadBack: New refuses a rebalance timeout
// that, less an eighth, is not above the heartbeat interval (releaseWindow):
// a claim letting go could never read back its final commit in time, and
// every partition let go would be OnLost. sarama's own check (at least
// 1ms) comes after it; the smallest timeouts sarama accepts pass with a
// heartbeat interval to match.
func TestRebalanceTimeoutLeavesReadBack(t *testing.T) {
	do := func(context.Context, []*Message) error { return nil }
	for _, tt := range []struct {
		name                string
		rebalance, interval time.Duration
		refused             bool
	}{
		{"1ns", 1, 3 * time.Second, true},
		{"equal to the heartbeat interval", 3 * time.Second, 3 * time.Second, true},
		{"less an eighth just below it", 3400 * time.Millisecond, 3 * time.Second, true},
		{"less an eighth just above it", 3500 * time.Millisecond, 3 * time.Second, false},
		{"sarama's defaults", 60 * time.Second, 3 * time.Second, false},
		{"the smallest sarama accepts", 2 * time.Millisecond, time.Millisecond, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := DefaultSarama()
			sc.Consumer.Group.Rebalance.Timeout, sc.Consumer.Group.Heartbeat.Interval = tt.rebalance, tt.interval
			_, err := New(Config{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, GroupID: "g", Sarama: sc}, Handler[*Message]{Do: do})
			switch {
			case !tt.refused && err != nil:
				t.Fatalf("New: got %v, want it accepted", err)
			case tt.refused && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Sarama.Consumer.Group.Rebalance.Timeout") ||
				!strings.Contains(err.Error(), "Heartbeat.Interval")):
				t.Fatalf("New: got %v, want an ErrConfig naming Sarama.Consumer.Group.Rebalance.Timeout and its Heartbeat.Interval", err)
			}
		})
	}
}
