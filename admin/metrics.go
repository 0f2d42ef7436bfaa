package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-go/orderly/group"
)

// The metrics. Names, labels and meanings are fixed: dashboards and alert
// rules (deploy/) use them, and the README lists them. Every
// series carries consumergroup (a constant label of the collector, so that
// the collectors of several groups can share a registry); per-partition
// series carry topic and partition too. Base units (seconds, bytes),
// _total only on counters.

// labelGroup is the label every series carries: kafka_exporter's name.
const labelGroup = "consumergroup"

// partitionLabels are the variable labels of per-partition series.
var partitionLabels = []string{"topic", "partition"}

// Outcome label values of orderly_records_total.
const (
	outcomeHandled      = "handled"
	outcomeDeadLettered = "dead_lettered"
	outcomeSkipped      = "skipped"
	outcomeResumed      = "resumed"
	outcomeParked       = "parked"
)

// partitionMetric is a per-partition gauge read from PartitionStats; ok
// false leaves the series out of this scrape.
type partitionMetric struct {
	name, help string
	value      func(p *group.PartitionStats) (v float64, ok bool)
}

// partitionGauges are the per-partition gauges, in the order scraped.
var partitionGauges = []partitionMetric{
	{"orderly_consumergroup_lag",
		"Records of the partition not finished by this group: high watermark minus the commit frontier (kafka_exporter's name; it computes lag from the committed offset instead, so it also counts orderly_finished_above_frontier_records).",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.Lag), true }},
	{"orderly_consumergroup_current_offset",
		"The group's committed offset as the coordinator holds it, read back with OffsetFetch every Status.ReadBack (default 5s); absent until first read, and while the coordinator holds none.",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.Committed), p.Committed >= 0 }},
	{"orderly_partition_frontier_offset",
		"The offset Orderly marked for commit: every record below it has finished; absent before the claim knows its start.",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.Frontier), p.Frontier >= 0 }},
	{"orderly_partition_high_watermark",
		"The partition's next offset to be written, as of the last fetch or read-back (ListOffsets).",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.HighWatermark), true }},
	{"orderly_inflight_records",
		"Records fetched, dispatched and not finished yet.",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.InFlight), true }},
	{"orderly_undispatched_records",
		"Records read while the partition was out of its in-flight share, or held back while the workers had a ready backlog; not dispatched yet.",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.Undispatched), true }},
	{"orderly_held_records",
		"Records waiting first in their lanes: for a retry's backoff, a deferral, or their dead letter to be written.",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.Held), true }},
	{"orderly_finished_above_frontier_records",
		"Records finished above the commit frontier, carried in the commit metadata (as of the last commit).",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.FinishedAbove), true }},
	{"orderly_commit_metadata_bytes",
		"Size of the last commit's metadata (the finished set above the frontier, the waiting records).",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.MetadataBytes), true }},
	{"orderly_oldest_unfinished_age_seconds",
		"How long the record at the commit frontier has been unfinished; 0 when nothing is.",
		func(p *group.PartitionStats) (float64, bool) { return p.OldestUnfinished.Seconds(), true }},
	{"orderly_partition_fetch_paused",
		"1 while fetching of the partition is paused: its in-flight share is spent and a channel's worth is read ahead, or the workers have a ready backlog and what the share has room for is read ahead.",
		func(p *group.PartitionStats) (float64, bool) { return boolValue(p.Paused), true }},
	{"orderly_partition_status",
		"The partition's status with Burrow's numbers: 1 OK, 2 WARN (lag growing), 4 STOP (no commit with lag), 5 STALL (commits, offset not moving, with lag), 6 REWIND (committed offset went back).",
		func(p *group.PartitionStats) (float64, bool) { return float64(p.Status.Code), true }},
}

