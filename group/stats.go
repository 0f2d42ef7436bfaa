package group

import "github.com/orderly-go/orderly/internal/histogram"

// Histogram is a distribution of durations (Stats.DoDuration,
// Stats.Latency): Counts[i] observations at most HistogramBounds[i]
// seconds (and above the bound before), the last above every bound.
type Histogram = histogram.Snapshot

// HistogramBounds are the buckets' upper bounds in seconds.
var HistogramBounds = histogram.Bounds

// Stats is a snapshot of a Group's counters. Counters only grow over the
// Group's life; gauges (InFlight, Retrying, FinishedAbove, Partitions, Lag)
// are current values.
type Stats struct {
	GroupID string // Config.GroupID
	Fetched int64  // messages received from Kafka
	// Handled counts messages Do finished that this member took back to
	// commit (behind the frontier, or listed finished in the commit
	// metadata), or, redelivered from the parked queue, took back to
	// finish their parked copy. Not one whose call returned nil after its partition's
	// drain gave up on it (DrainTimeout passed, the final commit went out
	// without it): that one is Abandoned, and the partition's next owner
	// handles it again.
	Handled      int64
	Committed    int64 // messages behind the commit frontier (marked for commit)
	DecodeErrors int64 // messages whose New failed; logged and skipped past
	Batches      int64 // Do calls that succeeded (a late one too, whose messages are not Handled)
	Failures     int64 // Do calls that returned an error or panicked (split calls included), not counting DeferredCalls
	// DeferredCalls counts Do calls whose BatchError named only deferrals
	// (Defer: no Fail, no DeadLetter), that returned within MsgTimeout and
	// whose ctx no revoke or shutdown cancelled: not failures (no attempt
	// is charged, and the outage detector counts no failure for them);
	// their unnamed items are done. A cancelled call's BatchError is not
	// applied (its messages go back, uncharged): it counts in Failures and
	// Cancelled whatever it names.
	// Every Do call counts in one of Batches, Failures and DeferredCalls.
	DeferredCalls int64
	Panics        int64 // of Failures, how many were panics
	Retries       int64 // messages to be handed out again after a failed attempt, counted once, by the member that decides the retry (at a handover, the one that hands the message over); not a last attempt's failure, which is dead-lettered
	Splits        int64 // Do calls on part of a batch that failed as a whole, to find its failing items
	Cancelled     int64 // failed Do calls that returned after their ctx was cancelled (ErrRevoked, ErrShutdown)
	// Dropped counts messages at attempt 1 (never charged a failed
	// attempt: new, or only deferred) queued and let go on revoke (the
	// next owner gets them), and, at a stop, parked messages taken from
	// the local queue at attempt 1 and not yet run (the next run gets
	// them).
	Dropped int64
	// Abandoned counts messages left unfinished at revoke: waiting for a
	// retry (on their lanes, or in a partial batch), failed during the
	// drain, or still in Do after DrainTimeout (whatever that call then
	// returns); and, at a stop, parked messages taken from the local
	// queue and so left, one not yet run among them when it had failed
	// before (attempt 2 or more). The next owner, or the next run, gets
	// them.
	Abandoned int64
	Revokes   int64 // partition claims that ended (rebalance or shutdown)
	Claims    int64 // partition claims that started
	Resumed   int64 // messages skipped because a previous owner finished them (commit metadata), or this member did before its final commit was lost
	// ResumedWaiting counts messages a previous owner left waiting for a
	// retry (commit metadata): they went on at the attempt and backoff
	// it had reached.
	ResumedWaiting int64
	// MetadataFull counts the times a partition stopped taking messages
	// because its finished set no longer fit CommitMetadata.
	MetadataFull int64
	// MetadataRejected counts partitions whose commits the broker refused
	// with OFFSET_METADATA_TOO_LARGE; they commit without metadata since.
	MetadataRejected int64
	Errors           int64       // consumer, commit and offset errors (the sum of ErrorsBy)
	ErrorsBy         ErrorCounts // Errors by cause

	// OffsetResets counts claims that started from the reset position
	// because the committed offset was out of range (below the log start:
	// records deleted before the group handled them; above the high
	// watermark: the topic recreated); see Config.OnOffsetReset.
	// SkippedByReset is how many records those resets skipped (from the
	// committed offset up to where the claim started).
	OffsetResets, SkippedByReset int64
	// OutOfRangeMidRun counts fetches that ran out of range while
	// consuming (retention overtook a lagging consumer); with ResetFollow
	// each is followed by a reset counted in OffsetResets.
	OutOfRangeMidRun int64
	// ControlSkipped counts offsets the commit frontier passed that hold
	// no record for Do: transaction markers and aborted transactions'
	// records, found by a side fetch once a partition is idle with
	// nothing unfinished (so that lag reaches 0 after a marker).
	ControlSkipped int64

	// The failure path.
	DeadLettered DeadLetterCounts // messages whose dead letter was written, by reason
	// DeadLetterDestination is where dead letters go: "topic:NAME",
	// "local:DIR" (DataPath's store), or "" (none: they are skipped).
	DeadLetterDestination string
	DeadLetterSkipped     int64 // messages to dead-letter with no destination configured: skipped
	DeadLetterErrors      int64 // failed writes of dead letters (retried)
	TimedOut              int64 // Do calls that ran past MsgTimeout: counted when the watchdog cancels one (it looks every tenth of MsgTimeout, within 10 ms to 1 s), hung or not, or when one returns past MsgTimeout before that
	Stuck                 int64 // Do calls that ran past MsgTimeout plus its grace (their worker was stuck)
	Redelivered           int64 // Unordered: messages of stuck calls handed to other workers
	Outages               int64 // times most deliveries (retries included) failed across many lanes and the group backed off as a whole
	ParkErrors            int64 // failed writes of parked messages (retried)

	InFlight          int64 // fetched and not yet finished
	Retrying          int64 // messages waiting out a retry's backoff, first in their lanes
	Deferred          int64 // messages waiting out a deferral (BatchError.Defer), or a probe delay during an outage
	Parked            int64 // Unordered messages parked on disk under DataPath
	DeadLetterPending int64 // messages waiting for their dead letter to be written
	StuckWorkers      int64 // workers in a Do call past MsgTimeout plus grace now
	Outage            bool  // an outage is on (see Outages)
	Paused            bool  // Pause was called and Resume not yet
	FinishedAbove     int64 // finished messages above their partition's frontier (as of the last commit)
	Partitions        int64 // partitions claimed now
	Lag               int64 // sum over claimed partitions of high watermark minus commit frontier

	// Status is the group's: its worst partition's, the reason naming it.
	Status PartitionStatus
	// PartitionStats are the claimed partitions, by topic and partition.
	PartitionStats []PartitionStats
	// Workers are the workers, by index.
	Workers []WorkerStats
	// DoDuration is the distribution of Do calls' durations (split calls
	// included; a call that follows straight on from its worker's last
	// counts from that call's end, so the hand-off between them, under a
	// microsecond uncontended, is in it); Latency that of end-to-end
	// latency, record timestamp to done, of each call's oldest message.
	DoDuration, Latency Histogram
}

// DeadLetterCounts are dead letters by reason (the __orderly.errors.reason
// header).
type DeadLetterCounts struct {
	MaxAttempts int64 // failed Retry.MaxAttempts times
	Rejected    int64 // BatchError.DeadLetter
	Timeout     int64 // failed Retry.MaxAttempts times, the last past MsgTimeout
	Poison      int64 // New could not decode it
}
