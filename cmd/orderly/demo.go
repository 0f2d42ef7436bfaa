package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// demoOpts are the demo's flags.
type demoOpts struct {
	brokers     []string
	topic       string
	group       string
	messages    int
	keys        int
	partitions  int
	zipf        float64
	poison      int
	rate        float64
	num         int
	size        int
	ticker      time.Duration
	maxInFlight int
	io          time.Duration
	ioItem      time.Duration
	fail        float64
	seed        uint64
	timeout     time.Duration
	progress    string
	logLevel    string

	msgTimeout     time.Duration
	statusWindow   int
	stuckHead      time.Duration
	stuckPartition int
	admin          adminOpts
	fs             *pflag.FlagSet
}

// Defaults of the traffic and the simulated I/O. The default run should
// last about 30s on 2 cores (long enough to watch, short enough to run
// often) and look like a live service rather than a backlog: the producer
// is paced at 7k transfers/s (200k take about 29s), and Do costs 1ms per
// call plus 1ms per transfer, so 64 workers could book about 60k
// transfers/s: the group keeps up and the latency report shows what a
// transfer waits in the pipeline (Ticker, a batch's I/O, retries), not in a
// backlog. --rate 0 produces as fast as possible instead.
const (
	defaultIO     = time.Millisecond
	defaultIOItem = time.Millisecond
	defaultRate   = 7000
)

// demoCommand is `orderly demo`; newRoot reuses it as the root command,
// so that `orderly` alone runs the demo with the same flags.
func demoCommand(e env) *cobra.Command {
	o := &demoOpts{}
	c := newCommand("demo", "(default) produce transfers to an embedded broker (or --brokers), consume them in order per account, report",
		`Produce account transfers to a topic and consume them with ordered parallelism:
an embedded Kafka-protocol broker unless --brokers names a real cluster. Do
books each transfer after a simulated I/O delay and fails a share of calls
(retried); a ledger checks that every produced transfer was booked once, in
order per account. The report says what happened; the exit status is not 0
if anything was lost, repeated or out of order, if the committed offsets
fall short, or if the run was interrupted.`,
		func(ctx context.Context) error { return runDemo(ctx, o, e.stdout, e.stderr) })
	fs := c.Flags()
	o.fs = fs
	listVar(fs, &o.brokers, "brokers", nil, false, dialAddr, "comma-separated host:port of a real cluster; empty: an embedded kfake broker")
	stringVar(fs, &o.topic, "topic", "orderly-demo", topicName, "topic to produce to and consume (created if missing)")
	stringVar(fs, &o.group, "group", "", nil, "consumer group id; empty: orderly-demo-<unix nanos>. Its offsets on --topic are set to the topic's end before producing")
	intVar(fs, &o.messages, "messages", 200_000, 1, 1<<31, "transfers to produce")
	intVar(fs, &o.keys, "keys", 10_000, 1, 1<<24, "accounts (Kafka keys, ordering lanes)")
	intVar(fs, &o.partitions, "partitions", 8, 1, 1<<16, "partitions of a topic the demo creates")
	floatVar(fs, &o.zipf, "zipf", 0, nonNegative, "Zipf exponent of the paying accounts (e.g. 1.1); 0: uniform")
	intVar(fs, &o.poison, "poison", 0, 0, math.MaxInt, "undecodable records to mix in (counted as decode errors, skipped, committed past)")
	floatVar(fs, &o.rate, "rate", defaultRate, nonNegative, "produce at most this many records per second; 0: as fast as possible (then latency includes waiting behind the backlog)")
	intVar(fs, &o.num, "num", 64, 1, group.MaxNum, "group Num: worker goroutines calling Do")
	intVar(fs, &o.size, "size", 64, 1, group.MaxSize, "group Size: most transfers per Do call")
	durationVar(fs, &o.ticker, "ticker", 10*time.Millisecond, math.MinInt64, "group Ticker: how long a partial batch waits; negative: never")
	intVar(fs, &o.maxInFlight, "max-in-flight", 0, 0, group.MaxMaxInFlight, "group MaxInFlight; 0: the group's default")
	durationVar(fs, &o.io, "io", defaultIO, 0, "simulated I/O time per Do call")
	durationVar(fs, &o.ioItem, "io-item", defaultIOItem, 0, "simulated I/O time per transfer in a Do call")
	floatVar(fs, &o.fail, "fail", 0.01, fraction, "fraction of Do calls that fail, in [0, 1): a failed batch is split to find its failing transfers (split calls), which are retried after a backoff (retries)")
	uint64Var(fs, &o.seed, "seed", 1, "seed of the traffic and the failures")
	durationVar(fs, &o.timeout, "timeout", 3*time.Minute, 1, "stop after this long, report what happened, exit 3")
	stringVar(fs, &o.progress, "progress", "auto", oneOf("auto", "on", "off"), "live progress: auto (on a terminal), on, off")
	stringVar(fs, &o.logLevel, "log-level", "", logLevel, "group log level to stderr (debug, info, warn, error); empty: no logs")
	durationVar(fs, &o.msgTimeout, "msg-timeout", group.DefaultMsgTimeout, 1, "group MsgTimeout: the deadline of Do's ctx; a call past it plus a grace (a tenth, 1s to 30s) counts as a stuck worker")
	intVar(fs, &o.statusWindow, "status-window", 10, 2, 1000, "group Status.Window: how many commit intervals (1s) the partition statuses look at")
	durationVar(fs, &o.stuckHead, "stuck-head", 30*time.Second, 1, "group Status.StuckHead: how long the frontier's record may stay unfinished before a status's reason names it")
	intVar(fs, &o.stuckPartition, "stuck-partition", -1, -1, 1<<16-1, "fault injection: the first Do call on a record of this partition hangs, ignoring its ctx, until the run ends (SIGINT, SIGTERM, --timeout), so the partition STALLs and a worker is stuck past --msg-timeout (with --size above 1 the call may hold other partitions' records too: use --size 1 to stall this one alone); the run cannot complete; -1: none")
	o.admin.flags(fs)
	return c
}

