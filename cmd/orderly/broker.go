package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/orderly-go/orderly/internal/broker"
)

// brokerOpts are `orderly broker`'s flags.
type brokerOpts struct {
	addr       string
	data       string
	partitions int
	topics     []string
	sync       bool
}

func parseBrokerFlags(args []string, out io.Writer) (*brokerOpts, error) {
	o := &brokerOpts{}
	fs := flag.NewFlagSet("orderly broker", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9092", "host:port to listen on (port 0: a free port, printed at start)")
	fs.StringVar(&o.data, "data", "", "directory to persist logs, offsets and groups in, reloaded at start; empty: memory only")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of each topic created at start")
	topics := fs.String("topics", "orderly-demo", "comma-separated topics to create at start (existing ones are kept)")
	fs.BoolVar(&o.sync, "sync", false, "fsync every produced batch (with --data)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: broker: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: broker: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if o.partitions < 1 || o.partitions > 1<<16 {
		return nil, fmt.Errorf("%w: --partitions %d: must be positive (at most 65536)", errUsage, o.partitions)
	}
	var err error
	if o.topics, err = splitList("topics", *topics); err != nil {
		return nil, err
	}
	if o.sync && o.data == "" {
		return nil, fmt.Errorf("%w: --sync: needs --data", errUsage)
	}
	return o, nil
}

// runBroker is `orderly broker`: a standalone in-process Kafka-protocol
// broker (kfake). It prints its address and a "ready" line once it listens,
// serves until ctx ends (SIGINT, SIGTERM), then closes (persisting to
// --data) and prints "stopped".
func runBroker(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseBrokerFlags(args, out)
	if err != nil {
		return err
	}
	b, err := broker.Start(broker.Config{
		Addr:       o.addr,
		DataDir:    o.data,
		SyncWrites: o.sync,
		Topics:     o.topics,
		Partitions: int32(o.partitions),
	})
	if errors.Is(err, broker.ErrBadAddr) { // broker.Start checks --addr
		return fmt.Errorf("%w: --addr %q: %w", errUsage, o.addr, err)
	}
	if err != nil {
		return fmt.Errorf("--addr %q --data %q: %w", o.addr, o.data, err)
	}
	data := "memory only"
	if o.data != "" {
		data = o.data
		if o.sync {
			data += " (fsync every batch)"
		}
	}
	fmt.Fprintf(out, "orderly broker listening on %s\n", strings.Join(b.Addrs(), ","))
	fmt.Fprintf(out, "data: %s\n", data)
	for _, t := range o.topics {
		fmt.Fprintf(out, "topic: %s (%d partitions)\n", t, len(b.HighWatermarks(t)))
	}
	fmt.Fprintln(out, "ready")
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(out, "stopped")
	return nil
}
