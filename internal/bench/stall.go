package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// StallResult is the memory of one contender whose handler never returns,
// sampled after fetching has stopped.
type StallResult struct {
	Contender   string      `json:"contender"`
	MaxInFlight int         `json:"max_in_flight"`
	InFlight    int64       `json:"in_flight_at_full"` // -1: the contender does not report it
	FullAfter   Seconds     `json:"full_after_s"`      // run start to the first sample
	Duration    Seconds     `json:"duration_s"`        // first to last sample
	Samples     []MemSample `json:"samples"`

	HeapFirst uint64  `json:"heap_first"`
	HeapLast  uint64  `json:"heap_last"`
	HeapPeak  uint64  `json:"heap_peak"`
	HeapSlope float64 `json:"heap_slope_bps"` // least squares, bytes per second
	RSSFirst  uint64  `json:"rss_first"`
	RSSLast   uint64  `json:"rss_last"`
	RSSPeak   uint64  `json:"rss_peak"`
	RSSSlope  float64 `json:"rss_slope_bps"`
	HWM       uint64  `json:"rss_hwm"` // VmHWM: the process's peak RSS so far
	Flat      bool    `json:"flat"`
	Note      string  `json:"note"`
}

// MemSample is one memory reading.
type MemSample struct {
	T         Seconds `json:"t_s"`
	HeapInuse uint64  `json:"heap_inuse"`
	RSS       uint64  `json:"rss"`
	InFlight  int64   `json:"in_flight"`
}

// inFlighter is implemented by contenders that can tell how many messages
// they hold fetched but not finished; false while no run is active.
type inFlighter interface{ InFlight() (int64, bool) }

// Stall scenario timing.
const (
	stallPoll       = 100 * time.Millisecond
	stallSettle     = 2 * time.Second // in-flight unchanged this long counts as full
	stallWarmup     = 5 * time.Second // for contenders that do not report in-flight
	flatSlack       = 4 << 20         // growth allowed on top of flatFraction
	flatFraction    = 0.05
	stallMaxSamples = 10 // progress lines per stall run
)

// FlatGrowth is the most memory may grow over the stall sampling and still
// count as flat: 5% of the first sample plus 4 MiB.
func FlatGrowth(first uint64) uint64 { return uint64(float64(first)*flatFraction) + flatSlack }

func (h *harness) runStall(ctx context.Context, s scenario, ds *dataset, names []string) error {
	c := s.Cases[0]
	for _, name := range names {
		con, _ := newContender(name)
		spec := h.spec(s, c, ds)
		spec.UntilCancel = true
		debug.FreeOSMemory() // start from a collected heap and a trimmed RSS
		res, err := h.stallOne(ctx, con, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		h.logf("stall %s: heap %s -> %s (peak %s), RSS %s -> %s (peak %s) over %v: flat=%v",
			name, mib(res.HeapFirst), mib(res.HeapLast), mib(res.HeapPeak), mib(res.RSSFirst), mib(res.RSSLast),
			mib(res.RSSPeak), res.Duration.Duration().Round(time.Second), res.Flat)
		h.rep.Stall = append(h.rep.Stall, res)
	}
	return nil
}

// errEndedEarly: a contender's run ended before the stall was sampled.
var errEndedEarly = errors.New("the run ended early")

// stallOne runs con until the stall has been sampled, then cancels it and
// returns the samples, or the sampling's and the run's errors.
func (h *harness) stallOne(ctx context.Context, con Contender, spec RunSpec) (*StallResult, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	ended := make(chan struct{}) // closed once Run has returned and set runErr
	start := time.Now()
	go func() {
		defer close(ended)
		_, runErr = con.Run(rctx, spec)
	}()
	res, serr := h.sampleStall(rctx, con, spec, start, ended)
	cancel()
	<-ended
	if err := errors.Join(serr, runErr); err != nil {
		return nil, err
	}
	return res, nil
}

// sampleStall waits until the contender's in-flight count reaches
// MaxInFlight (or stops changing), then samples memory every interval for
// Options.StallDuration. It gives up with errEndedEarly once ended is
// closed.
func (h *harness) sampleStall(ctx context.Context, con Contender, spec RunSpec, start time.Time, ended <-chan struct{}) (*StallResult, error) {
	res := &StallResult{Contender: con.Name(), MaxInFlight: spec.MaxInFlight, InFlight: -1}
	inf, reports := con.(inFlighter)
	if !reports {
		res.Note = fmt.Sprintf("no in-flight count: sampled after a %v warm-up", min(stallWarmup, h.opts.StallDuration))
	}
	read := func() MemSample {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := MemSample{T: secs(time.Since(start)), HeapInuse: ms.HeapInuse, RSS: procStatus("VmRSS"), InFlight: -1}
		if reports {
			if n, ok := inf.InFlight(); ok {
				s.InFlight = n
			}
		}
		res.HeapPeak = max(res.HeapPeak, s.HeapInuse)
		res.RSSPeak = max(res.RSSPeak, s.RSS)
		return s
	}
	tick := time.NewTicker(stallPoll)
	defer tick.Stop()
	deadline := start.Add(h.opts.RunTimeout)
	var last int64 = -1
	lastChange := time.Now()
	for full := false; !full; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ended:
			return nil, fmt.Errorf("%w, before MaxInFlight was reached", errEndedEarly)
		case now := <-tick.C:
			s := read()
			switch {
			case !reports:
				full = now.Sub(start) >= min(stallWarmup, h.opts.StallDuration)
			case s.InFlight >= int64(spec.MaxInFlight):
				full = true
			case s.InFlight != last:
				last, lastChange = s.InFlight, now
			default:
				full = s.InFlight > 0 && now.Sub(lastChange) >= stallSettle
			}
			if now.After(deadline) {
				atEnd := ""
				if s.InFlight >= 0 {
					atEnd = fmt.Sprintf(": %d in flight at the end", s.InFlight)
				}
				return nil, fmt.Errorf("in-flight did not settle within %s%s", h.opts.RunTimeoutArg, atEnd)
			}
		}
	}
	res.FullAfter = secs(time.Since(start))
	interval := min(time.Second, max(h.opts.StallDuration/10, 50*time.Millisecond))
	tick.Reset(interval)
	first := time.Now()
	res.Samples = append(res.Samples, read())
	res.InFlight = res.Samples[0].InFlight
	h.logf("stall %s: full after %v (in flight %d); sampling every %v for %v", res.Contender,
		res.FullAfter.Duration().Round(time.Millisecond), res.InFlight, interval, h.opts.StallDuration)
	every := max(int(h.opts.StallDuration/interval)/stallMaxSamples, 1)
	for time.Since(first) < h.opts.StallDuration {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ended:
			return nil, fmt.Errorf("%w, during the memory sampling", errEndedEarly)
		case <-tick.C:
			s := read()
			res.Samples = append(res.Samples, s)
			if len(res.Samples)%every == 0 {
				h.logf("stall %s: t=%.1fs heap %s RSS %s in flight %d", res.Contender, float64(s.T), mib(s.HeapInuse), mib(s.RSS), s.InFlight)
			}
		}
	}
	res.summarize()
	return res, nil
}