// dialAddr is a listVar check for a broker address.
func dialAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("must be host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("port must be a number in 1-65535")
	}
	return nil
}

// topicName is a stringVar check of a topic that must be given: not
// empty, and a name Kafka accepts (kafkaName).
func topicName(s string) error {
	if err := nonEmpty(s); err != nil {
		return err
	}
	return kafkaName(s)
}

// logLevel is a stringVar check: a zap level, or "" for none.
func logLevel(s string) error {
	if s == "" {
		return nil
	}
	if _, err := zapcore.ParseLevel(s); err != nil {
		return errors.New("must be debug, info, warn or error (or empty: no logs)")
	}
	return nil
}

// logger is the group's logger: --log-level and up to logs, or none.
func (o *demoOpts) logger(logs io.Writer) *zap.Logger {
	if o.logLevel == "" {
		return zap.NewNop()
	}
	lvl, _ := zapcore.ParseLevel(o.logLevel) // validated
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(logs)), lvl)
	return zap.New(core)
}

// groupMsgTimeout is the group's MsgTimeout from --msg-timeout: 0 (the
// group's default, which is the flag's) unless the flag or its variable
// set it, so that group.New warns only of a timeout the user chose (a
// drain capped below it, with sarama's rebalance timeout). Without a
// flag set (o.fs nil), as envVar and timeoutArg take it, nothing chose it.
func (o *demoOpts) groupMsgTimeout() time.Duration {
	if o.fs == nil || !o.fs.Changed("msg-timeout") {
		return 0
	}
	return o.msgTimeout
}

