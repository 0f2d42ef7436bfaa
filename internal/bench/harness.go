package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/cputime"
)

// Options configure a benchmark run. Zero fields take the defaults; each
// field's comment names its `orderly bench` flag, and so do the errors
// about it.
type Options struct {
	Scenarios  []string // --scenario: names from ScenarioNames; empty or "all": every one
	Messages   int      // --messages per data set; 0: each scenario's default
	Partitions int      // --partitions per topic; 0: DefaultPartitions
	Keys       int      // --keys: distinct keys; 0: DefaultKeys
	Rounds     int      // --rounds: alternating rounds; 0: DefaultRounds
	Nums       []int    // --num: the io scenario's Num values; empty: DefaultNums
	Chan       int      // --chan: ChannelBufferSize / databus Chan; 0: DefaultChan
	Contenders []string // --contenders; empty: each scenario's default set

	ScalePartitions []int // --scale-partitions: the scale scenario's partition counts; empty: DefaultScalePartitions
	ScaleKeys       []int // --scale-keys: its key counts; empty: DefaultScaleKeys
	ScaleValues     []int // --scale-values: its value sizes in bytes; empty: DefaultScaleValues

	MaxInFlight   int           // --max-in-flight: stall scenario; 0: DefaultMaxInFlight
	StallDuration time.Duration // --duration: stall sampling after MaxInFlight is reached; 0: DefaultStallDuration
	RunTimeout    time.Duration // --timeout per run; 0: DefaultRunTimeout
	// RunTimeoutArg is how the errors of a run that outlasts RunTimeout
	// name it, as the caller's user set it: the flag, its value and
	// where the value came from ("--timeout 2s (from ORDERLY_TIMEOUT)").
	// "": "--timeout" and RunTimeout, or "5m0s, --timeout's default".
	RunTimeoutArg string

	Out      string    // --out: directory for results.json, table.md and chart.png; "": none
	Progress io.Writer // progress lines; nil: discarded
	Command  string    // the command line, recorded in the report
}

// ErrOptions is wrapped by Run's errors about invalid Options.
var ErrOptions = errors.New("bench: invalid options")

