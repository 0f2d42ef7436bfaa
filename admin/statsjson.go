package admin

import (
	"strconv"
	"time"

	"github.com/orderly-go/orderly/group"
)

// The /stats document: one Stats snapshot as JSON. Field names are
// snake_case and stable (add, don't rename); durations are Go duration
// strings rounded to the millisecond ("1.5s", "3m10.2s", "0s"), which
// time.ParseDuration reads; times are RFC 3339 in UTC; counters are
// integers. See docs/ARCHITECTURE.md ("/stats").

// StatsDoc is the /stats document.
type StatsDoc struct {
	ConsumerGroup string    `json:"consumergroup"`
	Time          time.Time `json:"time"` // when the snapshot was taken
	// Ready, ReadyReason, Live and LiveReason are the health checks
	// (absent when the source does not report them; ReadyReason when it
	// is ready, or does not say why not).
	Ready       *bool     `json:"ready,omitempty"`
	ReadyReason string    `json:"ready_reason,omitempty"`
	Live        *bool     `json:"live,omitempty"`
	LiveReason  string    `json:"live_reason,omitempty"`
	Status      StatusDoc `json:"status"` // the group's: its worst partition's

	Totals      TotalsDoc      `json:"totals"`
	Now         NowDoc         `json:"now"`
	ErrorsBy    ErrorsDoc      `json:"errors_by"`
	DeadLetters DeadLettersDoc `json:"dead_letters"`

	HandlerDuration HistogramDoc   `json:"handler_duration"`
	EndToEndLatency HistogramDoc   `json:"end_to_end_latency"`
	Workers         []WorkerDoc    `json:"workers"`
	Partitions      []PartitionDoc `json:"partitions"`
}

// StatusDoc is a status: Burrow's code, its name, and why.
type StatusDoc struct {
	Code   int    `json:"code"`   // 1 OK, 2 WARN, 4 STOP, 5 STALL, 6 REWIND
	Name   string `json:"name"`   // OK, WARN, STOP, STALL, REWIND
	Reason string `json:"reason"` // empty for OK
}

// TotalsDoc are the counters, over the group's life.
type TotalsDoc struct {
	Fetched          int64 `json:"fetched"`
	Handled          int64 `json:"handled"`
	Committed        int64 `json:"committed"`
	DecodeErrors     int64 `json:"decode_errors"`
	Batches          int64 `json:"batches"`
	Failures         int64 `json:"failures"`
	DeferredCalls    int64 `json:"deferred_calls"`
	Panics           int64 `json:"panics"`
	Retries          int64 `json:"retries"`
	Splits           int64 `json:"splits"`
	Cancelled        int64 `json:"cancelled"`
	Dropped          int64 `json:"dropped"`
	Abandoned        int64 `json:"abandoned"`
	Claims           int64 `json:"claims"`
	Revokes          int64 `json:"revokes"`
	Resumed          int64 `json:"resumed"`
	ResumedWaiting   int64 `json:"resumed_waiting"`
	MetadataFull     int64 `json:"metadata_full"`
	MetadataRejected int64 `json:"metadata_rejected"`
	Errors           int64 `json:"errors"`
	TimedOut         int64 `json:"timed_out"`
	Stuck            int64 `json:"stuck"`
	Redelivered      int64 `json:"redelivered"`
	Outages          int64 `json:"outages"`
	ParkErrors       int64 `json:"park_errors"`
	OffsetResets     int64 `json:"offset_resets"`
	SkippedByReset   int64 `json:"skipped_by_reset"`
	OutOfRangeMidRun int64 `json:"out_of_range_mid_run"`
	ControlSkipped   int64 `json:"control_skipped"`
}

// NowDoc are the gauges: values at the snapshot.
type NowDoc struct {
	Partitions    int64 `json:"partitions"`
	Lag           int64 `json:"lag"`
	InFlight      int64 `json:"in_flight"`
	Retrying      int64 `json:"retrying"`
	Deferred      int64 `json:"deferred"`
	Parked        int64 `json:"parked"`
	FinishedAbove int64 `json:"finished_above"`
	StuckWorkers  int64 `json:"stuck_workers"`
	Outage        bool  `json:"outage"`
	Paused        bool  `json:"paused"`
}

// ErrorsDoc is Stats.ErrorsBy.
type ErrorsDoc struct {
	Network     int64 `json:"network"`
	Coordinator int64 `json:"coordinator"`
	Rebalance   int64 `json:"rebalance"`
	Leader      int64 `json:"leader"`
	Auth        int64 `json:"auth"`
	Topic       int64 `json:"topic"`
	OutOfRange  int64 `json:"out_of_range"`
	Metadata    int64 `json:"metadata"`
	Offsets     int64 `json:"offsets"`
	Other       int64 `json:"other"`
}

