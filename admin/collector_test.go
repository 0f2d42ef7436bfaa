package admin

import (
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/orderly-go/orderly/group"
)

// registry is a pedantic registry holding Collector(src): it checks that
// what Collect sends matches what Describe said.
func registry(t *testing.T, src Source) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(Collector(src)); err != nil {
		t.Fatalf("register: %v", err)
	}
	return reg
}

// TestCollectorValues: every series of a known snapshot, after a round
// trip through the text format, has the value Stats gives it.
func TestCollectorValues(t *testing.T) {
	f := &fakeGroup{s: sampleStats(), ready: true, live: false, why: "1 workers stuck"}
	sc := gatherText(t, registry(t, f))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"orderly_records_total", pl("orders", 0, "outcome=handled"), 570},
		{"orderly_records_total", pl("orders", 0, "outcome=dead_lettered"), 3},
		{"orderly_records_total", pl("orders", 0, "outcome=skipped"), 2},
		{"orderly_records_total", pl("orders", 0, "outcome=resumed"), 5},
		{"orderly_records_total", pl("orders", 0, "outcome=parked"), 4},
		{"orderly_records_total", pl("orders", 1, "outcome=handled"), 330},
		{"orderly_failed_attempts_total", pl("orders", 0), 9},
		{"orderly_consumergroup_lag", pl("orders", 1), 120},
		{"orderly_consumergroup_current_offset", pl("orders", 0), 580},
		{"orderly_partition_frontier_offset", pl("orders", 1), 400},
		{"orderly_partition_high_watermark", pl("orders", 1), 520},
		{"orderly_inflight_records", pl("orders", 1), 20},
		{"orderly_undispatched_records", pl("orders", 1), 20},
		{"orderly_held_records", pl("orders", 0), 1},
		{"orderly_finished_above_frontier_records", pl("orders", 1), 8},
		{"orderly_commit_metadata_bytes", pl("orders", 1), 40},
		{"orderly_oldest_unfinished_age_seconds", pl("orders", 1), 95},
		{"orderly_partition_fetch_paused", pl("orders", 1), 1},
		{"orderly_partition_fetch_paused", pl("orders", 0), 0},
		{"orderly_partition_status", pl("orders", 1), 5},
		{"orderly_partition_status", pl("orders", 0), 1},
		{"orderly_group_status", nil, 5},
		{"orderly_handler_calls_total", []string{"result=ok"}, 40},
		{"orderly_handler_calls_total", []string{"result=error"}, 3},
		{"orderly_dead_letters_total", []string{"reason=max_attempts", "destination=topic:orders.dlq"}, 3},
		{"orderly_dead_letters_total", []string{"reason=poison", "destination=topic:orders.dlq"}, 2},
		{"orderly_dead_letters_total", []string{"reason=timeout", "destination=topic:orders.dlq"}, 0},
		{"orderly_errors_total", []string{"cause=network"}, 2},
		{"orderly_errors_total", []string{"cause=rebalance"}, 1},
		{"orderly_errors_total", []string{"cause=other"}, 0},
		{"orderly_fetched_records_total", nil, 1000},
		{"orderly_retries_total", nil, 7},
		{"orderly_offset_resets_total", nil, 2},
		{"orderly_offset_reset_skipped_records_total", nil, 50},
		{"orderly_out_of_range_fetches_total", nil, 1},
		{"orderly_control_records_passed_total", nil, 4},
		{"orderly_rebalances_total", nil, 3},
		{"orderly_partitions_revoked_total", nil, 1},
		{"orderly_partitions_claimed", nil, 2},
		{"orderly_workers", nil, 2},
		{"orderly_workers_busy", nil, 1},
		{"orderly_workers_stuck", nil, 1},
		{"orderly_oldest_call_age_seconds", nil, 95},
		{"orderly_handler_timeouts_total", nil, 2},
		{"orderly_handler_stuck_calls_total", nil, 1},
		{"orderly_dead_letters_pending", nil, 1},
		{"orderly_ready", nil, 1},
		{"orderly_live", nil, 0},
	} {
		labels := append([]string{"consumergroup=ledger"}, c.labels...)
		if got := sc.value(t, c.name, labels...); got != c.want {
			t.Errorf("%s%v: got %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Committed unknown (-1): no current_offset series for partition 1.
	if ms := sc.find("orderly_consumergroup_current_offset", pl("orders", 1)...); len(ms) != 0 {
		t.Errorf("current_offset of a partition never read back: got %d series, want none", len(ms))
	}
}

// TestRecordsHelpNamesEveryOutcome: the HELP text of
// orderly_records_total names every outcome label value the collector
// exports (what a reader of the scrape sees to know what the series are).
func TestRecordsHelpNamesEveryOutcome(t *testing.T) {
	sc := gatherText(t, registry(t, &fakeGroup{s: sampleStats()}))
	f := sc["orderly_records_total"]
	if f == nil {
		t.Fatal("no orderly_records_total")
	}
	outcomes := map[string]bool{}
	for _, m := range f.GetMetric() {
		outcomes[labelMap(m)["outcome"]] = true
	}
	if len(outcomes) != 5 {
		t.Errorf("outcomes: got %v, want handled, dead_lettered, parked, skipped and resumed", outcomes)
	}
	for o := range outcomes {
		if !strings.Contains(f.GetHelp(), " "+o+" (") {
			t.Errorf("the HELP of orderly_records_total does not name outcome %q: %s", o, f.GetHelp())
		}
	}
}

// TestCollectorHistograms: Stats' non-cumulative buckets become
// cumulative Prometheus buckets; +Inf is the count.
func TestCollectorHistograms(t *testing.T) {
	f := &fakeGroup{s: sampleStats()}
	sc := gatherText(t, registry(t, f))
	ms := sc.find("orderly_handler_duration_seconds", "consumergroup=ledger")
	if len(ms) != 1 || ms[0].Histogram == nil {
		t.Fatalf("orderly_handler_duration_seconds: got %v, want one histogram", ms)
	}
	h := ms[0].Histogram
	if h.GetSampleCount() != 8 || h.GetSampleSum() != 61 {
		t.Fatalf("count %d sum %v, want 8 and 61", h.GetSampleCount(), h.GetSampleSum())
	}
	want := map[float64]uint64{0.0005: 5, 0.001: 5, 0.0025: 5, 0.005: 7, 30: 7, 60: 7}
	for _, b := range h.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: got %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	bs := h.GetBucket()
	if n := len(bs); n != len(group.HistogramBounds)+1 {
		t.Fatalf("buckets: got %d, want %d (one per bound, and +Inf)", n, len(group.HistogramBounds)+1)
	}
	if inf := bs[len(bs)-1]; !math.IsInf(inf.GetUpperBound(), 1) || inf.GetCumulativeCount() != 8 {
		t.Errorf("last bucket: got le=%v %d, want +Inf 8 (the count)", inf.GetUpperBound(), inf.GetCumulativeCount())
	}
	lat := sc.find("orderly_end_to_end_latency_seconds", "consumergroup=ledger")
	if len(lat) != 1 || lat[0].Histogram.GetSampleCount() != 3 {
		t.Fatalf("orderly_end_to_end_latency_seconds: got %v, want a histogram of 3", lat)
	}
}

// TestCollectorNames: the families exported are exactly MetricNames, each
// with its type, every series with consumergroup; _total only on
// counters.
func TestCollectorNames(t *testing.T) {
	fams, err := registry(t, &fakeGroup{s: sampleStats()}).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.GetName())
		isCounter := f.GetType() == dto.MetricType_COUNTER
		if strings.HasSuffix(f.GetName(), "_total") != isCounter {
			t.Errorf("%s: type %v: _total goes on counters only, and on every counter", f.GetName(), f.GetType())
		}
		for _, m := range f.GetMetric() {
			if labelMap(m)[labelGroup] != "ledger" {
				t.Errorf("%s: a series without consumergroup=ledger: %v", f.GetName(), labelMap(m))
			}
		}
	}
	want := MetricNames()
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("families:\n got %v\nwant %v", got, want)
	}
}