// setDefaults validates the options, naming the flag of the first problem,
// and sets the zero fields to their defaults.
func (o *Options) setDefaults() error {
	for _, c := range []struct {
		flag     string
		v        any
		negative bool
	}{
		{"messages", o.Messages, o.Messages < 0},
		{"partitions", o.Partitions, o.Partitions < 0},
		{"keys", o.Keys, o.Keys < 0},
		{"rounds", o.Rounds, o.Rounds < 0},
		{"chan", o.Chan, o.Chan < 0},
		{"max-in-flight", o.MaxInFlight, o.MaxInFlight < 0},
		{"duration", o.StallDuration, o.StallDuration < 0},
		{"timeout", o.RunTimeout, o.RunTimeout < 0},
	} {
		if c.negative {
			return fmt.Errorf("%w: --%s %v: must not be negative (0: the default)", ErrOptions, c.flag, c.v)
		}
	}
	for _, l := range []struct {
		flag string
		v    []int
	}{{"num", o.Nums}, {"scale-partitions", o.ScalePartitions}, {"scale-keys", o.ScaleKeys}, {"scale-values", o.ScaleValues}} {
		if slices.ContainsFunc(l.v, func(n int) bool { return n <= 0 }) {
			return fmt.Errorf("%w: --%s %v: every value must be positive", ErrOptions, l.flag, l.v)
		}
	}
	for _, c := range o.Contenders {
		if _, err := newContender(c); err != nil {
			return fmt.Errorf("%w: --contenders: %w", ErrOptions, err)
		}
	}
	if o.Partitions == 0 {
		o.Partitions = DefaultPartitions
	}
	if o.Keys == 0 {
		o.Keys = DefaultKeys
	}
	if o.Rounds == 0 {
		o.Rounds = DefaultRounds
	}
	if len(o.Nums) == 0 {
		o.Nums = DefaultNums
	}
	if len(o.ScalePartitions) == 0 {
		o.ScalePartitions = DefaultScalePartitions
	}
	if len(o.ScaleKeys) == 0 {
		o.ScaleKeys = DefaultScaleKeys
	}
	if len(o.ScaleValues) == 0 {
		o.ScaleValues = DefaultScaleValues
	}
	if o.Chan == 0 {
		o.Chan = DefaultChan
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.StallDuration == 0 {
		o.StallDuration = DefaultStallDuration
	}
	switch {
	case o.RunTimeoutArg != "":
	case o.RunTimeout == 0:
		o.RunTimeoutArg = fmt.Sprintf("%v, --timeout's default", DefaultRunTimeout)
	default:
		o.RunTimeoutArg = fmt.Sprintf("--timeout %v", o.RunTimeout)
	}
	if o.RunTimeout == 0 {
		o.RunTimeout = DefaultRunTimeout
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = []string{"all"}
	}
	if i := slices.Index(o.Scenarios, "all"); i >= 0 { // all, and any extra named beside it
		o.Scenarios = slices.Concat(ScenarioNames, slices.DeleteFunc(slices.Clone(o.Scenarios), func(s string) bool {
			return s == "all" || slices.Contains(ScenarioNames, s)
		}))
	}
	for _, s := range o.Scenarios {
		if s == ScaleScenario {
			continue
		}
		if _, err := o.scenario(s); err != nil {
			return fmt.Errorf("%w: --scenario: %w", ErrOptions, err)
		}
	}
	return nil
}

// Run starts a broker, runs the scenarios and returns the report; with
// opts.Out it also writes results.json, table.md and chart.png there. Results of the
// scenarios that finished are returned with the first error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	b, err := broker.Start(broker.Config{})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	h := &harness{opts: opts, b: b, data: map[dataSpec]*dataset{}, rep: newReport(opts)}
	defer func() {
		if h.b != nil {
			h.b.Close()
		}
	}()
	for _, name := range opts.Scenarios {
		if name == ScaleScenario {
			if err = h.runScale(ctx); err != nil {
				break
			}
			continue
		}
		s, _ := opts.scenario(name)
		if err = h.runScenario(ctx, s); err != nil {
			err = fmt.Errorf("bench: scenario %s: %w", name, err)
			break
		}
	}
	h.rep.finish()
	if opts.Out != "" && len(h.rep.Rows)+len(h.rep.Stall) > 0 {
		files, werr := h.rep.WriteFiles(opts.Out)
		err = errors.Join(err, werr)
		for _, f := range files {
			h.logf("wrote %s", f)
		}
	}
	return h.rep, err
}

type harness struct {
	opts Options
	b    *broker.Broker
	data map[dataSpec]*dataset
	rep  *Report
}

// restartBroker replaces the broker with an empty one, forgetting every
// data set.
func (h *harness) restartBroker() error {
	h.b.Close()
	h.b = nil
	h.data = map[dataSpec]*dataset{}
	b, err := broker.Start(broker.Config{})
	if err != nil {
		return fmt.Errorf("restart broker: %w", err)
	}
	h.b = b
	h.logf("restarted the broker empty, so that earlier data sets are not in the heap")
	return nil
}

var groupSeq atomic.Int64

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.opts.Progress, "bench: "+format+"\n", args...)
}

// dataset produces spec's data once per broker.
func (h *harness) dataset(ctx context.Context, spec dataSpec) (*dataset, error) {
	if ds, ok := h.data[spec]; ok {
		return ds, nil
	}
	h.logf("producing %d messages (%d partitions, %d keys) to %s", spec.Messages, spec.Partitions, spec.Keys, spec.topic())
	ds, err := produce(ctx, h.b, spec)
	if err != nil {
		return nil, err
	}
	h.logf("produced in %v (%.0f msg/s); hottest key %s holds %d (%.2f%%)",
		ds.Produced.Round(time.Millisecond), float64(ds.Messages)/ds.Produced.Seconds(), ds.HotKey, ds.HotCount, 100*ds.HotShare())
	h.data[spec] = ds
	return ds, nil
}

