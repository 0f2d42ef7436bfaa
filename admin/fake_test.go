package admin

import (
	"sync"
	"time"

	"github.com/orderly-go/orderly/group"
)

// fakeGroup is a Group whose snapshot and health a test sets.
type fakeGroup struct {
	mu    sync.Mutex
	s     group.Stats
	ready bool
	live  bool
	why   string
}

func (f *fakeGroup) Stats() group.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.s
	s.PartitionStats = append([]group.PartitionStats(nil), f.s.PartitionStats...)
	s.Workers = append([]group.WorkerStats(nil), f.s.Workers...)
	return s
}

func (f *fakeGroup) Ready() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

func (f *fakeGroup) Live() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live, f.why
}

func (f *fakeGroup) set(fn func(s *group.Stats)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.s)
}

// sampleStats is a snapshot with two partitions of "orders", one of them
// stalled, two workers (one stuck), and some of everything.
func sampleStats() group.Stats {
	var do, lat group.Histogram
	do.Counts[0], do.Counts[3], do.Counts[16] = 5, 2, 1 // 5 <= 0.5ms, 2 in (2.5ms, 5ms], 1 above 60s
	do.Count, do.Sum = 8, 61*time.Second
	lat.Counts[8], lat.Count, lat.Sum = 3, 3, 600*time.Millisecond
	return group.Stats{
		GroupID: "ledger", Fetched: 1000, Handled: 900, Committed: 880, DecodeErrors: 2, Batches: 40, Failures: 3,
		Panics: 1, Retries: 7, Splits: 2, Cancelled: 1, Dropped: 4, Abandoned: 1, Revokes: 1, Claims: 3,
		Resumed: 5, MetadataFull: 1, MetadataRejected: 1, Errors: 3,
		OffsetResets: 2, SkippedByReset: 50, OutOfRangeMidRun: 1, ControlSkipped: 4,
		ErrorsBy:     group.ErrorCounts{Network: 2, Rebalance: 1},
		DeadLettered: group.DeadLetterCounts{MaxAttempts: 3, Rejected: 1, Timeout: 0, Poison: 2}, DeadLetterDestination: "topic:orders.dlq",
		DeadLetterSkipped: 0, DeadLetterErrors: 1, TimedOut: 2, Stuck: 1, Redelivered: 0, Outages: 1, ParkErrors: 0,
		InFlight: 30, Retrying: 2, Deferred: 1, Parked: 0, DeadLetterPending: 1, StuckWorkers: 1, Outage: false, Paused: false,
		FinishedAbove: 12, Partitions: 2, Lag: 130,
		Status: group.PartitionStatus{Code: group.StatusStall, Reason: "orders/1: committed offset stuck at 400 with lag 120"},
		PartitionStats: []group.PartitionStats{
			{Topic: "orders", Partition: 0, Generation: 3, Fetched: 600, Next: 600, Frontier: 590, Committed: 580,
				CommittedAt: time.Now(), HighWatermark: 600, Lag: 10, InFlight: 10, Undispatched: 0, Held: 1,
				FinishedAbove: 4, MetadataBytes: 24, OldestUnfinished: 20 * time.Millisecond,
				Status:   group.PartitionStatus{Code: group.StatusOK},
				Outcomes: group.Outcomes{Handled: 570, DeadLettered: 3, Parked: 4, Skipped: 2, Resumed: 5, FailedAttempts: 9}},
			{Topic: "orders", Partition: 1, Generation: 3, Fetched: 400, Next: 420, Frontier: 400, Committed: -1,
				HighWatermark: 520, Lag: 120, InFlight: 20, Undispatched: 20, Paused: true, Held: 0,
				FinishedAbove: 8, MetadataBytes: 40, OldestUnfinished: 95 * time.Second,
				Status:   group.PartitionStatus{Code: group.StatusStall, Reason: "committed offset stuck at 400 with lag 120"},
				Outcomes: group.Outcomes{Handled: 330, FailedAttempts: 1}},
		},
		Workers:    []group.WorkerStats{{Busy: true, BatchAge: 95 * time.Second, Stuck: true}, {}},
		DoDuration: do, Latency: lat,
	}
}

// reasonedGroup is a fakeGroup that says why it is not ready, as
// *group.Group's Readiness does.
type reasonedGroup struct {
	*fakeGroup
	readyWhy string
}

func (r reasonedGroup) Readiness() (bool, string) { return r.Ready(), r.readyWhy }
