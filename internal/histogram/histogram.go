// Package histogram is a fixed-bucket histogram of durations that many
// goroutines add to without locks (one atomic add per observation and
// bucket) and that is read as a snapshot: what Orderly's Stats reports of
// Do durations and end-to-end latency, and what the admin package exports
// as Prometheus histograms.
package histogram

import (
	"sync/atomic"
	"time"
)

// Bounds are the buckets' upper bounds in seconds (the last bucket, above
// the last bound, is +Inf): from half a millisecond, where a no-op Do
// lands, to a minute, where MsgTimeout's default is near.
var Bounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// boundsNanos are Bounds in nanoseconds, for Observe.
var boundsNanos = func() []int64 {
	out := make([]int64, len(Bounds))
	for i, b := range Bounds {
		out[i] = int64(b * 1e9)
	}
	return out
}()

// H is a histogram. The zero value is ready to use.
type H struct {
	counts [17]atomic.Uint64 // len(Bounds)+1
	sum    atomic.Int64      // nanoseconds
}

// Observe adds one duration. A negative one (a record timestamp ahead of
// this machine's clock) counts as 0, so that it cannot pull Sum, and with
// it the mean, below what was observed.
func (h *H) Observe(d time.Duration) {
	ns := max(int64(d), 0)
	i := 0
	for i < len(boundsNanos) && ns > boundsNanos[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(ns)
}

// Snapshot is a histogram's counts at one moment.
type Snapshot struct {
	// Counts[i] is the number of observations in bucket i: at most
	// Bounds[i] seconds and above Bounds[i-1]; the last is above every
	// bound. Not cumulative.
	Counts [17]uint64
	Count  uint64
	Sum    time.Duration
}

// AddTo adds h's counts to s (to sum the histograms of many workers).
func (h *H) AddTo(s *Snapshot) {
	for i := range h.counts {
		c := h.counts[i].Load()
		s.Counts[i] += c
		s.Count += c
	}
	s.Sum += time.Duration(h.sum.Load())
}

// Quantile estimates the q-quantile (0 < q < 1) as the upper bound of the
// bucket it falls in; the +Inf bucket reports the last bound, which the
// quantile is above (QuantileBucket tells that case apart). 0 when empty.
func (s *Snapshot) Quantile(q float64) time.Duration {
	le, _ := s.QuantileBucket(q)
	return le
}

// QuantileBucket is the bucket the q-quantile (0 < q < 1) falls in: its
// upper bound le, which the quantile is at most. When it falls in the
// +Inf bucket (above every bound), le is the last bound and above is
// true: the quantile is more than le, by how much the histogram cannot
// say. 0 and false when empty.
func (s *Snapshot) QuantileBucket(q float64) (le time.Duration, above bool) {
	if s.Count == 0 {
		return 0, false
	}
	rank := uint64(q * float64(s.Count))
	var seen uint64
	for i, c := range s.Counts {
		seen += c
		if seen > rank {
			if i == len(Bounds) {
				break
			}
			return time.Duration(Bounds[i] * 1e9), false
		}
	}
	return time.Duration(Bounds[len(Bounds)-1] * 1e9), true
}