// numIndependent is implemented by contenders whose result does not depend
// on RunSpec.Num; they run once per round for cases that differ only in Num.
type numIndependent interface{ IgnoresNum() bool }

func (h *harness) runScenario(ctx context.Context, s scenario) error {
	if s.Name == "stall" && len(h.data) > 0 {
		// Measure memory without the earlier scenarios' data in the heap.
		if err := h.restartBroker(); err != nil {
			return err
		}
	}
	ds, err := h.dataset(ctx, s.Data)
	if err != nil {
		return err
	}
	names := h.opts.contenders(s)
	if len(names) == 0 {
		h.logf("scenario %s: no contenders selected, skipped", s.Name)
		return nil
	}
	h.rep.addScenario(s, ds)
	if s.Name == "stall" {
		return h.runStall(ctx, s, ds, names)
	}
	data := map[string]*dataset{} // by case label: its own data set, or the scenario's
	for _, c := range s.Cases {
		data[c.Label] = ds
		if c.Messages > 0 {
			spec := s.Data
			spec.Messages = c.Messages
			cds, err := h.dataset(ctx, spec)
			if err != nil {
				return err
			}
			data[c.Label] = cds
		}
	}
	rows := make(map[[2]string]*Row)
	for _, c := range s.Cases {
		for _, name := range names {
			rows[[2]string{c.Label, name}] = h.rep.addRow(s, c, name)
		}
		if c.Baseline == "cap" {
			h.addCapRows(s, c, data[c.Label])
		}
	}
	for round := 1; round <= h.opts.Rounds; round++ {
		if err := h.runRound(ctx, s, data, names, rows, round); err != nil {
			return err
		}
	}
	return nil
}

// addCapRows adds the computed key-order caps: with the nominal cost of a
// call, the scenario's baseline, and with its cost measured here.
func (h *harness) addCapRows(s scenario, c caseSpec, ds *dataset) {
	cost := c.Work.Cost(1)
	r := h.rep.addRow(s, c, "cap")
	r.Median = ds.KeyOrderCap(cost)
	r.Note = fmt.Sprintf("key-order cap: %d msgs / (hottest key %d msgs x %v)", ds.Messages, ds.HotCount, cost)
	measured := measureCost(c.Work, 1, 200)
	r = h.rep.addRow(s, c, CapMeasured)
	r.Median = ds.KeyOrderCap(measured)
	r.Note = fmt.Sprintf("key-order cap with the measured cost of one %v call: %v", cost, measured.Round(time.Microsecond))
	h.logf("%s: hottest key %d of %d messages: cap %s msg/s at %v per message, %s msg/s at the measured %v", s.Name,
		ds.HotCount, ds.Messages, FormatCount(ds.KeyOrderCap(cost)), cost, FormatCount(r.Median), measured.Round(time.Microsecond))
}

// runRound runs every case with every contender once, in the round's
// order (roundOrder), each case on its data set (data, by label).
func (h *harness) runRound(ctx context.Context, s scenario, data map[string]*dataset, names []string, rows map[[2]string]*Row, round int) error {
	reuse := map[string]Result{} // numIndependent results of this round
	names = roundOrder(names, round)
	for _, c := range s.Cases {
		for _, name := range names {
			row := rows[[2]string{c.Label, name}]
			con, _ := newContender(name)
			spec := h.spec(s, c, data[c.Label])
			key := fmt.Sprintf("%s %d %v %v", name, spec.Size, spec.Ticker, spec.Work)
			if ni, ok := con.(numIndependent); ok && ni.IgnoresNum() {
				if r, ok := reuse[key]; ok {
					row.add(r)
					row.Note = "one goroutine per partition: measured once per round"
					continue
				}
			}
			progress := fmt.Sprintf("%s %s round %d/%d %s:", s.Name, c.Label, round, h.opts.Rounds, name)
			run := h.runOne
			if s.Name == ScaleScenario {
				run = h.runOneRSS
			}
			r, err := run(ctx, con, spec)
			if err != nil {
				h.logf("%s %v", progress, err)
				return fmt.Errorf("case %s round %d: %w", c.Label, round, err)
			}
			h.logf("%s %d msgs in %v = %s msg/s (incl. join %v; CPU %v/msg)", progress, r.Handled,
				r.Elapsed.Round(time.Millisecond), FormatCount(r.Rate()), r.Total.Round(time.Millisecond), r.CPUPerMsg())
			reuse[key] = r
			row.add(r)
		}
	}
	return nil
}

