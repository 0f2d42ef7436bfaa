package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/bench"
)

// progress shows the run's live state: on a terminal one line redrawn with
// \r every 250ms, elsewhere (--progress=on into a pipe or file) a plain line
// every second.
type progress struct {
	out      io.Writer
	redraw   bool
	every    time.Duration
	start    time.Time
	produced func() int64
	total    int64
	stats    func() group.Stats

	width int // terminal columns, 0: unknown

	stop chan struct{}
	wg   sync.WaitGroup
	last string // the line on screen, for redraw mode
}

// terminal reports whether w is a terminal, and its width.
func terminal(w io.Writer) (width int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return 0, false
	}
	return terminalWidth(f)
}

// startProgress starts showing progress per mode (auto, on, off); it
// returns nil for off, and for auto when out is not a terminal.
func startProgress(mode string, out io.Writer, start time.Time, total int64, produced func() int64, stats func() group.Stats) *progress {
	width, tty := terminal(out)
	if mode == "off" || (mode == "auto" && !tty) {
		return nil
	}
	p := &progress{out: out, redraw: tty, every: time.Second, start: start, total: total,
		produced: produced, stats: stats, width: width, stop: make(chan struct{})}
	if tty {
		p.every = 250 * time.Millisecond
	}
	p.wg.Go(p.loop)
	return p
}

func (p *progress) loop() {
	t := time.NewTicker(p.every)
	defer t.Stop()
	prevAt, prevHandled := time.Now(), int64(0)
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			s := p.stats()
			rate := float64(s.Handled-prevHandled) / now.Sub(prevAt).Seconds()
			prevAt, prevHandled = now, s.Handled
			p.show(p.line(now, s, rate))
		}
	}
}

func (p *progress) line(now time.Time, s group.Stats, rate float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6.1fs  ", now.Sub(p.start).Seconds())
	if w := worstPartition(s); w != "" {
		b.WriteString(w + "  ")
	}
	fmt.Fprintf(&b, "%s/s  handled %s", bench.FormatCount(rate), bench.FormatCount(float64(s.Handled)))
	if n := p.produced(); n < p.total {
		fmt.Fprintf(&b, " of %s produced", bench.FormatCount(float64(n)))
	}
	if s.Partitions == 0 {
		fmt.Fprintf(&b, "  committed %s  retries %d  %s", bench.FormatCount(float64(s.Committed)), s.Retries, claimedText(s))
		return b.String()
	}
	fmt.Fprintf(&b, "  committed %s  lag %s  retries %d  in flight %s",
		bench.FormatCount(float64(s.Committed)), bench.FormatCount(float64(s.Lag)), s.Retries, bench.FormatCount(float64(s.InFlight)))
	return b.String()
}

// claimedText is what a progress line says of the claimed partitions:
// their lag and records in flight, or "no partition claimed". Lag is
// summed over the claimed partitions and records in flight are let go
// with their claims, so with none claimed (before the join, a standby
// member, a line drawn once Run has returned) both would read 0 whatever
// the topics hold.
func claimedText(s group.Stats) string {
	if s.Partitions == 0 {
		return "no partition claimed"
	}
	return fmt.Sprintf("lag %s  in flight %s", bench.FormatCount(float64(s.Lag)), bench.FormatCount(float64(s.InFlight)))
}

// worstPartition is the group's status when it is not OK: its worst
// partition's status and topic/partition ("STALL orders/3"), and how many
// other partitions are not OK ("STALL orders/3 +2"); "" when every
// claimed partition is OK (or none is claimed).
func worstPartition(s group.Stats) string {
	if s.Status.Code == group.StatusOK || s.Status.Code == 0 {
		return ""
	}
	worst, others := "", 0
	for _, ps := range s.PartitionStats {
		switch {
		case ps.Status.Code == group.StatusOK || ps.Status.Code == 0: // 0: not evaluated yet
		case worst == "" && ps.Status.Code == s.Status.Code:
			worst = fmt.Sprintf("%s %s/%d", ps.Status.Code, ps.Topic, ps.Partition)
		default:
			others++
		}
	}
	if worst == "" { // cannot happen: the group's status is a partition's
		return s.Status.Code.String()
	}
	if others > 0 {
		worst += fmt.Sprintf(" +%d", others)
	}
	return worst
}

func (p *progress) show(line string) {
	if !p.redraw {
		fmt.Fprintln(p.out, line)
		return
	}
	if p.width > 1 && len(line) >= p.width {
		line = line[:p.width-1] // a wrapped line cannot be redrawn with \r
	}
	pad := ""
	if n := len(p.last) - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.out, "\r%s%s", line, pad)
	p.last = line
}

// close stops the display; in redraw mode it ends the line so that what
// follows starts on a fresh one.
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	if p.redraw {
		// Leave the final state on screen, with the mean rate of the run.
		// Run has returned: the line shows no lag or records in flight
		// (none claimed), the report below has them from the broker.
		now := time.Now()
		s := p.stats()
		p.show(p.line(now, s, float64(s.Handled)/now.Sub(p.start).Seconds()))
		fmt.Fprintln(p.out)
	}
}
