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

	// Interrupted is why the run stopped before every planned record was
	// produced and committed (a signal, --timeout); "": it completed.
	Interrupted string

	Planned       int // transfers planned
	PlannedPoison int // undecodable records planned (--poison)
	Produced      int // transfers written to the topic
	Poison        int // undecodable records written to the topic
	ProduceTime   time.Duration

	Ledger     ledger.Report
	Stats      group.Stats
	Mismatched int   // accounts whose balance is not what their booked transfers give
	Lost       int64 // records behind the committed offsets that were never finished

	ConsumeTime time.Duration // first Do call to last successful one
	Elapsed     time.Duration

	Start     map[int32]int64 // partition offsets before producing
	HW        map[int32]int64 // high watermarks at the end
	Committed map[int32]int64 // the group's committed offsets, read back from the broker
}

// countProduced sets Produced and Poison from the high watermarks: the
// producer writes the plan's records in order, and stops (on an
// interruption) after the ones it has handed to the client are
// acknowledged, so the records in the topic are the plan's first ones.
func (r *demoReport) countProduced(p *plan) {
	written := 0
	for part, hw := range r.HW {
		written += int(hw - r.Start[part])
	}
	r.Poison = p.poisonIn(written)
	r.Produced = written - r.Poison
}

// committedOffsets is every partition's committed offset, a partition
// without a commit counting as committed at its start offset.
func (r *demoReport) committedOffsets() map[int32]int64 {
	c := make(map[int32]int64, len(r.HW))
	maps.Copy(c, r.Start)
	maps.Copy(c, r.Committed)
	return c
}

// committedOK reports whether every partition's committed offset equals its
// high watermark (a partition without a commit is fine only if nothing was
// written to it).
func (r *demoReport) committedOK() bool {
	return broker.CaughtUpTo(r.committedOffsets(), r.HW)
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

// notHandled is how many produced transfers Do has not booked: 0 in a
// complete run; in an interrupted one, what was queued, in flight or not
// yet fetched when it stopped (above the committed offsets, unless lost).
func (r *demoReport) notHandled() int { return r.Produced - r.Ledger.Distinct }

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
	if r.Interrupted != "" {
		line("run", "interrupted (%s): the figures are what happened until then", r.Interrupted)
	} else {
		line("run", "complete")
	}
	line("topic", "%s", r.Topic)
	line("partitions", "%d", r.Partitions)
	line("accounts", "%d", r.Keys)
	line("group", "%s", r.Group)
	line("planned", "%d", r.Planned)
	line("produced", "%d", r.Produced)
	if r.PlannedPoison > 0 {
		line("poison produced", "%d", r.Poison)
	}
	line("produce time", "%v", r.ProduceTime.Round(time.Millisecond))
	line("handled", "%d", r.Stats.Handled)
	line("not handled", "%d", r.notHandled())
	line("lost", "%d", r.Lost)
	line("duplicates", "%d", r.Ledger.Duplicates)
	line("order violations", "%d", r.Ledger.OrderViolations)
	if r.Ledger.Unknown > 0 {
		line("unknown records", "%d", r.Ledger.Unknown)
	}
	line("decode errors", "%d", r.Stats.DecodeErrors)
	line("balances mismatched", "%d", r.Mismatched)
	line("do calls", "%d", r.Stats.Batches+r.Stats.Failures+r.Stats.DeferredCalls)
	line("failed calls", "%d", r.Stats.Failures)
	line("split calls", "%d", r.Stats.Splits)
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
// An interrupted run is judged on what it did: nothing behind the
// committed offsets lost, nothing booked twice or out of order, balances
// right for what was booked.
func (r *demoReport) verdict() error {
	var probs []string
	bad := func(cond bool, format string, args ...any) {
		if cond {
			probs = append(probs, fmt.Sprintf(format, args...))
		}
	}
	l := r.Ledger
	complete := r.Interrupted == ""
	bad(r.Lost > 0, "lost %d records behind the committed offsets", r.Lost)
	bad(complete && r.Produced < r.Planned, "produced %d of %d transfers", r.Produced, r.Planned)
	bad(complete && r.notHandled() > 0, "%d of %d produced transfers not handled", r.notHandled(), r.Produced)
	bad(l.OrderViolations > 0, "%d order violations", l.OrderViolations)
	bad(l.Duplicates > 0, "%d duplicates", l.Duplicates)
	bad(l.Unknown > 0, "%d unknown records", l.Unknown)
	bad(r.Stats.DecodeErrors > int64(r.Poison) || complete && r.Stats.DecodeErrors != int64(r.Poison),
		"%d decode errors, %d poison records produced", r.Stats.DecodeErrors, r.Poison)
	bad(r.Mismatched > 0, "%d account balances mismatched", r.Mismatched)
	bad(complete && !r.committedOK(), "committed offsets %s != high watermarks %s", offsets(r.Committed), offsets(r.HW))
	if len(probs) == 0 {
		return nil
	}
	if !complete {
		probs = append(probs, r.Interrupted)
	}
	return fmt.Errorf("%w: %s", errDemoFailed, strings.Join(probs, "; "))
}

// summary is the one line an interrupted run ends with.
func (r *demoReport) summary() string {
	return fmt.Sprintf("%s: %d of %d transfers produced, %d handled, %d records committed, %d lost",
		r.Interrupted, r.Produced, r.Planned, r.Stats.Handled, r.committedCount(), r.Lost)
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
