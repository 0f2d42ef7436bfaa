// Command typed shows a service that decodes messages into its own type,
// orders them by a field rather than the Kafka key, and writes each batch
// in one call (a database batch insert, here simulated):
//
//	go run ./cmd/orderly broker --topics orders &
//	go run ./examples/typed --brokers 127.0.0.1:9092 --topic orders
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orderly-go/orderly/group"
)

// Order is what the topic carries, as JSON.
type Order struct {
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Cents    int64  `json:"cents"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "typed: %v\nsee 'typed --help'\n", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "typed:", err)
		os.Exit(1)
	}
}

// usageError is a mistake on the command line: exit 2.
type usageError struct{ error }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("typed", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated host:port")
	topic := fs.String("topic", "orders", "topic to consume")
	level := fs.String("log-level", "info", "log level to stderr: debug, info, warn, error")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	log, err := newLogger(*level, stderr)
	if err != nil {
		return usageError{err}
	}
	defer log.Sync() //nolint:errcheck // best effort at exit
	db := &orders{out: stdout}
	g, err := group.New(group.Config{
		Brokers: strings.Split(*brokers, ","),
		Topics:  []string{*topic},
		GroupID: "example-typed",
		Size:    500,                   // rows per insert
		Num:     16,                    // inserts in flight
		Ticker:  50 * time.Millisecond, // a partial batch waits at most this long
		Logger:  log,
	}, group.Handler[Order]{
		// A message that does not decode is logged with its
		// topic/partition/offset, counted, and skipped past.
		New: func(m *group.Message) (Order, error) {
			var o Order
			err := json.Unmarshal(m.Value, &o)
			return o, err
		},
		// One lane per customer: a customer's orders are inserted in the
		// order they were produced, never two batches at once.
		Split: func(_ *group.Message, o Order) uint64 {
			h := fnv.New64a()
			h.Write([]byte(o.Customer))
			return h.Sum64()
		},
		Do: db.insert,
	})
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// orders stands for the orders table of a database.
type orders struct{ out io.Writer }

// insert stands for `INSERT INTO orders VALUES (...), (...), ...`: an
// error makes Orderly retry the whole batch with backoff, holding back
// only these customers' later orders.
func (db *orders) insert(ctx context.Context, batch []Order) error {
	select {
	case <-time.After(time.Millisecond + time.Duration(len(batch))*10*time.Microsecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	var cents int64
	for _, o := range batch {
		cents += o.Cents
	}
	fmt.Fprintf(db.out, "inserted %d orders worth %d.%02d\n", len(batch), cents/100, cents%100)
	return nil
}

// parse parses args into fs: --help prints the flags to stdout and returns
// flag.ErrHelp; a bad flag is a usageError, with no usage dump.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "Usage: %s [flags]\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
		return err
	case err != nil:
		return usageError{err}
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// newLogger logs at level and above to w, one readable line per event.
func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("invalid value %q for -log-level: must be debug, info, warn or error", level)
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}