// groupMetric is a group-wide counter or gauge read from Stats.
type groupMetric struct {
	name, help string
	typ        prometheus.ValueType
	value      func(s *group.Stats) float64
}

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// groupMetrics are the group-wide series without labels of their own, in
// the order scraped.
var groupMetrics = []groupMetric{
	{"orderly_fetched_records_total", "Records received from Kafka.", counter,
		func(s *group.Stats) float64 { return float64(s.Fetched) }},
	{"orderly_handler_panics_total", "Do calls that panicked (also counted in orderly_handler_calls_total{result=\"error\"}).", counter,
		func(s *group.Stats) float64 { return float64(s.Panics) }},
	{"orderly_handler_split_calls_total", "Do calls on part of a batch that failed as a whole, made to find its failing items.", counter,
		func(s *group.Stats) float64 { return float64(s.Splits) }},
	{"orderly_handler_cancelled_calls_total", "Failed Do calls that returned after their ctx was cancelled by a revoke or shutdown.", counter,
		func(s *group.Stats) float64 { return float64(s.Cancelled) }},
	{"orderly_handler_timeouts_total", "Do calls that ran past MsgTimeout, hung or not: counted when the watchdog cancels one, or when one returns past MsgTimeout first (one that returns counts as a failed attempt).", counter,
		func(s *group.Stats) float64 { return float64(s.TimedOut) }},
	{"orderly_handler_stuck_calls_total", "Do calls that ran past MsgTimeout plus its grace: their worker was reported stuck.", counter,
		func(s *group.Stats) float64 { return float64(s.Stuck) }},
	{"orderly_retries_total", "Records to be handed out again after a failed attempt, counted where the retry is decided (not a last attempt, which is dead-lettered).", counter,
		func(s *group.Stats) float64 { return float64(s.Retries) }},
	{"orderly_decode_errors_total", "Records whose Handler.New failed (poison): dead-lettered, or skipped without a destination.", counter,
		func(s *group.Stats) float64 { return float64(s.DecodeErrors) }},
	{"orderly_dead_letters_skipped_total", "Records to dead-letter with no destination configured: skipped and committed past.", counter,
		func(s *group.Stats) float64 { return float64(s.DeadLetterSkipped) }},
	{"orderly_dead_letter_write_errors_total", "Failed writes of dead letters (retried; the source offset waits).", counter,
		func(s *group.Stats) float64 { return float64(s.DeadLetterErrors) }},
	{"orderly_outages_total", "Times most deliveries (retries included) failed across many lanes and the group backed off as a whole.", counter,
		func(s *group.Stats) float64 { return float64(s.Outages) }},
	{"orderly_dropped_records_total", "Queued, never-failed records let go on revoke (the next owner handles them).", counter,
		func(s *group.Stats) float64 { return float64(s.Dropped) }},
	{"orderly_abandoned_records_total", "Records left unfinished at revoke: waiting for a retry, or still in Do after DrainTimeout.", counter,
		func(s *group.Stats) float64 { return float64(s.Abandoned) }},
	{"orderly_redelivered_records_total", "Unordered: records of stuck calls handed to other workers.", counter,
		func(s *group.Stats) float64 { return float64(s.Redelivered) }},
	{"orderly_park_errors_total", "Failed writes of parked records (retried).", counter,
		func(s *group.Stats) float64 { return float64(s.ParkErrors) }},
	{"orderly_offset_resets_total", "Claims that started from the reset position (Sarama.Consumer.Offsets.Initial) because the committed offset was out of range.", counter,
		func(s *group.Stats) float64 { return float64(s.OffsetResets) }},
	{"orderly_offset_reset_skipped_records_total", "Records those resets skipped, from the committed offset to where the claim started: never handled by the group.", counter,
		func(s *group.Stats) float64 { return float64(s.SkippedByReset) }},
	{"orderly_out_of_range_fetches_total", "Fetches that ran out of range while consuming (retention or DeleteRecords passed the member).", counter,
		func(s *group.Stats) float64 { return float64(s.OutOfRangeMidRun) }},
	{"orderly_control_records_passed_total", "Offsets of control records and aborted transactions the commit frontier passed while its partition was idle.", counter,
		func(s *group.Stats) float64 { return float64(s.ControlSkipped) }},
	{"orderly_metadata_full_total", "Times a partition stopped taking records because its finished set no longer fit CommitMetadata.", counter,
		func(s *group.Stats) float64 { return float64(s.MetadataFull) }},
	{"orderly_commit_metadata_rejected_total", "Partitions whose commits the broker refused with OFFSET_METADATA_TOO_LARGE (they commit without metadata since).", counter,
		func(s *group.Stats) float64 { return float64(s.MetadataRejected) }},
	{"orderly_rebalances_total", "Partition claims that started (Stats.Claims): each rebalance adds the partitions it assigned to this member, the first join included; a cooperative rebalance that moves nothing here adds nothing.", counter,
		func(s *group.Stats) float64 { return float64(s.Claims) }},
	{"orderly_partitions_revoked_total", "Partition claims that ended (Stats.Revokes): revoked by a rebalance, lost, or let go at shutdown.", counter,
		func(s *group.Stats) float64 { return float64(s.Revokes) }},
	{"orderly_partitions_claimed", "Partitions this member holds now.", gauge,
		func(s *group.Stats) float64 { return float64(s.Partitions) }},
	{"orderly_retrying_records", "Records waiting out a retry's backoff, first in their lanes.", gauge,
		func(s *group.Stats) float64 { return float64(s.Retrying) }},
	{"orderly_deferred_records", "Records waiting out a deferral (BatchError.Defer) or an outage's probe delay.", gauge,
		func(s *group.Stats) float64 { return float64(s.Deferred) }},
	{"orderly_parked_records", "Unordered records parked on disk under DataPath.", gauge,
		func(s *group.Stats) float64 { return float64(s.Parked) }},
	{"orderly_dead_letters_pending", "Records waiting for their dead letter to be written.", gauge,
		func(s *group.Stats) float64 { return float64(s.DeadLetterPending) }},
	{"orderly_outage", "1 while an outage is on (see orderly_outages_total).", gauge,
		func(s *group.Stats) float64 { return boolValue(s.Outage) }},
	{"orderly_group_paused", "1 while Group.Pause is in effect.", gauge,
		func(s *group.Stats) float64 { return boolValue(s.Paused) }},
	{"orderly_workers", "Worker goroutines calling Do (Config.Num).", gauge,
		func(s *group.Stats) float64 { return float64(len(s.Workers)) }},
	{"orderly_workers_busy", "Workers in a Do call now.", gauge,
		func(s *group.Stats) float64 {
			n := 0
			for _, w := range s.Workers {
				if w.Busy {
					n++
				}
			}
			return float64(n)
		}},
	{"orderly_workers_stuck", "Workers in a Do call past MsgTimeout plus its grace now (/healthz fails while any is).", gauge,
		func(s *group.Stats) float64 { return float64(s.StuckWorkers) }},
	{"orderly_oldest_call_age_seconds", "How long the longest Do call running now has run; 0 when none runs.", gauge,
		func(s *group.Stats) float64 {
			var oldest float64
			for _, w := range s.Workers {
				oldest = max(oldest, w.BatchAge.Seconds())
			}
			return oldest
		}},
	{"orderly_group_status", "The group's status, its worst partition's, with Burrow's numbers (see orderly_partition_status); 1 with no partitions.", gauge,
		func(s *group.Stats) float64 { return float64(s.Status.Code) }},
}

