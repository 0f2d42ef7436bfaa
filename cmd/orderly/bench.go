package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/orderly-go/orderly/internal/bench"
)

// runBench is `orderly bench`: flags to bench.Options, the Markdown table
// to out, progress to stderr.
func runBench(ctx context.Context, args []string, out io.Writer) error {
	return benchMain(ctx, args, out, os.Stderr)
}

func benchMain(ctx context.Context, args []string, out, progress io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(progress)
	var (
		scenarios   = fs.String("scenario", "all", "scenarios, comma-separated: all|"+strings.Join(bench.ScenarioNames, "|"))
		contenders  = fs.String("contenders", "", "contenders, comma-separated, from "+strings.Join(bench.ContenderNames, ",")+" (default: each scenario's set)")
		messages    = fs.Int("messages", 0, "messages per data set (default: 1M for noop, 30k for io/batch/skew/fail, 10 x max-inflight for stall)")
		partitions  = fs.Int("partitions", bench.DefaultPartitions, "partitions per topic")
		keys        = fs.Int("keys", bench.DefaultKeys, "distinct message keys")
		rounds      = fs.Int("rounds", bench.DefaultRounds, "alternating rounds; the table shows medians")
		nums        = fs.String("num", joinInts(bench.DefaultNums), "Num values of the io scenario, comma-separated")
		chanSize    = fs.Int("chan", bench.DefaultChan, "sarama ChannelBufferSize for every contender; databus per-worker chan capacity")
		maxInFlight = fs.Int("max-inflight", bench.DefaultMaxInFlight, "orderly MaxInFlight")
		duration    = fs.Duration("duration", bench.DefaultStallDuration, "stall scenario: how long memory is sampled once MaxInFlight is reached")
		timeout     = fs.Duration("timeout", bench.DefaultRunTimeout, "longest a single run may take")
		outDir      = fs.String("out", "", "directory to write "+bench.ResultsFile+", "+bench.TableFile+" and "+bench.ChartFile+" to")
		quiet       = fs.Bool("quiet", false, "no progress lines")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: bench: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: bench: unexpected arguments %q", errUsage, fs.Args())
	}
	numList, err := parseInts(*nums)
	if err != nil {
		return fmt.Errorf("%w: bench: -num: %w", errUsage, err)
	}
	opts := bench.Options{
		Scenarios:     splitList(*scenarios),
		Contenders:    splitList(*contenders),
		Messages:      *messages,
		Partitions:    *partitions,
		Keys:          *keys,
		Rounds:        *rounds,
		Nums:          numList,
		Chan:          *chanSize,
		MaxInFlight:   *maxInFlight,
		StallDuration: *duration,
		RunTimeout:    *timeout,
		Out:           *outDir,
		Progress:      progress,
		Command:       strings.TrimSpace("orderly bench " + strings.Join(args, " ")),
	}
	if *quiet {
		opts.Progress = io.Discard
	}
	rep, err := bench.Run(ctx, opts)
	if errors.Is(err, bench.ErrOptions) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if rep != nil {
		if werr := rep.WriteMarkdown(out); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
