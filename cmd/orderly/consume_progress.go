package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/bench"
)

// consumeProgress shows consume's state: on a terminal one line redrawn
// every 250ms; elsewhere a plain line every --progress-every (1m).
type consumeProgress struct {
	p     *progress // for show: redraw and width handling
	every time.Duration
	start time.Time
	stats func() group.Stats
	ctr   *sinkCounters
	gate  *gate
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startConsumeProgress starts the display per mode: auto (live on a
// terminal, else a line every `every`), on (a line every `every` even on
// a terminal), off (nil: nothing until the final line).
func startConsumeProgress(mode string, every time.Duration, out io.Writer, start time.Time, stats func() group.Stats, ctr *sinkCounters, gt *gate) *consumeProgress {
	width, tty := terminal(out)
	if mode == "off" {
		return nil
	}
	redraw := tty && mode == "auto"
	if redraw {
		every = 250 * time.Millisecond
	}
	c := &consumeProgress{p: &progress{out: out, redraw: redraw, width: width}, every: every, start: start,
		stats: stats, ctr: ctr, gate: gt, stop: make(chan struct{})}
	c.wg.Go(c.loop)
	return c
}

func (c *consumeProgress) loop() {
	t := time.NewTicker(c.every)
	defer t.Stop()
	prevAt, prevHandled := time.Now(), int64(0)
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			s := c.stats()
			rate := float64(s.Handled-prevHandled) / now.Sub(prevAt).Seconds()
			prevAt, prevHandled = now, s.Handled
			c.p.show(c.line(now, s, rate))
		}
	}
}

func (c *consumeProgress) line(now time.Time, s group.Stats, rate float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6.1fs  ", now.Sub(c.start).Seconds())
	if w := worstPartition(s); w != "" {
		b.WriteString(w + "  ")
	}
	// waiting: records held in memory for a retry's backoff or a deferral
	// (one a 429's pause deferred, say, which a restart finds in the
	// commit metadata and waits out): why nothing is sent. Parked records
	// (Unordered with --data) are shown apart: Stats.Parked counts them
	// until they finish, in Do or waiting.
	fmt.Fprintf(&b, "%s/s  handled %s  committed %s  %s  waiting %s  retries %d  dead-lettered %d",
		bench.FormatCount(rate), bench.FormatCount(float64(s.Handled)), bench.FormatCount(float64(s.Committed)), claimedText(s),
		bench.FormatCount(float64(s.Retrying+s.Deferred)), s.Retries, deadLettered(s))
	fmt.Fprintf(&b, "  throttled %d  failed calls %d  timed out %d  endpoint errors %d", c.ctr.throttled.Load(), c.ctr.failed.Load(), s.TimedOut, c.ctr.endpoint.Load())
	if last := c.ctr.lastEndpointError(); last != "" {
		fmt.Fprintf(&b, " (last: %s)", last)
	}
	if s.Parked > 0 {
		fmt.Fprintf(&b, "  parked %d", s.Parked)
	}
	if d := c.gate.remaining(); d > 0 {
		fmt.Fprintf(&b, "  paused %.1fs more", d.Seconds())
	}
	if s.Outage {
		b.WriteString("  outage: backing off")
	}
	return b.String()
}

// close stops the display and ends a redrawn line.
func (c *consumeProgress) close() {
	if c == nil {
		return
	}
	close(c.stop)
	c.wg.Wait()
	if c.p.redraw {
		fmt.Fprintln(c.p.out)
	}
}

func deadLettered(s group.Stats) int64 {
	d := s.DeadLettered
	return d.MaxAttempts + d.Rejected + d.Timeout + d.Poison
}

// finalLine is what consume prints when it stops: how it stopped and what
// it did, as "name N" pairs.
func finalLine(ctx context.Context, start time.Time, s group.Stats, ctr *sinkCounters, gt *gate) string {
	how := "stopped"
	if ctx.Err() != nil {
		how = fmt.Sprintf("stopped (%v)", context.Cause(ctx))
	}
	d := s.DeadLettered
	return fmt.Sprintf("orderly consume: %s after %.1fs: handled %d, committed %d, retries %d, "+
		"dead-lettered %d (rejected %d, max_attempts %d, timeout %d, poison %d), skipped %d, "+
		"calls %d, ok %d, throttled %d, paused %.1fs, failed calls %d, timed out %d, endpoint errors %d, rejected calls %d, split calls %d, items named retry or defer %d, items named reject %d, outages %d, "+
		"offset resets %d, skipped by reset %d",
		how, time.Since(start).Seconds(), s.Handled, s.Committed, s.Retries,
		deadLettered(s), d.Rejected, d.MaxAttempts, d.Timeout, d.Poison, s.DeadLetterSkipped,
		ctr.calls.Load(), ctr.ok.Load(), ctr.throttled.Load(), gt.pausedFor().Seconds(), ctr.failed.Load(),
		s.TimedOut, ctr.endpoint.Load(), ctr.rejected.Load(), s.Splits, ctr.itemRetry.Load(), ctr.itemRej.Load(), s.Outages,
		s.OffsetResets, s.SkippedByReset)
}