// roundOrder is the order contenders run in round (from 1): names rotated
// by round-1 (A B C, B C A, C A B, ...; A B, B A, ... for two), so that
// over len(names) rounds each runs in each position once and no contender
// always runs first or last. Rotation keeps the cyclic order: a contender
// always follows the same other one, except when it runs first.
func roundOrder(names []string, round int) []string {
	if len(names) == 0 {
		return nil
	}
	k := (round - 1) % len(names)
	return append(slices.Clone(names[k:]), names[:k]...)
}

func (h *harness) spec(s scenario, c caseSpec, ds *dataset) RunSpec {
	maxInFlight := 0 // orderly's own default
	if s.Name == "stall" {
		maxInFlight = h.opts.MaxInFlight
	}
	return RunSpec{
		Addrs:       h.b.Addrs(),
		Topic:       ds.Topic,
		GroupID:     fmt.Sprintf("bench-%s-%d", s.Name, groupSeq.Add(1)),
		Expected:    ds.Messages,
		Num:         c.Num,
		Size:        c.Size,
		Chan:        h.opts.Chan,
		Ticker:      c.Ticker,
		MaxInFlight: maxInFlight,
		Work:        c.Work,
	}
}

// CapMeasured is the pseudo contender of the key-order cap computed with
// the measured, rather than nominal, cost of a call.
const CapMeasured = "cap (measured cost)"

// measureCost is the mean wall time of n sequential calls of w on size
// messages on one goroutine: what time.Sleep really takes here.
func measureCost(w Work, size, n int) time.Duration {
	w.FailRate, w.Stall = 0, false
	start := time.Now()
	for range n {
		w.Do(context.Background(), 0, 0, 1, size)
	}
	return time.Since(start) / time.Duration(n)
}

// runOne runs a contender once under the run timeout, after a garbage
// collection, so that the garbage of earlier runs is not collected (and
// its CPU not counted) inside this one's timed window. The error of a run
// the timeout cut short names it (Options.RunTimeoutArg).
func (h *harness) runOne(ctx context.Context, con Contender, spec RunSpec) (Result, error) {
	rctx, cancel := context.WithTimeout(ctx, h.opts.RunTimeout)
	defer cancel()
	runtime.GC()
	cpu := processCPU()
	r, err := con.Run(rctx, spec)
	r.CPU = processCPU() - cpu
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("the run outlasted %s: %w", h.opts.RunTimeoutArg, err)
	}
	return r, err
}

// processCPU is the user+system CPU time the process has used; 0 where
// the platform does not report it.
func processCPU() time.Duration {
	d, _ := cputime.Process()
	return d
}

// WriteFiles writes results.json, table.md (the Markdown table printed on
// stdout) and, when the io scenario ran, chart.png into dir, and returns
// the paths written.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	results := filepath.Join(dir, ResultsFile)
	if err := r.writeJSON(results); err != nil {
		return nil, err
	}
	table := filepath.Join(dir, TableFile)
	f, err := os.Create(table)
	if err != nil {
		return []string{results}, fmt.Errorf("bench: %w", err)
	}
	err = r.WriteMarkdown(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return []string{results}, fmt.Errorf("bench: write %s: %w", table, err)
	}
	files := []string{results, table}
	chart := filepath.Join(dir, ChartFile)
	drawn, err := r.writeChart(chart)
	if err != nil {
		return files, err
	}
	if drawn {
		files = append(files, chart)
	}
	scale := filepath.Join(dir, ScaleChartFile)
	drawn, err = r.writeScaleChart(scale)
	if drawn {
		files = append(files, scale)
	}
	return files, err
}