// TestCollectorTwoGroups: two groups' collectors share a registry.
func TestCollectorTwoGroups(t *testing.T) {
	a, b := &fakeGroup{s: sampleStats()}, &fakeGroup{s: sampleStats()}
	b.s.GroupID = "audit"
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(Collector(a)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(Collector(b)); err != nil {
		t.Fatalf("a second group's collector: %v", err)
	}
	sc := gatherText(t, reg)
	for _, id := range []string{"ledger", "audit"} {
		if got := sc.value(t, "orderly_consumergroup_lag", append([]string{"consumergroup=" + id}, pl("orders", 1)...)...); got != 120 {
			t.Errorf("%s lag: got %v, want 120", id, got)
		}
	}
}

// TestCollectorDuplicatePartition: an old claim still ending while a new
// one of the same partition started shows once, as the newest generation.
func TestCollectorDuplicatePartition(t *testing.T) {
	f := &fakeGroup{s: sampleStats()}
	f.set(func(s *group.Stats) {
		old := s.PartitionStats[1]
		old.Generation, old.Lag = 2, 999
		s.PartitionStats = append(s.PartitionStats[:1], old, s.PartitionStats[1])
	})
	sc := gatherText(t, registry(t, f))
	if got := sc.value(t, "orderly_consumergroup_lag", pl("orders", 1)...); got != 120 {
		t.Fatalf("lag of the partition claimed twice: got %v, want 120 (the newest claim's)", got)
	}
}

// TestCollectorCountersNeverDecrease: a group-wide counter read a little
// lower than in the scrape before is reported at the earlier value.
func TestCollectorCountersNeverDecrease(t *testing.T) {
	f := &fakeGroup{s: sampleStats()}
	reg := registry(t, f)
	if got := gatherText(t, reg).value(t, "orderly_retries_total"); got != 7 {
		t.Fatalf("retries: got %v, want 7", got)
	}
	f.set(func(s *group.Stats) { s.Retries, s.Batches = 6, 41 })
	sc := gatherText(t, reg)
	if got := sc.value(t, "orderly_retries_total"); got != 7 {
		t.Fatalf("retries read one lower: got %v, want 7 (the value reported before)", got)
	}
	if got := sc.value(t, "orderly_handler_calls_total", "result=ok"); got != 41 {
		t.Fatalf("calls ok: got %v, want 41", got)
	}
}

// TestCollectorNoHealth: a Source without Ready and Live exports neither
// orderly_ready nor orderly_live, and the rest as usual.
func TestCollectorNoHealth(t *testing.T) {
	src := statsOnly{&fakeGroup{s: sampleStats()}}
	sc := gatherText(t, registry(t, src))
	if sc["orderly_ready"] != nil || sc["orderly_live"] != nil {
		t.Fatal("orderly_ready/orderly_live exported for a source without health")
	}
	if got := sc.value(t, "orderly_workers_stuck"); got != 1 {
		t.Fatalf("workers stuck: got %v, want 1", got)
	}
}

type statsOnly struct{ f *fakeGroup }

func (s statsOnly) Stats() group.Stats { return s.f.Stats() }

// TestCollectorCardinality: the README's series counts ("Cardinality"):
// per claimed partition 18, or 17 before its committed offset is read
// back (no current_offset); per group 56 with one dead-letter destination,
// each histogram counted once.
func TestCollectorCardinality(t *testing.T) {
	f := &fakeGroup{s: sampleStats(), ready: true, live: true}
	mfs, err := registry(t, f).Gather()
	if err != nil {
		t.Fatal(err)
	}
	perPartition, perGroup := map[string]int{}, 0
	destinations := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := labelMap(m)
			if d, ok := labels["destination"]; ok {
				destinations[d] = true
			}
			if p, ok := labels["partition"]; ok {
				perPartition[p]++
			} else {
				perGroup++
			}
		}
	}
	if f.s.PartitionStats[0].Committed < 0 || f.s.PartitionStats[1].Committed >= 0 || len(destinations) != 1 {
		t.Fatalf("sample: partition 0 must be read back and 1 not, with one destination; got committed %d and %d, destinations %v",
			f.s.PartitionStats[0].Committed, f.s.PartitionStats[1].Committed, destinations)
	}
	if perPartition["0"] != 18 || perPartition["1"] != 17 || perGroup != 56 {
		t.Errorf("series: got %d for a partition read back, %d for one not, %d for the group; want 18, 17 and 56 (the README's Cardinality)",
			perPartition["0"], perPartition["1"], perGroup)
	}
}
