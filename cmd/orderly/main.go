// Command orderly runs the Orderly demo on an embedded Kafka-protocol broker
// (the default), a standalone broker, and side-by-side benchmarks.
//
//	orderly [demo] [flags]   demo traffic consumed with ordered parallelism, live progress, a report
//	orderly broker [flags]   a standalone in-process broker (kfake) for development and tests
//	orderly bench [flags]    side-by-side throughput against raw sarama and the databus design
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// errUsage marks a command-line mistake: the message is printed with the
// usage and the exit code is 2.
var errUsage = errors.New("usage")

// splitList splits the comma-separated value s of --flag, trimming spaces:
// "" is no entries, an empty entry ("a,,b", "a,") is a usage error.
func splitList(flag, s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			return nil, fmt.Errorf("%w: --%s %q: empty entry", errUsage, flag, s)
		}
		out = append(out, f)
	}
	return out, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "orderly:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "orderly:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand; no subcommand means demo.
func run(ctx context.Context, args []string) error {
	cmd := "demo"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "demo":
		return runDemo(ctx, args, os.Stdout)
	case "broker":
		return runBroker(ctx, args, os.Stdout)
	case "bench":
		return runBench(ctx, args, os.Stdout)
	case "help":
		fmt.Fprint(os.Stdout, usage)
		return nil
	default:
		return fmt.Errorf("%w: unknown command %q\n%s", errUsage, cmd, usage)
	}
}

const usage = `usage: orderly [command] [flags]

commands:
  demo     (default) produce demo traffic to an embedded broker (or --brokers) and consume it, with a report
  broker   run a standalone in-process Kafka-protocol broker
  bench    side-by-side benchmarks against raw sarama and the databus/group design

Run "orderly <command> -h" for a command's flags.
`
