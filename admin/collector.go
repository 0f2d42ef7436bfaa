package admin

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-go/orderly/group"
)

// collector is Collector's prometheus.Collector: each Collect takes one
// Stats snapshot and turns it into const metrics; nothing runs between
// scrapes.
type collector struct {
	src    Source
	health Health // nil when src does not report it

	records, failedAttempts *prometheus.Desc
	partGauges              []*prometheus.Desc // partitionGauges' descs
	groupDescs              []*prometheus.Desc // groupMetrics' descs
	calls, deadLetters      *prometheus.Desc
	errorsBy                *prometheus.Desc
	doDuration, latency     *prometheus.Desc
	ready, live             *prometheus.Desc // nil without health

	// floor is, per group-wide counter (in the order Collect emits them),
	// the highest value reported: a counter made of several atomics read
	// one after another (Stats.Retries is two) may read a little lower
	// than the scrape before, which Prometheus would take for a reset.
	mu    sync.Mutex
	floor []float64
}

// Collector returns a prometheus.Collector of g's metrics, to register in
// a registry of the service's own (several groups' collectors can share
// one: each carries its group's consumergroup as a constant label). Every
// Collect takes one g.Stats() snapshot; when g also has Ready and Live
// (a *group.Group does), orderly_ready and orderly_live are exported too.
// It calls g.Stats() once now, for the group ID.
func Collector(g Source) prometheus.Collector {
	c := &collector{src: g}
	c.health, _ = g.(Health)
	constLabels := prometheus.Labels{labelGroup: g.Stats().GroupID}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	c.records = desc(recordsName, recordsHelp, "topic", "partition", "outcome")
	c.failedAttempts = desc(failedAttemptsName, failedAttemptsHelp, partitionLabels...)
	for _, m := range partitionGauges {
		c.partGauges = append(c.partGauges, desc(m.name, m.help, partitionLabels...))
	}
	for _, m := range groupMetrics {
		c.groupDescs = append(c.groupDescs, desc(m.name, m.help))
	}
	c.calls = desc(callsName, callsHelp, "result")
	c.deadLetters = desc(deadLettersName, deadLettersHelp, "reason", "destination")
	c.errorsBy = desc(errorsName, errorsHelp, "cause")
	c.doDuration = desc(doDurationName, doDurationHelp)
	c.latency = desc(latencyName, latencyHelp)
	if c.health != nil {
		c.ready = desc(readyName, readyHelp)
		c.live = desc(liveName, liveHelp)
	}
	return c
}

// Describe implements prometheus.Collector: every desc Collect uses, so
// that the registry checks them (a checked collector).
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.records
	ch <- c.failedAttempts
	for _, d := range c.partGauges {
		ch <- d
	}
	for _, d := range c.groupDescs {
		ch <- d
	}
	ch <- c.calls
	ch <- c.deadLetters
	ch <- c.errorsBy
	ch <- c.doDuration
	ch <- c.latency
	if c.health != nil {
		ch <- c.ready
		ch <- c.live
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	c.collectPartitions(ch, s.PartitionStats)
	c.collectGroup(ch, &s)
	ch <- histogram(c.doDuration, &s.DoDuration)
	ch <- histogram(c.latency, &s.Latency)
	if c.health != nil {
		live, _ := c.health.Live()
		ch <- constMetric(c.ready, gauge, boolValue(c.health.Ready()))
		ch <- constMetric(c.live, gauge, boolValue(live))
	}
}

// collectPartitions emits the per-partition series. PartitionStats is
// sorted by topic and partition; should a partition appear twice (an old
// claim still ending while a new one starts), only the newest generation
// is emitted, since a registry refuses two series with the same labels.
// Its outcomes include every ended claim's and its redelivered parked
// messages', so the counters stay monotonic.
func (c *collector) collectPartitions(ch chan<- prometheus.Metric, parts []group.PartitionStats) {
	for i := 0; i < len(parts); i++ {
		p := &parts[i]
		for i+1 < len(parts) && parts[i+1].Topic == p.Topic && parts[i+1].Partition == p.Partition {
			i++
			if parts[i].Generation >= p.Generation {
				p = &parts[i]
			}
		}
		part := strconv.FormatInt(int64(p.Partition), 10)
		o := &p.Outcomes
		ch <- constMetric(c.records, counter, float64(o.Handled), p.Topic, part, outcomeHandled)
		ch <- constMetric(c.records, counter, float64(o.DeadLettered), p.Topic, part, outcomeDeadLettered)
		ch <- constMetric(c.records, counter, float64(o.Parked), p.Topic, part, outcomeParked)
		ch <- constMetric(c.records, counter, float64(o.Skipped), p.Topic, part, outcomeSkipped)
		ch <- constMetric(c.records, counter, float64(o.Resumed), p.Topic, part, outcomeResumed)
		ch <- constMetric(c.failedAttempts, counter, float64(o.FailedAttempts), p.Topic, part)
		for j, m := range partitionGauges {
			if v, ok := m.value(p); ok {
				ch <- constMetric(c.partGauges[j], gauge, v, p.Topic, part)
			}
		}
	}
}

// collectGroup emits the group-wide series; counters never go below what
// an earlier scrape reported (see floor).
func (c *collector) collectGroup(ch chan<- prometheus.Metric, s *group.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	slot := 0
	mono := func(v float64) float64 {
		if slot == len(c.floor) {
			c.floor = append(c.floor, v)
		}
		v = max(v, c.floor[slot])
		c.floor[slot] = v
		slot++
		return v
	}
	for i, m := range groupMetrics {
		v := m.value(s)
		if m.typ == counter {
			v = mono(v)
		}
		ch <- constMetric(c.groupDescs[i], m.typ, v)
	}
	ch <- constMetric(c.calls, counter, mono(float64(s.Batches)), resultOK)
	ch <- constMetric(c.calls, counter, mono(float64(s.Failures)), resultErr)
	ch <- constMetric(c.calls, counter, mono(float64(s.DeferredCalls)), resultDeferred)
	dest := s.DeadLetterDestination
	if dest == "" {
		dest = destinationNone
	}
	for _, r := range deadLetterReasons {
		ch <- constMetric(c.deadLetters, counter, mono(float64(r.value(&s.DeadLettered))), r.name, dest)
	}
	for _, e := range errorCauses {
		ch <- constMetric(c.errorsBy, counter, mono(float64(e.value(&s.ErrorsBy))), e.name)
	}
}

// constMetric is prometheus.NewConstMetric; an error (a label that is not
// UTF-8) becomes an invalid metric, which the registry reports and skips.
func constMetric(d *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, typ, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// histogram turns a Stats histogram (non-cumulative counts, the last
// above every bound) into a Prometheus one (cumulative buckets; +Inf is
// the count).
func histogram(d *prometheus.Desc, h *group.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(group.HistogramBounds))
	var cum uint64
	for i, le := range group.HistogramBounds {
		cum += h.Counts[i]
		buckets[le] = cum
	}
	m, err := prometheus.NewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