// summarize fills the first/last/slope fields and the verdict.
func (res *StallResult) summarize() {
	ss := res.Samples
	if len(ss) == 0 {
		return
	}
	f, l := ss[0], ss[len(ss)-1]
	res.Duration = l.T - f.T
	res.HeapFirst, res.HeapLast = f.HeapInuse, l.HeapInuse
	res.RSSFirst, res.RSSLast = f.RSS, l.RSS
	ts := make([]float64, len(ss))
	heap := make([]float64, len(ss))
	rss := make([]float64, len(ss))
	for i, s := range ss {
		ts[i], heap[i], rss[i] = float64(s.T), float64(s.HeapInuse), float64(s.RSS)
	}
	res.HeapSlope = Slope(ts, heap)
	res.RSSSlope = Slope(ts, rss)
	res.HWM = procStatus("VmHWM")
	grew := func(a, b uint64) bool { return b > a && b-a > FlatGrowth(a) }
	res.Flat = !grew(res.HeapFirst, res.HeapLast) && !grew(res.RSSFirst, res.RSSLast)
}

// Slope is the least-squares slope of ys over xs; 0 with fewer than two
// distinct xs.
func Slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// procStatus reads a "kB" field of /proc/self/status in bytes; 0 where
// there is none (not Linux).
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return n << 10
	}
	return 0
}

func mib(b uint64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

func writeStallMarkdown(w io.Writer, rs []*StallResult) {
	fmt.Fprintf(w, "| stall | MaxInFlight | in flight | heap first | heap last | heap peak | heap slope | RSS first | RSS last | RSS peak | RSS slope | over | flat |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rs {
		inflight := "n/a"
		if r.InFlight >= 0 {
			inflight = strconv.FormatInt(r.InFlight, 10)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %.1f KiB/s | %s | %s | %s | %.1f KiB/s | %s | %v |\n",
			r.Contender, r.MaxInFlight, inflight, mib(r.HeapFirst), mib(r.HeapLast), mib(r.HeapPeak), r.HeapSlope/1024,
			mib(r.RSSFirst), mib(r.RSSLast), mib(r.RSSPeak), r.RSSSlope/1024, fmtDur(r.Duration), r.Flat)
	}
	fmt.Fprintf(w, "\nflat: heap and RSS each grew less than 5%% + 4 MiB from the first sample after MaxInFlight was reached to the last; process memory, the in-process broker included.\n")
}
