package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/internal/broker"
)

// brokerOpts are `orderly broker`'s flags.
type brokerOpts struct {
	addr       string
	data       string
	partitions int
	topics     []string
	sync       bool
	fs         *pflag.FlagSet
}

// brokerExitStatus: like consume, the broker has no planned end, and a
// signal is how it stops.
const brokerExitStatus = `Exit status: 0 stopped by SIGINT or SIGTERM (kfake persists to --data as it
closes, and does not report a failure to); 1 error (it could not listen,
or load --data, or another broker holds --data's lock); 2 usage error.
A second SIGINT or SIGTERM kills the process at once (a shell shows 130
or 143).
`

func brokerCommand(e env) *cobra.Command {
	o := &brokerOpts{}
	c := newCommand("broker", "run a standalone in-process Kafka-protocol broker (kfake) for development and tests",
		`Run a standalone in-process Kafka-protocol broker (franz-go's kfake), for
development and tests. It prints its address and "ready" once it listens,
serves until SIGINT or SIGTERM, then closes (persisting to --data), prints
"stopped" and exits 0.`,
		func(ctx context.Context) error { return runBroker(ctx, o, e.stdout) })
	withExitStatus(c, brokerExitStatus)
	fs := c.Flags()
	o.fs = fs
	stringVar(fs, &o.addr, "addr", "127.0.0.1:9092", hostPort, "host:port to listen on (port 0: a free port, printed at start)")
	stringVar(fs, &o.data, "data", "", nil, "directory to persist logs, offsets and groups in, reloaded at start, locked while the broker runs (on unix); empty: memory only")
	intVar(fs, &o.partitions, "partitions", 8, 1, 1<<16, "partitions of each topic created at start (a topic reloaded from --data keeps its own count)")
	listVar(fs, &o.topics, "topics", []string{"orderly-demo"}, false, kafkaName, "comma-separated topics to create at start (existing ones are kept)")
	fs.BoolVar(&o.sync, "sync", false, "fsync every produced batch (needs --data)")
	return c
}

// runBroker is `orderly broker`: a standalone in-process Kafka-protocol
// broker (kfake). It prints its address and a "ready" line once it listens,
// serves until ctx ends (SIGINT, SIGTERM), then closes (persisting to
// --data) and prints "stopped".
func runBroker(ctx context.Context, o *brokerOpts, out io.Writer) error {
	if o.sync && o.data == "" {
		return usagef("%s needs --data (there is nothing to fsync in memory)", flagArg(o.fs, "sync"))
	}
	// A --data another broker runs on is refused, naming its process. An
	// address it cannot listen on, and a --data it cannot create or lock,
	// are named with their flag, and its variable when the value came
	// from there.
	b, err := broker.Start(broker.Config{
		Addr:       o.addr,
		DataDir:    o.data,
		SyncWrites: o.sync,
		Topics:     o.topics,
		Partitions: int32(o.partitions),
	})
	if errors.Is(err, broker.ErrListen) {
		// net.Listen's error names the address again ("listen tcp
		// host:port: bind: ..."): its cause alone says why.
		why := err
		var op *net.OpError
		if errors.As(err, &op) {
			why = op.Err
		}
		return &listenError{flag: flagArg(o.fs, "addr", o.addr), why: why}
	}
	var dataErr *broker.DataDirError
	if errors.As(err, &dataErr) {
		return fmt.Errorf("%s: %w", flagArg(o.fs, "data", o.data), dataErr.Err)
	}
	if err != nil {
		return err
	}
	data := "memory only"
	if o.data != "" {
		data = o.data
		if o.sync {
			data += " (fsync every batch)"
		}
	}
	// The listing is a Metadata round trip to itself, which a stop does
	// not cut short: a SIGTERM at start is a clean stop once it is done,
	// not an error. topicsTimeout bounds it instead.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), topicsTimeout)
	topics, err := b.Topics(lctx)
	cancel()
	if err != nil {
		b.Close()
		return err
	}
	fmt.Fprintf(out, "orderly broker listening on %s\n", strings.Join(b.Addrs(), ","))
	fmt.Fprintf(out, "data: %s\n", data)
	writeTopics(out, topics, o.topics, o.partitions, o.data != "")
	fmt.Fprintln(out, "ready")
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(out, "stopped")
	return nil
}

// topicsTimeout bounds the start's listing of the topics it serves.
const topicsTimeout = 10 * time.Second

// writeTopics prints a "topic:" line for every topic the broker serves,
// with its partitions: those of --topics (named), then the others. With
// --data (data) a topic it already had at the start was reloaded from
// there, and a client may have created one since it listened; without,
// every topic it did not create was created by a client.
func writeTopics(out io.Writer, topics map[string]int, named []string, partitions int, data bool) {
	from, kept := "created by a client", "created by a client first"
	if data {
		from, kept = "from --data", "kept from --data"
	}
	others := slices.Sorted(maps.Keys(topics))
	others = slices.DeleteFunc(others, func(t string) bool { return slices.Contains(named, t) })
	for _, t := range slices.Concat(named, others) {
		n, note := topics[t], ""
		switch {
		case !slices.Contains(named, t):
			note = ", " + from
		case n != partitions:
			// A topic there before the start created it is kept as it
			// is: say so when --partitions asks for another count.
			note = fmt.Sprintf(", %s; --partitions %d applies only to new topics", kept, partitions)
		}
		fmt.Fprintf(out, "topic: %s (%s%s)\n", t, plural(n, "partition"), note)
	}
}

// listenError is runBroker's error for an --addr it cannot listen on:
// "--addr host:port: cannot listen: <why>", naming the address once. It
// wraps broker.ErrListen, for callers that branch on it, and why.
type listenError struct {
	flag string // --addr and its value, as flagArg names them
	why  error
}

func (e *listenError) Error() string   { return e.flag + ": cannot listen: " + e.why.Error() }
func (e *listenError) Unwrap() []error { return []error{broker.ErrListen, e.why} }
