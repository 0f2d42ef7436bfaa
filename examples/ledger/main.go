// Command ledger keeps account balances in SQLite from a topic of
// transfers, through Orderly: each Do applies its batch in one
// transaction, and each account row stores the offset of the last
// transfer applied to it, in that same transaction, so that a transfer
// Kafka delivers again after a crash is recognised and skipped. The
// database sees each transfer exactly once although Kafka delivers at
// least once.
//
// The mark is per account, not per partition: Orderly runs many accounts
// of a partition at once, so their transfers finish out of offset order,
// and a partition's highest applied offset would skip transfers of other
// accounts below it that never ran. Per account it works because of lane
// order: an account's transfers reach Do one at a time, in offset order,
// so everything at or below its mark was applied.
//
// Lane order is also what keeps balances right along the way: each
// account's transfers are drawn so that, applied in order, a withdrawal
// never takes more than is there. The example consumes the same topic
// twice, ordered by account (Orderly's default) and --mode unordered
// (group.Unordered, where transfers are made idempotent by a table of the
// applied offsets instead), and prints both: the final balances agree,
// but without order some accounts go negative on the way.
//
//	go run ./examples/ledger                      # embedded broker: produce, consume both ways, compare
//	go run ./examples/ledger --brokers host:9092  # a real cluster (--produce to write the transfers first)
//
// On a cluster (--brokers) the topic must exist: the ledger creates it
// only on its embedded broker, and refuses a missing one before it
// produces or consumes anything; without --produce it refuses one that
// holds no records, before it consumes. --produce writes the transfers every
// time it is given: give it once per topic (a second time the topic holds
// every transfer twice, and the balances no longer match the ones drawn).
// The databases in --db, created if missing, are opened before anything
// is produced, so one that cannot be opened leaves Kafka untouched.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "ledger: %v\nsee 'ledger --help'\n", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

// usageError is a mistake on the command line: exit 2.
type usageError struct{ error }

// options are the example's flags.
type options struct {
	brokers        string
	topic          string
	groupPrefix    string
	transfers      int
	accounts       int
	partitions     int
	seed           uint64
	mode           string
	dbDir          string
	produce        bool
	commitInterval time.Duration
	num, size      int
	logLevel       string
}