// runDemo is `orderly demo`: produce transfers, consume them with group,
// check the ledger and the committed offsets, print a report. It returns an
// error (so the exit code is non-zero) if anything was lost, repeated or out
// of order, if the committed offsets are not at the high watermarks, or if
// the run was interrupted (ctx ended: a signal, or --timeout).
func runDemo(ctx context.Context, o *demoOpts, out, logs io.Writer) (err error) {
	if o.num*o.size > group.MaxBatchSlots {
		return batchSlotsError(o.fs, o.num, o.size)
	}
	if err := o.admin.check(); err != nil {
		return err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("timed out after %s", flagArg(o.fs, "timeout", o.timeout)))
	defer cancel()

	p := newPlan(o.messages, o.keys, o.poison, o.zipf, o.seed)
	var c cluster
	where := "embedded broker"
	if len(o.brokers) > 0 {
		c, err = dialRemote(o.brokers, flagArg(o.fs, "brokers", strings.Join(o.brokers, ",")))
		where = "--brokers"
	} else {
		c, err = startEmbedded()
	}
	if err != nil {
		return err
	}
	defer c.close()
	parts, err := c.ensureTopic(o.topic, int32(o.partitions))
	if err != nil {
		return err
	}
	if o.stuckPartition >= int(parts) {
		return usagef("%s: %q has partitions 0 to %d", flagArg(o.fs, "stuck-partition", o.stuckPartition), o.topic, parts-1)
	}
	startOffs, err := c.highWatermarks(o.topic)
	if err != nil {
		return err
	}
	groupID := o.group
	if groupID == "" {
		groupID = fmt.Sprintf("orderly-demo-%d", time.Now().UnixNano())
	}
	if err := c.startAt(groupID, o.topic, startOffs); err != nil {
		return err
	}

	done := newFinished(startOffs)
	bank := newBank(p, done, o.io, o.ioItem, o.fail, o.seed)
	bank.stuckPartition, bank.release = int32(o.stuckPartition), ctx.Done()
	g, err := group.New(group.Config{
		Brokers:     c.addrs(),
		Topics:      []string{o.topic},
		GroupID:     groupID,
		Size:        o.size,
		Num:         o.num,
		Ticker:      o.ticker,
		MaxInFlight: o.maxInFlight,
		MsgTimeout:  o.groupMsgTimeout(),
		Status:      group.StatusConfig{Window: o.statusWindow, StuckHead: o.stuckHead},
		Logger:      o.logger(logs),
	}, group.Handler[Transfer]{New: p.decoder(done), Split: split, Do: bank.do})
	if err != nil {
		return err
	}
	keys := "uniform"
	if o.zipf > 0 {
		keys = fmt.Sprintf("zipf %.2f, busiest account %.1f%%", o.zipf, 100*p.hot)
	}
	fmt.Fprintf(out, "orderly demo: %d transfers over %d accounts (%s) to %q (%d partitions) on %s %s\n",
		o.messages, o.keys, keys, o.topic, parts, where, strings.Join(c.addrs(), ","))
	fmt.Fprintf(out, "group %s: Num %d, Size %d, Ticker %v; Do costs %v + %v per transfer, fails %.1f%% of calls\n",
		groupID, o.num, o.size, o.ticker, o.io, o.ioItem, 100*o.fail)
	if o.rate == 0 {
		fmt.Fprintln(out, "producing as fast as possible: latency includes waiting behind the backlog (--rate paces the producer)")
	} else {
		fmt.Fprintf(out, "producing %.0f transfers/s, like live traffic: throughput follows the producer (--rate 0: as fast as possible)\n", o.rate)
	}
	if o.stuckPartition >= 0 {
		fmt.Fprintf(out, "%s: the first Do call on it hangs until the run ends: SIGINT, SIGTERM or %s\n",
			flagArg(o.fs, "stuck-partition", o.stuckPartition), flagArg(o.fs, "timeout", o.timeout))
	}
	srv, err := o.admin.start(g, out)
	if err != nil {
		return err
	}
	defer func() {
		if serr := srv.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()

	total := int64(len(p.recs))
	prodCtx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	prodDone := make(chan error, 1)
	var produceTime time.Duration
	gen := p.gen
	if o.rate > 0 {
		gen = paced(prodCtx, o.rate, gen)
	}
	go func() {
		t0 := time.Now()
		err := loadgen.Produce(prodCtx, c.addrs(), o.topic, len(p.recs), gen)
		produceTime = time.Since(t0)
		prodDone <- err
	}()

	prog := startProgress(o.progress, out, start, total, p.sent.Load, g.Stats)
	waitErr := runUntilCommitted(ctx, g, total, startOffs, prodDone, stopProd)
	prog.close()

	r := &demoReport{
		Topic: o.topic, Partitions: parts, Keys: o.keys, Group: groupID,
		Planned: p.transfers(), PlannedPoison: p.poison, ProduceTime: produceTime,
		Ledger: bank.ledger.Report(), Stats: g.Stats(), Mismatched: bank.mismatched(p),
		Start: startOffs,
	}
	if waitErr != nil && ctx.Err() != nil {
		r.Interrupted = waitErr.Error() // ctx's cause: a signal or --timeout
	}
	if first, last := bank.firstDo.Load(), bank.lastDone.Load(); first > 0 && last > first {
		r.ConsumeTime = time.Duration(last - first)
	}
	var readErr error
	if r.HW, err = c.highWatermarks(o.topic); err != nil {
		readErr = err
	}
	if r.Committed, err = c.committed(groupID, o.topic); err != nil {
		readErr = errors.Join(readErr, err)
	}
	if readErr == nil {
		r.countProduced(p)
		r.Lost = done.missing(r.Start, r.committedOffsets())
	}
	r.Elapsed = time.Since(start)
	r.write(out)
	switch {
	case waitErr != nil && r.Interrupted == "":
		return waitErr
	case readErr != nil:
		return fmt.Errorf("read back offsets: %w", readErr)
	}
	if err := r.verdict(); err != nil || r.Interrupted == "" {
		return err
	}
	return &interruptedError{msg: r.summary()}
}

// allCommitted reports whether total records past the start offsets are
// committed: Stats.Committed says so, or else the committed offsets read
// back from the coordinator (PartitionStats.Committed, every
// Status.ReadBack) do: those are the commit as the broker holds it, the
// report's ground truth.
func allCommitted(s group.Stats, total int64, start map[int32]int64) bool {
	if s.Committed >= total {
		return true
	}
	if len(s.PartitionStats) != len(start) {
		return false
	}
	var n int64
	for _, p := range s.PartitionStats {
		if p.Committed < 0 {
			return false
		}
		n += p.Committed - start[p.Partition]
	}
	return n >= total
}

// paced wraps gen so that record i is not generated before i/rate seconds
// have passed since the first; it stops waiting when ctx ends.
func paced(ctx context.Context, rate float64, gen loadgen.Gen) loadgen.Gen {
	var t0 time.Time
	return func(i int) loadgen.Record {
		if i == 0 {
			t0 = time.Now()
		}
		if ahead := time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))); ahead > time.Millisecond {
			t := time.NewTimer(ahead)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		return gen(i)
	}
}

// runUntilCommitted runs g until all total records are produced (the
// producer sends its result on prodDone) and committed (see allCommitted),
// then stops it. It fails if producing fails, Run returns early, or ctx
// ends (the caller reports that as an interrupted run, with what was done
// by then); in every case it stops the producer (stopProd) and waits for
// it.
func runUntilCommitted(ctx context.Context, g *group.Group[Transfer], total int64, start map[int32]int64, prodDone <-chan error, stopProd func()) error {
	var (
		prodErr  error
		produced bool
	)
	err := broker.WaitUntil(ctx, func() bool {
		if !produced {
			select {
			case prodErr = <-prodDone:
				produced = true
			default:
				return false
			}
		}
		return prodErr != nil || allCommitted(g.Stats(), total, start)
	}, g.Run)
	stopProd()
	if !produced {
		prodErr = <-prodDone
	}
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case prodErr != nil:
		return errors.Join(fmt.Errorf("produce: %w", prodErr), err)
	case err != nil:
		return fmt.Errorf("group run: %w", err)
	}
	return nil
}
