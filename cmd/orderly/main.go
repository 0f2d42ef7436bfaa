// Command orderly runs the Orderly demo on an embedded Kafka-protocol broker
// (the default), a standalone broker, side-by-side benchmarks, and the
// tools for dead letters.
//
//	orderly [demo] [flags]   demo traffic consumed with ordered parallelism, live progress, a report
//	orderly broker [flags]   a standalone in-process broker (kfake) for development and tests
//	orderly bench [flags]    side-by-side throughput against raw sarama and the databus design
//	orderly dlq CMD [flags]  list, show, replay and purge dead letters (local store or topic)
//
// `orderly --help` and `orderly CMD --help` describe the flags; cli.go
// holds the conventions every subcommand follows.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/orderly-go/orderly/group"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == execGuardArg {
		os.Exit(execGuardMain()) // consume's exec guard (consume_exec_unix.go)
	}
	ctx, stop := interruptible()
	err := run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, lookup: os.LookupEnv})
	stop()
	os.Exit(report(os.Stderr, err))
}

// report prints err on w, one line (and for a usage error the hint on a
// second), and returns the exit code for it.
func report(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	// Joined and wrapped errors may span lines; an error is one line.
	fmt.Fprintln(w, "orderly:", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
	var (
		usage       *usageError
		interrupted *interruptedError
	)
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(w, usage.hint)
		return exitUsage
	case errors.As(err, &interrupted):
		return exitInterrupted
	case errors.Is(err, group.ErrInstanceFenced):
		return exitFenced
	}
	return exitError
}

// interruptible returns a context that the first SIGINT or SIGTERM
// cancels, with the signal's name as its cause. After that first signal
// both have their default effect again: a second Ctrl-C ends the process
// at once, without the report.
func interruptible() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			name := "SIGTERM"
			if s == os.Interrupt {
				name = "SIGINT"
			}
			cancel(errors.New("interrupted by " + name))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
