package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/bench"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
)

// demoReport is everything the demo prints at the end, one figure a line.
type demoReport struct {
	Topic      string
	Partitions int32
	Keys       int
	Group      string

	Produced    int // transfers produced (the ledger's expectation)
	Poison      int // undecodable records produced on purpose
	ProduceTime time.Duration

	Ledger     ledger.Report
	Stats      group.Stats
	Mismatched int // accounts whose final balance is wrong

	ConsumeTime time.Duration // first Do call to last successful one
	Elapsed     time.Duration

	Start     map[int32]int64 // partition offsets before producing
	HW        map[int32]int64 // high watermarks at the end
	Committed map[int32]int64 // the group's committed offsets, read back from the broker
}

// committedOK reports whether every partition's committed offset equals its
// high watermark; a partition without a commit counts as committed at its
// start offset (fine only if nothing was written to it).
func (r *demoReport) committedOK() bool {
	c := make(map[int32]int64, len(r.HW))
	maps.Copy(c, r.Start)
	maps.Copy(c, r.Committed)
	return broker.CaughtUpTo(c, r.HW)
}

// committedCount is how many of this run's records are behind the
// committed offsets.
func (r *demoReport) committedCount() int64 {
	var n int64
	for p, c := range r.Committed {
		n += c - r.Start[p]
	}
	return n
}

func (r *demoReport) throughput() float64 {
	if r.ConsumeTime <= 0 {
		return 0
	}
	return float64(r.Ledger.Distinct) / r.ConsumeTime.Seconds()
}

// write prints the report: `name: value`, one a line.
func (r *demoReport) write(w io.Writer) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%s: %s\n", name, fmt.Sprintf(format, args...))
	}
	line("topic", "%s", r.Topic)
	line("partitions", "%d", r.Partitions)
	line("accounts", "%d", r.Keys)
	line("group", "%s", r.Group)
	line("produced", "%d", r.Produced)
	if r.Poison > 0 {
		line("poison produced", "%d", r.Poison)
	}
	line("produce time", "%v", r.ProduceTime.Round(time.Millisecond))
	line("handled", "%d", r.Stats.Handled)
	line("lost", "%d", r.Ledger.Lost)
	line("duplicates", "%d", r.Ledger.Duplicates)
	line("order violations", "%d", r.Ledger.OrderViolations)
	if r.Ledger.Unknown > 0 {
		line("unknown records", "%d", r.Ledger.Unknown)
	}
	line("decode errors", "%d", r.Stats.DecodeErrors)
	line("balances mismatched", "%d", r.Mismatched)
	line("do calls", "%d", r.Stats.Batches+r.Stats.Failures)
	line("failed calls", "%d", r.Stats.Failures)
	line("retries", "%d", r.Stats.Retries)
	line("mean batch", "%.1f", float64(r.Stats.Handled)/float64(max(r.Stats.Batches, 1)))
	line("throughput", "%.0f msg/s", r.throughput())
	line("latency p50", "%v", bench.RoundDuration(r.Ledger.P50))
	line("latency p99", "%v", bench.RoundDuration(r.Ledger.P99))
	line("latency max", "%v", bench.RoundDuration(r.Ledger.Max))
	line("committed", "%d", r.committedCount())
	ok := r.committedOK()
	line("committed == high watermark", "%s", yes(ok))
	if !ok {
		line("committed offsets", "%s", offsets(r.Committed))
		line("high watermarks", "%s", offsets(r.HW))
	}
	line("elapsed", "%v", r.Elapsed.Round(time.Millisecond))
}

// verdict returns an error naming every problem the report shows, or nil.
func (r *demoReport) verdict() error {
	var probs []string
	bad := func(cond bool, format string, args ...any) {
		if cond {
			probs = append(probs, fmt.Sprintf(format, args...))
		}
	}
	l := r.Ledger
	bad(l.Lost > 0, "lost %d of %d transfers", l.Lost, l.Produced)
	bad(l.OrderViolations > 0, "%d order violations", l.OrderViolations)
	bad(l.Duplicates > 0, "%d duplicates", l.Duplicates)
	bad(l.Unknown > 0, "%d unknown records", l.Unknown)
	bad(r.Stats.DecodeErrors != int64(r.Poison), "%d decode errors, %d poison records produced", r.Stats.DecodeErrors, r.Poison)
	bad(r.Mismatched > 0, "%d account balances mismatched", r.Mismatched)
	bad(!r.committedOK(), "committed offsets %s != high watermarks %s", offsets(r.Committed), offsets(r.HW))
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errDemoFailed, strings.Join(probs, "; "))
}

// errDemoFailed is wrapped by the error runDemo returns when the check
// fails.
var errDemoFailed = errors.New("demo check failed")

// offsets formats per-partition offsets as "0:123 1:456".
func offsets(m map[int32]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, p := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", p, m[p])
	}
	return b.String()
}
