package group

// Stats is a snapshot of a Group's counters. Counters only grow over the
// Group's life; gauges (InFlight, Partitions, Lag) are current values.
type Stats struct {
	Fetched      int64 // messages received from Kafka
	Handled      int64 // messages whose Do call returned nil
	Committed    int64 // messages behind the commit frontier (marked for commit)
	DecodeErrors int64 // messages whose New failed; logged and skipped past
	Batches      int64 // Do calls that succeeded
	Failures     int64 // Do calls that returned an error or panicked
	Panics       int64 // of Failures, how many were panics
	Retries      int64 // batches called again after a failure
	Dropped      int64 // queued, never-started messages let go on revoke (the next owner gets them)
	Abandoned    int64 // started messages left unfinished at revoke (a retry pending, or DrainTimeout passed)
	Revokes      int64 // partition claims that ended (rebalance or shutdown)
	Claims       int64 // partition claims that started
	Errors       int64 // consumer and commit errors reported by sarama
	Resumed      int64 // messages skipped because a previous owner finished them (commit metadata)

	InFlight   int64 // fetched, not yet behind the commit frontier
	Partitions int64 // partitions claimed now
	Lag        int64 // sum over claimed partitions of high watermark minus commit frontier
}