// labelled families and the histograms: their names and help.
const (
	recordsName         = "orderly_records_total"
	recordsHelp         = "Records finished, by outcome: handled (Do returned nil), dead_lettered (its dead letter written), parked (Unordered with a DataPath: moved to the parked queue on disk, counted each time; Do sees it again from there, and the record counts again under its partition by how that ends: handled, dead_lettered, or parked once more), skipped (undecodable or no dead-letter destination), resumed (a previous owner finished it, per the commit metadata, or this member did before its final commit was lost: then it counts under handled too). Monotonic per partition over the group's life while this member holds it."
	failedAttemptsName  = "orderly_failed_attempts_total"
	failedAttemptsHelp  = "Failed attempts charged to the partition's records, counted when each finishes (a record handled at its third attempt adds 2; one dead-lettered after Retry.MaxAttempts 3 adds 3)."
	callsName           = "orderly_handler_calls_total"
	callsHelp           = "Do calls, by result: ok (returned nil), deferred (its BatchError named only deferrals, within MsgTimeout: no failure; its other records are done), or error (returned any other error, panicked, or ran past MsgTimeout); split calls included."
	deadLettersName     = "orderly_dead_letters_total"
	deadLettersHelp     = "Dead letters written, by reason (max_attempts, rejected, timeout, poison) and destination (topic:NAME, local:DIR, or none)."
	errorsName          = "orderly_errors_total"
	errorsHelp          = "Consumer, commit and offset errors by cause: network, coordinator, rebalance, leader, auth, topic, out_of_range, metadata, offsets, other."
	doDurationName      = "orderly_handler_duration_seconds"
	doDurationHelp      = "Duration of Do calls (split calls included)."
	latencyName         = "orderly_end_to_end_latency_seconds"
	latencyHelp         = "End-to-end latency of each Do call's oldest record: record timestamp to done."
	readyName           = "orderly_ready"
	readyHelp           = "1 when the group is ready (/readyz): joined, session not lost, not stopping (0 from the moment Run's ctx ends, through the drain)."
	liveName            = "orderly_live"
	liveHelp            = "1 when the group is live (/healthz): no worker stuck, session not lost for long."
	destinationNone     = "none"
	resultOK, resultErr = "ok", "error"
	resultDeferred      = "deferred"
)

