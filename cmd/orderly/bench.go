package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	scaleParts  []int
	scaleKeys   []int
	scaleValues []int
	chanSize    int
	maxInFlight int
	duration    time.Duration
	timeout     time.Duration
	out         string
	quiet       bool

	fs *pflag.FlagSet // the flags, for the errors to say where a value came from
}

func benchCommand(e env) *cobra.Command {
	o := &benchOpts{}
	var c *cobra.Command
	c = newCommand("bench", "side-by-side benchmarks against raw sarama, franz-go and the databus/group design",
		`Run side-by-side benchmarks on one in-process broker: orderly against a raw
sarama loop, a plain franz-go (kgo) loop, the databus/group seed design and
the plain-goroutine limit, the same data for each, medians of alternating
rounds. The Markdown table goes to stdout (and with --out, results.json,
table.md, chart.png and scale.png to a directory), progress to stderr.

The scale scenario (not part of all) consumes one data set per combination
of --scale-partitions, --scale-keys and --scale-values with a no-op handler
(raw, franz and orderly by default) and reports msg/s, MB/s, CPU/msg and
peak RSS, each against raw at the same size, and charts CPU/msg against
partitions (scale.png). The default is the short run, 8/64/512 partitions,
10k keys, 100 B values (1M messages each); the full matrix adds
--scale-keys 10000,1000000 --scale-values 100,10240 (10 KiB: 100k
messages, about 1 GB in the broker).`,
		func(ctx context.Context) error { return runBench(ctx, o, commandLine(c), e.stdout, e.stderr) })
	fs := c.Flags()
	o.fs = fs
	known := func(names []string, what string) func(string) error {
		return func(s string) error {
			if slices.Contains(names, s) {
				return nil
			}
			return fmt.Errorf("no such %s (known: %s)", what, strings.Join(names, ", "))
		}
	}
	scenarios := slices.Concat([]string{"all"}, bench.ScenarioNames, bench.ExtraScenarioNames)
	listVar(fs, &o.scenarios, "scenario", []string{"all"}, true, known(scenarios, "scenario"),
		"scenarios, comma-separated: "+strings.Join(scenarios, "|")+" (all: "+strings.Join(bench.ScenarioNames, ",")+")")
	listVar(fs, &o.contenders, "contenders", nil, false, known(bench.ContenderNames, "contender"),
		"contenders, comma-separated, from "+strings.Join(bench.ContenderNames, ",")+" (default: each scenario's set)")
	intVar(fs, &o.messages, "messages", 0, 0, math.MaxInt, "messages per data set (0: 1M for noop; 30k for batch/skew/fail; io: 30k, and Num x 2000 for a Num whose limit would finish 30k in under 2s; 10 x max-in-flight for stall; scale: 1M at values up to 1 KiB, a tenth per 10x value size beyond)")
	intVar(fs, &o.partitions, "partitions", 0, 0, 1<<16, fmt.Sprintf("partitions per topic (0: %d)", bench.DefaultPartitions))
	intVar(fs, &o.keys, "keys", 0, 0, math.MaxInt, fmt.Sprintf("distinct message keys (0: %d)", bench.DefaultKeys))
	intVar(fs, &o.rounds, "rounds", 0, 0, math.MaxInt, fmt.Sprintf("alternating rounds; the table shows medians (0: %d)", bench.DefaultRounds))
	intListVar(fs, &o.nums, "num", nil, 1, math.MaxInt, "Num values of the io scenario, comma-separated (default "+joinInts(bench.DefaultNums)+")")
	intListVar(fs, &o.scaleParts, "scale-partitions", nil, 1, 1<<16, "scale scenario: partition counts, comma-separated (default "+joinInts(bench.DefaultScalePartitions)+")")
	intListVar(fs, &o.scaleKeys, "scale-keys", nil, 1, math.MaxInt, "scale scenario: key counts, comma-separated (default "+joinInts(bench.DefaultScaleKeys)+"; the full matrix: 10000,1000000)")
	intListVar(fs, &o.scaleValues, "scale-values", nil, 1, 1<<20, "scale scenario: value sizes in bytes, comma-separated (default "+joinInts(bench.DefaultScaleValues)+"; the full matrix: 100,10240)")
	intVar(fs, &o.chanSize, "chan", 0, 0, math.MaxInt, fmt.Sprintf("sarama ChannelBufferSize for every contender; databus per-worker chan capacity (0: %d)", bench.DefaultChan))
	intVar(fs, &o.maxInFlight, "max-in-flight", 0, 0, math.MaxInt, fmt.Sprintf("orderly MaxInFlight of the stall scenario (0: %d); the others use the group default", bench.DefaultMaxInFlight))
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "max-inflight" { // the spelling of earlier releases, in recorded commands
			name = "max-in-flight"
		}
		return pflag.NormalizedName(name)
	})
	durationVar(fs, &o.duration, "duration", 0, 0, fmt.Sprintf("stall scenario: how long memory is sampled once MaxInFlight is reached (0: %v)", bench.DefaultStallDuration))
	durationVar(fs, &o.timeout, "timeout", 0, 0, fmt.Sprintf("longest a single run may take (0: %v)", bench.DefaultRunTimeout))
	stringVar(fs, &o.out, "out", "", nil, "directory to write "+bench.ResultsFile+", "+bench.TableFile+", "+bench.ChartFile+" and "+bench.ScaleChartFile+" to")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	return c
}

// writableDir makes dir if need be and checks that a file can be made in
// it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err := createIn(dir)
	return err
}

// createIn creates a file in dir and removes it: the check, before a run,
// that dir takes new files. created says whether the file was made: when
// not, err is why; when made, err is the failure to remove it.
func createIn(dir string) (created bool, err error) {
	f, err := os.CreateTemp(dir, ".orderly-write-check-*")
	if err != nil {
		return false, err
	}
	f.Close()
	return true, os.Remove(f.Name())
}

// timeoutArg is how bench's errors name --timeout: as flagArg does, with
// ORDERLY_TIMEOUT when the value came from there; "" when it was not
// given or is 0, bench's default, which bench names itself.
func timeoutArg(fs *pflag.FlagSet, timeout time.Duration) string {
	if fs == nil || !fs.Changed("timeout") || timeout == 0 {
		return ""
	}
	return flagArg(fs, "timeout", timeout)
}

// runBench is `orderly bench`: flags to bench.Options, the Markdown table
// to out, progress to progress; command is the command line the report
// records.
func runBench(ctx context.Context, o *benchOpts, command string, out, progress io.Writer) error {
	opts := bench.Options{
		Scenarios:       o.scenarios,
		Contenders:      o.contenders,
		Messages:        o.messages,
		Partitions:      o.partitions,
		Keys:            o.keys,
		Rounds:          o.rounds,
		Nums:            o.nums,
		ScalePartitions: o.scaleParts,
		ScaleKeys:       o.scaleKeys,
		ScaleValues:     o.scaleValues,
		Chan:            o.chanSize,
		MaxInFlight:     o.maxInFlight,
		StallDuration:   o.duration,
		RunTimeout:      o.timeout,
		RunTimeoutArg:   timeoutArg(o.fs, o.timeout),
		Out:             o.out,
		Progress:        progress,
		Command:         command,
	}
	if o.quiet {
		opts.Progress = io.Discard
	}
	if o.out != "" {
		if err := writableDir(o.out); err != nil {
			return fmt.Errorf("%s: %w", flagArg(o.fs, "out", o.out), err) // before the runs, not after them
		}
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