// DeadLettersDoc is where dead letters go and how many went, by reason.
type DeadLettersDoc struct {
	Destination string           `json:"destination"` // topic:NAME, local:DIR, or "" (none: skipped)
	ByReason    map[string]int64 `json:"by_reason"`   // max_attempts, rejected, timeout, poison
	Skipped     int64            `json:"skipped"`
	WriteErrors int64            `json:"write_errors"`
	Pending     int64            `json:"pending"`
}

// HistogramDoc is a distribution of durations. Buckets are not
// cumulative: Count observations at most LE seconds and above the bucket
// before; the last has LE "+Inf".
//
// P50 and P99 are not interpolated: each is the upper bound of the bucket
// its quantile falls in (the quantile is at most that). A quantile in the
// +Inf bucket is above every bound: P50 or P99 is then the last bound
// ("1m0s") and P50AboveLastBound or P99AboveLastBound is true (the status
// page shows ">1m0s").
type HistogramDoc struct {
	Count             uint64      `json:"count"`
	SumSeconds        float64     `json:"sum_seconds"`
	P50               string      `json:"p50"` // upper bound of the bucket holding the quantile
	P99               string      `json:"p99"`
	P50AboveLastBound bool        `json:"p50_above_last_bound"` // the median is above P50, the last bound
	P99AboveLastBound bool        `json:"p99_above_last_bound"`
	Buckets           []BucketDoc `json:"buckets"`
}

// BucketDoc is one histogram bucket.
type BucketDoc struct {
	LE    string `json:"le"` // upper bound in seconds, as Prometheus writes it; "+Inf" for the last
	Count uint64 `json:"count"`
}

// WorkerDoc is one worker.
type WorkerDoc struct {
	Index    int    `json:"index"`
	Busy     bool   `json:"busy"`
	BatchAge string `json:"batch_age"` // how long the current call has run; "0s" idle
	Stuck    bool   `json:"stuck"`
}

// PartitionDoc is one claimed partition.
type PartitionDoc struct {
	Topic         string     `json:"topic"`
	Partition     int32      `json:"partition"`
	Generation    int32      `json:"generation"`
	Status        StatusDoc  `json:"status"`
	Fetched       int64      `json:"fetched"`
	Next          int64      `json:"next"`      // -1 before any record
	Frontier      int64      `json:"frontier"`  // marked for commit: every record below finished
	Committed     int64      `json:"committed"` // as the coordinator holds it; -1 until read back
	CommittedAt   *time.Time `json:"committed_at,omitempty"`
	HighWatermark int64      `json:"high_watermark"`
	Lag           int64      `json:"lag"`
	InFlight      int64      `json:"in_flight"`
	Undispatched  int64      `json:"undispatched"`
	Paused        bool       `json:"paused"`
	Held          int64      `json:"held"`
	FinishedAbove int64      `json:"finished_above"`
	MetadataBytes int        `json:"metadata_bytes"`
	// OldestUnfinished is how long the record at the frontier has been
	// unfinished ("0s" when nothing is).
	OldestUnfinished string      `json:"oldest_unfinished"`
	Outcomes         OutcomesDoc `json:"outcomes"`
}

// OutcomesDoc is what became of a partition's records (group.Outcomes:
// parked counts moves to the parked queue, and a parked record counts
// again by how its redelivery ended).
type OutcomesDoc struct {
	Handled        int64 `json:"handled"`
	DeadLettered   int64 `json:"dead_lettered"`
	Parked         int64 `json:"parked"`
	Skipped        int64 `json:"skipped"`
	Resumed        int64 `json:"resumed"`
	FailedAttempts int64 `json:"failed_attempts"`
}

