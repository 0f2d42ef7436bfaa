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
	// Zero values mean bench's defaults: bench.Options applies them and
	// validates everything, naming the flag.
	var (
		scenarios   = fs.String("scenario", "all", "scenarios, comma-separated: all|"+strings.Join(bench.ScenarioNames, "|"))
		contenders  = fs.String("contenders", "", "contenders, comma-separated, from "+strings.Join(bench.ContenderNames, ",")+" (default: each scenario's set)")
		messages    = fs.Int("messages", 0, "messages per data set (0: 1M for noop, 30k for io/batch/skew/fail, 10 x max-inflight for stall)")
		partitions  = fs.Int("partitions", 0, fmt.Sprintf("partitions per topic (0: %d)", bench.DefaultPartitions))
		keys        = fs.Int("keys", 0, fmt.Sprintf("distinct message keys (0: %d)", bench.DefaultKeys))
		rounds      = fs.Int("rounds", 0, fmt.Sprintf("alternating rounds; the table shows medians (0: %d)", bench.DefaultRounds))
		nums        = fs.String("num", "", "Num values of the io scenario, comma-separated (default "+joinInts(bench.DefaultNums)+")")
		chanSize    = fs.Int("chan", 0, fmt.Sprintf("sarama ChannelBufferSize for every contender; databus per-worker chan capacity (0: %d)", bench.DefaultChan))
		maxInFlight = fs.Int("max-inflight", 0, fmt.Sprintf("orderly MaxInFlight (0: %d)", bench.DefaultMaxInFlight))
		duration    = fs.Duration("duration", 0, fmt.Sprintf("stall scenario: how long memory is sampled once MaxInFlight is reached (0: %v)", bench.DefaultStallDuration))
		timeout     = fs.Duration("timeout", 0, fmt.Sprintf("longest a single run may take (0: %v)", bench.DefaultRunTimeout))
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
	scenarioList, err := splitList("scenario", *scenarios)
	if err != nil {
		return err
	}
	contenderList, err := splitList("contenders", *contenders)
	if err != nil {
		return err
	}
	numList, err := parseInts("num", *nums)
	if err != nil {
		return err
	}
	opts := bench.Options{
		Scenarios:     scenarioList,
		Contenders:    contenderList,
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

// parseInts parses the comma-separated integers of --flag; bench.Options
// checks their range.
func parseInts(flag, s string) ([]int, error) {
	fields, err := splitList(flag, s)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(fields))
	for i, f := range fields {
		if out[i], err = strconv.Atoi(f); err != nil {
			return nil, fmt.Errorf("%w: --%s %q: %q is not an integer", errUsage, flag, s, f)
		}
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