func parseFlags(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated host:port of a Kafka cluster, where --topic must exist; empty: an embedded broker (and --produce)")
	fs.StringVar(&o.topic, "topic", "transfers", "topic of transfers")
	fs.StringVar(&o.groupPrefix, "group", "ledger", "consumer group prefix: PREFIX-ordered, PREFIX-unordered")
	fs.IntVar(&o.transfers, "transfers", 20000, "transfers to produce (and to expect)")
	fs.IntVar(&o.accounts, "accounts", 50, "accounts (Kafka keys)")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the topic the embedded broker creates")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the transfers (the same seed draws the same transfers)")
	fs.StringVar(&o.mode, "mode", "both", "both, ordered (by account) or unordered")
	fs.StringVar(&o.dbDir, "db", "", "directory of the databases (MODE.db), created if missing, kept; empty: a temporary one, removed at exit")
	fs.BoolVar(&o.produce, "produce", false, "produce the transfers before consuming (always with the embedded broker)")
	fs.DurationVar(&o.commitInterval, "commit-interval", time.Second, "Orderly's commit interval")
	fs.IntVar(&o.num, "num", 8, "workers (group Num)")
	fs.IntVar(&o.size, "size", 64, "transfers per transaction at most (group Size)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level to stderr: debug, info, warn, error")
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "Usage: ledger [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		return nil, err
	case err != nil:
		return nil, usageError{err}
	case fs.NArg() > 0:
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	case o.mode != "both" && o.mode != "ordered" && o.mode != "unordered":
		return nil, usageError{fmt.Errorf("invalid value %q for -mode: must be both, ordered or unordered", o.mode)}
	case o.transfers < 1 || o.accounts < 1 || o.partitions < 1:
		return nil, usageError{errors.New("-transfers, -accounts and -partitions must be positive")}
	}
	if _, err := zapcore.ParseLevel(o.logLevel); err != nil {
		return nil, usageError{fmt.Errorf("invalid value %q for -log-level: must be debug, info, warn or error", o.logLevel)}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	// The databases first: one that cannot be opened must fail before
	// anything is produced (a rerun with --produce would double the topic).
	if o.dbDir == "" {
		dir, err := os.MkdirTemp("", "ledger-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.dbDir = dir
	} else if err := os.MkdirAll(o.dbDir, 0o755); err != nil {
		return fmt.Errorf("--db %s: %w", o.dbDir, err)
	}
	modes := []string{"ordered", "unordered"}
	if o.mode != "both" {
		modes = []string{o.mode}
	}
	stores := make(map[string]*store, len(modes))
	for _, mode := range modes {
		st, err := openStore(filepath.Join(o.dbDir, mode+".db"))
		if err != nil {
			return err
		}
		defer st.close()
		stores[mode] = st
	}
	brokers := strings.Split(o.brokers, ",")
	where := o.brokers
	if o.brokers == "" {
		b, err := broker.Start(broker.Config{Topics: []string{o.topic}, Partitions: int32(o.partitions)})
		if err != nil {
			return err
		}
		defer b.Close()
		brokers, where, o.produce = b.Addrs(), "embedded broker "+b.Addrs()[0], true
	} else if err := checkTopic(brokers, o.topic, !o.produce, o.transfers); err != nil {
		return err
	}
	ts := plan(o.transfers, o.accounts, o.seed)
	if o.produce {
		if err := produce(ctx, brokers, o.topic, ts); err != nil {
			return fmt.Errorf("produce to %s: %w", o.topic, err)
		}
	}
	fmt.Fprintf(stdout, "ledger: %d transfers over %d accounts on %q (%s); databases in %s\n",
		o.transfers, o.accounts, o.topic, where, o.dbDir)
	var failed error
	for _, mode := range modes {
		r, err := consume(ctx, o, brokers, mode, stores[mode], newLogger(o.logLevel, stderr))
		if err != nil {
			return err
		}
		r.check(ts)
		r.write(stdout)
		if mode == "ordered" && !r.ok() {
			failed = errors.New("ordered mode: balances do not match their transfers, or went negative")
		}
	}
	return failed
}

// result is what one mode did and what its database holds.
type result struct {
	mode             string
	applied, skipped int64
	took             time.Duration
	accounts         map[string]account

	matched, exactlyOnce, negative int
	lowest                         int64
	expected                       int
}

// consume runs one mode, applying to st, until the group's commit reaches
// the topic's end.
func consume(ctx context.Context, o *options, brokers []string, mode string, st *store, log *zap.Logger) (*result, error) {
	off, err := newOffsets(brokers)
	if err != nil {
		return nil, err
	}
	defer off.close()
	target, err := off.highWatermarks(o.topic)
	if err != nil {
		return nil, err
	}
	r := &result{mode: mode}
	var applied, skipped atomic.Int64
	apply, ordering := st.applyOrdered, group.OrderLanes
	if mode == "unordered" {
		apply, ordering = st.applyUnordered, group.Unordered
	}
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = o.commitInterval
	groupID := o.groupPrefix + "-" + mode
	g, err := group.New(group.Config{
		Brokers: brokers, Topics: []string{o.topic}, GroupID: groupID, Sarama: sc,
		Size: o.size, Num: o.num, Ticker: 5 * time.Millisecond, Ordering: ordering, Logger: log,
	}, group.Handler[transfer]{
		New: decode, // the key is the account: lanes by account
		Do: func(ctx context.Context, batch []transfer) error {
			res, err := apply(ctx, batch) // one transaction
			if err != nil {
				return err // rolled back: the whole batch is retried
			}
			applied.Add(int64(res.applied))
			skipped.Add(int64(res.skipped))
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for caught := false; !caught; {
		select {
		case err := <-done:
			return nil, fmt.Errorf("%s: group %s stopped before catching up: %w", mode, groupID, errors.Join(err, context.Cause(ctx)))
		case <-tick.C:
			if caught, err = off.caughtUp(groupID, o.topic, target); err != nil {
				stop()
				return nil, errors.Join(err, <-done)
			}
		}
	}
	stop()
	if err := <-done; err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	r.took = time.Since(start)
	r.applied, r.skipped = applied.Load(), skipped.Load()
	if r.accounts, err = st.accounts(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// check compares the database with the transfers.
func (r *result) check(ts []transfer) {
	want, count := sums(ts)
	r.expected = len(want)
	for id, bal := range want {
		a, ok := r.accounts[id]
		if ok && a.balance == bal {
			r.matched++
		}
		if ok && a.applied == count[id] {
			r.exactlyOnce++
		}
	}
	for _, a := range r.accounts {
		if a.minBalance < 0 {
			r.negative++
		}
		r.lowest = min(r.lowest, a.minBalance)
	}
}

func (r *result) ok() bool {
	return r.matched == r.expected && r.exactlyOnce == r.expected && r.negative == 0
}

func (r *result) write(w io.Writer) {
	label := map[string]string{"ordered": "ordered by account", "unordered": "unordered"}[r.mode]
	fmt.Fprintf(w, "%-18s applied %d, redelivered and skipped %d, in %.1fs\n", label+":", r.applied, r.skipped, r.took.Seconds())
	fmt.Fprintf(w, "%-18s balances equal to the sum of their transfers: %d of %d; each transfer applied once: %d of %d\n",
		"", r.matched, r.expected, r.exactlyOnce, r.expected)
	fmt.Fprintf(w, "%-18s accounts that went negative on the way: %d (lowest balance ever %.2f)\n",
		"", r.negative, float64(r.lowest)/100)
}

// newLogger logs at level and above to w.
func newLogger(level string, w io.Writer) *zap.Logger {
	lvl, _ := zapcore.ParseLevel(level) // checked
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl))
}