// newStatsDoc builds the /stats document of a snapshot taken at t; h may
// be nil.
func newStatsDoc(s *group.Stats, h Health, t time.Time) *StatsDoc {
	d := &StatsDoc{
		ConsumerGroup: s.GroupID,
		Time:          t.UTC(),
		Status:        statusDoc(s.Status),
		Totals: TotalsDoc{
			Fetched: s.Fetched, Handled: s.Handled, Committed: s.Committed, DecodeErrors: s.DecodeErrors,
			Batches: s.Batches, Failures: s.Failures, DeferredCalls: s.DeferredCalls, Panics: s.Panics, Retries: s.Retries, Splits: s.Splits,
			Cancelled: s.Cancelled, Dropped: s.Dropped, Abandoned: s.Abandoned, Claims: s.Claims, Revokes: s.Revokes,
			Resumed: s.Resumed, ResumedWaiting: s.ResumedWaiting, MetadataFull: s.MetadataFull,
			MetadataRejected: s.MetadataRejected, Errors: s.Errors, TimedOut: s.TimedOut, Stuck: s.Stuck,
			Redelivered: s.Redelivered, Outages: s.Outages, ParkErrors: s.ParkErrors,
			OffsetResets: s.OffsetResets, SkippedByReset: s.SkippedByReset, OutOfRangeMidRun: s.OutOfRangeMidRun,
			ControlSkipped: s.ControlSkipped,
		},
		Now: NowDoc{
			Partitions: s.Partitions, Lag: s.Lag, InFlight: s.InFlight, Retrying: s.Retrying, Deferred: s.Deferred,
			Parked: s.Parked, FinishedAbove: s.FinishedAbove, StuckWorkers: s.StuckWorkers, Outage: s.Outage, Paused: s.Paused,
		},
		ErrorsBy: ErrorsDoc{
			Network: s.ErrorsBy.Network, Coordinator: s.ErrorsBy.Coordinator, Rebalance: s.ErrorsBy.Rebalance,
			Leader: s.ErrorsBy.Leader, Auth: s.ErrorsBy.Auth, Topic: s.ErrorsBy.Topic, OutOfRange: s.ErrorsBy.OutOfRange,
			Metadata: s.ErrorsBy.Metadata, Offsets: s.ErrorsBy.Offsets, Other: s.ErrorsBy.Other,
		},
		DeadLetters: DeadLettersDoc{
			Destination: s.DeadLetterDestination, ByReason: make(map[string]int64, len(deadLetterReasons)),
			Skipped: s.DeadLetterSkipped, WriteErrors: s.DeadLetterErrors, Pending: s.DeadLetterPending,
		},
		HandlerDuration: histogramDoc(&s.DoDuration),
		EndToEndLatency: histogramDoc(&s.Latency),
		Workers:         make([]WorkerDoc, len(s.Workers)),
		Partitions:      make([]PartitionDoc, len(s.PartitionStats)),
	}
	if h != nil {
		var ready, live bool
		ready, d.ReadyReason = readiness(h)
		live, d.LiveReason = h.Live()
		d.Ready, d.Live = &ready, &live
	}
	for _, r := range deadLetterReasons {
		d.DeadLetters.ByReason[r.name] = r.value(&s.DeadLettered)
	}
	for i, w := range s.Workers {
		d.Workers[i] = WorkerDoc{Index: i, Busy: w.Busy, BatchAge: durationString(w.BatchAge), Stuck: w.Stuck}
	}
	for i := range s.PartitionStats {
		p := &s.PartitionStats[i]
		pd := PartitionDoc{
			Topic: p.Topic, Partition: p.Partition, Generation: p.Generation, Status: statusDoc(p.Status),
			Fetched: p.Fetched, Next: p.Next, Frontier: p.Frontier, Committed: p.Committed,
			HighWatermark: p.HighWatermark, Lag: p.Lag, InFlight: p.InFlight, Undispatched: p.Undispatched,
			Paused: p.Paused, Held: p.Held, FinishedAbove: p.FinishedAbove, MetadataBytes: p.MetadataBytes,
			OldestUnfinished: durationString(p.OldestUnfinished),
			Outcomes: OutcomesDoc{Handled: p.Outcomes.Handled, DeadLettered: p.Outcomes.DeadLettered, Parked: p.Outcomes.Parked,
				Skipped: p.Outcomes.Skipped, Resumed: p.Outcomes.Resumed, FailedAttempts: p.Outcomes.FailedAttempts},
		}
		if !p.CommittedAt.IsZero() {
			at := p.CommittedAt.UTC()
			pd.CommittedAt = &at
		}
		d.Partitions[i] = pd
	}
	return d
}

func statusDoc(s group.PartitionStatus) StatusDoc {
	return StatusDoc{Code: int(s.Code), Name: s.Code.String(), Reason: s.Reason}
}

func histogramDoc(h *group.Histogram) HistogramDoc {
	p50, p50Above := h.QuantileBucket(0.5)
	p99, p99Above := h.QuantileBucket(0.99)
	d := HistogramDoc{
		Count: h.Count, SumSeconds: h.Sum.Seconds(),
		P50: durationString(p50), P99: durationString(p99), P50AboveLastBound: p50Above, P99AboveLastBound: p99Above,
		Buckets: make([]BucketDoc, len(h.Counts)),
	}
	for i, c := range h.Counts {
		le := "+Inf"
		if i < len(group.HistogramBounds) {
			le = strconv.FormatFloat(group.HistogramBounds[i], 'g', -1, 64)
		}
		d.Buckets[i] = BucketDoc{LE: le, Count: c}
	}
	return d
}

// durationString is d rounded to the millisecond (to the microsecond
// below one), as time.Duration writes it.
func durationString(d time.Duration) string {
	if d > 0 && d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
