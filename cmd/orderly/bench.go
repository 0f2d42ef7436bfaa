package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orderly-go/orderly/internal/bench"
)

// benchOpts are `orderly bench`'s flags. Zero values mean bench's
// defaults: bench.Options applies them.
type benchOpts struct {
	scenarios   []string
	contenders  []string
	messages    int
	partitions  int
	keys        int
	rounds      int
	nums        []int
	chanSize    int
	maxInFlight int
	duration    time.Duration
	timeout     time.Duration
	out         string
	quiet       bool
}

func benchCommand(e env) *cobra.Command {
	o := &benchOpts{}
	var c *cobra.Command
	c = newCommand("bench", "side-by-side benchmarks against raw sarama, franz-go and the databus/group design",
		`Run side-by-side benchmarks on one in-process broker: orderly against a raw
sarama loop, a plain franz-go (kgo) loop, the databus/group seed design and
the plain-goroutine limit, the same data for each, medians of alternating
rounds. The Markdown table goes to
stdout (and with --out, results.json, table.md and chart.png to a
directory), progress to stderr.`,
		func(ctx context.Context) error { return runBench(ctx, o, commandLine(c), e.stdout, e.stderr) })
	fs := c.Flags()
	known := func(names []string, what string) func(string) error {
		return func(s string) error {
			if slices.Contains(names, s) {
				return nil
			}
			return fmt.Errorf("no such %s (known: %s)", what, strings.Join(names, ", "))
		}
	}
	listVar(fs, &o.scenarios, "scenario", []string{"all"}, true, known(append([]string{"all"}, bench.ScenarioNames...), "scenario"),
		"scenarios, comma-separated: all|"+strings.Join(bench.ScenarioNames, "|"))
	listVar(fs, &o.contenders, "contenders", nil, false, known(bench.ContenderNames, "contender"),
		"contenders, comma-separated, from "+strings.Join(bench.ContenderNames, ",")+" (default: each scenario's set)")
	intVar(fs, &o.messages, "messages", 0, 0, math.MaxInt, "messages per data set (0: 1M for noop, 30k for io/batch/skew/fail, 10 x max-inflight for stall)")
	intVar(fs, &o.partitions, "partitions", 0, 0, 1<<16, fmt.Sprintf("partitions per topic (0: %d)", bench.DefaultPartitions))
	intVar(fs, &o.keys, "keys", 0, 0, math.MaxInt, fmt.Sprintf("distinct message keys (0: %d)", bench.DefaultKeys))
	intVar(fs, &o.rounds, "rounds", 0, 0, math.MaxInt, fmt.Sprintf("alternating rounds; the table shows medians (0: %d)", bench.DefaultRounds))
	intListVar(fs, &o.nums, "num", nil, 1, math.MaxInt, "Num values of the io scenario, comma-separated (default "+joinInts(bench.DefaultNums)+")")
	intVar(fs, &o.chanSize, "chan", 0, 0, math.MaxInt, fmt.Sprintf("sarama ChannelBufferSize for every contender; databus per-worker chan capacity (0: %d)", bench.DefaultChan))
	intVar(fs, &o.maxInFlight, "max-inflight", 0, 0, math.MaxInt, fmt.Sprintf("orderly MaxInFlight of the stall scenario (0: %d); the others use the group default", bench.DefaultMaxInFlight))
	durationVar(fs, &o.duration, "duration", 0, 0, fmt.Sprintf("stall scenario: how long memory is sampled once MaxInFlight is reached (0: %v)", bench.DefaultStallDuration))
	durationVar(fs, &o.timeout, "timeout", 0, 0, fmt.Sprintf("longest a single run may take (0: %v)", bench.DefaultRunTimeout))
	stringVar(fs, &o.out, "out", "", nil, "directory to write "+bench.ResultsFile+", "+bench.TableFile+" and "+bench.ChartFile+" to")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	return c
}

// runBench is `orderly bench`: flags to bench.Options, the Markdown table
// to out, progress to progress; command is the command line the report
// records.
func runBench(ctx context.Context, o *benchOpts, command string, out, progress io.Writer) error {
	opts := bench.Options{
		Scenarios:     o.scenarios,
		Contenders:    o.contenders,
		Messages:      o.messages,
		Partitions:    o.partitions,
		Keys:          o.keys,
		Rounds:        o.rounds,
		Nums:          o.nums,
		Chan:          o.chanSize,
		MaxInFlight:   o.maxInFlight,
		StallDuration: o.duration,
		RunTimeout:    o.timeout,
		Out:           o.out,
		Progress:      progress,
		Command:       command,
	}
	if o.quiet {
		opts.Progress = io.Discard
	}
	rep, err := bench.Run(ctx, opts)
	if errors.Is(err, bench.ErrOptions) { // the flags' checks catch these first
		return &usageError{msg: err.Error()}
	}
	if rep != nil {
		if werr := rep.WriteMarkdown(out); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil && ctx.Err() != nil {
		return &interruptedError{msg: fmt.Sprintf("%v: %v", context.Cause(ctx), err)}
	}
	return err
}
