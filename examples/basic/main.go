// Command basic is the smallest Orderly service: it prints every message of
// a topic, many at a time, in order per key, committing behind its work,
// and logs what the group does (joining, partitions claimed and released,
// errors) to stderr.
//
//	go run ./cmd/orderly broker --topics events &   # or any Kafka cluster
//	go run ./examples/basic --brokers 127.0.0.1:9092 --topic events
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orderly-go/orderly/group"
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
		fmt.Fprintf(os.Stderr, "basic: %v\nsee 'basic --help'\n", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "basic:", err)
		os.Exit(1)
	}
}

// usageError is a mistake on the command line: exit 2.
type usageError struct{ error }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("basic", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated host:port")
	topic := fs.String("topic", "events", "topic to consume")
	level := fs.String("log-level", "info", "log level to stderr: debug, info, warn, error")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	log, err := newLogger(*level, stderr)
	if err != nil {
		return usageError{err}
	}
	defer log.Sync() //nolint:errcheck // best effort at exit
	g, err := group.New(group.Config{
		Brokers: strings.Split(*brokers, ","),
		Topics:  []string{*topic},
		GroupID: "example-basic",
		Logger:  log, // without one the group logs nothing
	}, group.Handler[*group.Message]{
		Do: func(ctx context.Context, batch []*group.Message) error {
			for _, m := range batch {
				fmt.Fprintf(stdout, "%s/%d@%d %s=%s\n", m.Topic, m.Partition, m.Offset, m.Key, m.Value)
			}
			return nil // the whole batch is done; its offsets may be committed
		},
	})
	if err != nil {
		return err
	}
	return g.Run(ctx) // until Ctrl-C; then drains, commits and returns
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