// deadLetterReasons are the reason label values, in Stats.DeadLettered's
// order.
var deadLetterReasons = []struct {
	name  string
	value func(d *group.DeadLetterCounts) int64
}{
	{"max_attempts", func(d *group.DeadLetterCounts) int64 { return d.MaxAttempts }},
	{"rejected", func(d *group.DeadLetterCounts) int64 { return d.Rejected }},
	{"timeout", func(d *group.DeadLetterCounts) int64 { return d.Timeout }},
	{"poison", func(d *group.DeadLetterCounts) int64 { return d.Poison }},
}

// errorCauses are the cause label values of orderly_errors_total.
var errorCauses = []struct {
	name  string
	value func(e *group.ErrorCounts) int64
}{
	{"network", func(e *group.ErrorCounts) int64 { return e.Network }},
	{"coordinator", func(e *group.ErrorCounts) int64 { return e.Coordinator }},
	{"rebalance", func(e *group.ErrorCounts) int64 { return e.Rebalance }},
	{"leader", func(e *group.ErrorCounts) int64 { return e.Leader }},
	{"auth", func(e *group.ErrorCounts) int64 { return e.Auth }},
	{"topic", func(e *group.ErrorCounts) int64 { return e.Topic }},
	{"out_of_range", func(e *group.ErrorCounts) int64 { return e.OutOfRange }},
	{"metadata", func(e *group.ErrorCounts) int64 { return e.Metadata }},
	{"offsets", func(e *group.ErrorCounts) int64 { return e.Offsets }},
	{"other", func(e *group.ErrorCounts) int64 { return e.Other }},
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricNames lists every metric family the collector exports (with
// Health: orderly_ready and orderly_live too), for tests and tools that
// check dashboards against it.
func MetricNames() []string {
	names := []string{recordsName, failedAttemptsName}
	for _, m := range partitionGauges {
		names = append(names, m.name)
	}
	names = append(names, doDurationName, latencyName, callsName, deadLettersName, errorsName)
	for _, m := range groupMetrics {
		names = append(names, m.name)
	}
	return append(names, readyName, liveName)
}
