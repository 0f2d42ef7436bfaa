package group

import (
	"fmt"
	"sync"
	"time"
)

// Status is a partition's (or the group's) health in Burrow's vocabulary,
// with Burrow's numbers, so that Orderly and an external Burrow agree.
type Status int

const (
	StatusNotFound Status = 0 // not claimed here
	StatusOK       Status = 1 // committing, and lag not growing (or zero)
	// StatusWarn: the committed offset moves, but the lag keeps growing
	// over the window.
	StatusWarn Status = 2
	// StatusStop: no commit for longer than the window (or StopAfter)
	// while lag is above 0: the consumer stopped committing (Pause, or
	// commits that no longer go out).
	StatusStop Status = 4
	// StatusStall: commits keep coming but the committed offset does not
	// move while lag is above 0: a stuck head (Orderly commits every
	// interval while a partition has work, as the Java client does, so a
	// stuck head shows as this to Burrow too).
	StatusStall Status = 5
	// StatusRewind: the committed offset went backwards.
	StatusRewind Status = 6
)

func (s Status) String() string {
	switch s {
	case StatusNotFound:
		return "NOTFOUND"
	case StatusOK:
		return "OK"
	case StatusWarn:
		return "WARN"
	case StatusStop:
		return "STOP"
	case StatusStall:
		return "STALL"
	case StatusRewind:
		return "REWIND"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// severity orders statuses from best to worst: the group's status is its
// worst partition's.
func (s Status) severity() int {
	switch s {
	case StatusOK:
		return 1
	case StatusWarn:
		return 2
	case StatusStall:
		return 3
	case StatusStop:
		return 4
	case StatusRewind:
		return 5
	}
	return 0
}

// PartitionStatus is a status and why.
type PartitionStatus struct {
	Code   Status
	Reason string // e.g. "stuck head at offset 1200 for 3m10s"; empty for OK
}

// StatusConfig sets how partition statuses are evaluated (Burrow's rules
// over a window of the partition's commits).
type StatusConfig struct {
	// Window is how many commit intervals the rules look at. Default 10
	// (Burrow's intervals).
	Window int
	// StopAfter: no commit for this long with lag above 0 is STOP.
	// Default Window commit intervals.
	StopAfter time.Duration
	// StuckHead is how long the frontier's message may stay unfinished
	// before the status names it (the reason of a STALL, a STOP). Default
	// 30s.
	StuckHead time.Duration
	// LostAfter is how long the group session may stay lost (the member
	// evicted, rejoining) before Live says no. Default twice the session
	// timeout (Consumer.Group.Session.Timeout).
	LostAfter time.Duration
	// ReadBack is how often the committed offsets are read back from the
	// coordinator (OffsetFetch) and the high watermarks listed
	// (ListOffsets): PartitionStats.Committed and HighWatermark. Default
	// 5s; negative: never (Committed stays -1, and a paused partition's
	// lag is as of its last fetch).
	ReadBack time.Duration
}

// PartitionStats is one claimed partition as Stats sees it.
type PartitionStats struct {
	Topic     string
	Partition int32
	// Generation is the group generation of the claim.
	Generation int32

	Fetched int64 // messages received from Kafka by this claim
	// Next is the offset after the last message received (the fetch
	// position as far as Orderly knows it); -1 before any.
	Next int64
	// Frontier is the offset Orderly marked for commit: below it every
	// message has finished.
	Frontier int64
	// Committed is the offset the coordinator holds, read back with
	// OffsetFetch every Status.ReadBack; -1 until read. CommittedAt is
	// when.
	Committed   int64
	CommittedAt time.Time
	// HighWatermark is the partition's next offset to be written, as of
	// the last fetch or read-back.
	HighWatermark int64
	// Lag is HighWatermark minus Frontier. External tools (kafka_exporter,
	// KEDA) compute it from Committed: they count FinishedAbove as lag.
	Lag int64

	InFlight      int64 // fetched, dispatched and not finished
	Undispatched  int64 // read while out of share or paced (the workers had a backlog), not dispatched yet
	Paused        bool  // sarama's fetching of the partition is paused
	Held          int64 // messages waiting first in their lanes (a retry, a deferral, a dead letter being written)
	FinishedAbove int64 // finished messages above the frontier (as of the last commit)
	MetadataBytes int   // of the last commit's metadata
	// OldestUnfinished is how long the frontier's message has been
	// unfinished on this member (0 when nothing is): a new owner of the
	// partition counts from when it took it.
	OldestUnfinished time.Duration
	Status           PartitionStatus
	// Outcomes are what became of the partition's messages on this member
	// over the Group's life: those its claims took, and its parked
	// messages when their redelivery ended (see Outcomes).
	Outcomes Outcomes
}

// WorkerStats is one worker.
type WorkerStats struct {
	Busy bool // in a Do call now
	// BatchAge is how long the current call has run (0 when idle).
	BatchAge time.Duration
	// Stuck: the current call ran past MsgTimeout plus its grace.
	Stuck bool
}

// sample is one commit interval of a partition, for its status.
type sample struct {
	at        time.Time
	offset    int64 // marked for commit
	lag       int64
	committed bool // a commit went out at this interval
}

// partitionView is what the claim loop publishes at each commit interval
// for Stats: the slow-changing fields, and the samples of its status.
type partitionView struct {
	mu         sync.Mutex
	samples    []sample // ring of the last Window intervals
	n          int      // samples taken
	status     PartitionStatus
	metaBytes  int
	held       int64
	headOffset int64     // the frontier's message, -1 none
	headSince  time.Time // since when it is the frontier's
	lastCommit time.Time
	firstAt    time.Time // the first interval's (the claim's start)
	committed  int64     // read back from the coordinator, -1 unknown
	readAt     time.Time
}

func (v *partitionView) init(window int) {
	v.samples = make([]sample, window)
	v.headOffset, v.committed = -1, -1
}

// seedRewind starts the window with the offset last seen committed, above
// the claim's initial one: the first intervals show REWIND.
func (v *partitionView) seedRewind(seen, initial int64, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.samples[0] = sample{at: at, offset: seen, lag: -1}
	v.firstAt = at
	v.n = 1
	v.status = PartitionStatus{StatusRewind, fmt.Sprintf("committed offset went back from %d (last seen) to %d", seen, initial)}
}

// observe records an interval and evaluates the status, Burrow's rules
// over the window: the offset went down anywhere in the window is REWIND;
// lag 0 now is OK; no commit for longer than stopAfter with lag is STOP;
// any interval in the window with lag 0 is OK; commits coming but the
// offset not moving over the whole window, with lag, is STALL; the offset
// moving but the lag growing at every interval is WARN; else OK. It
// returns the status without publishing it: the caller adds the reasons
// (explain) and publishes once, so that a reader never sees a bad status
// without them.
func (v *partitionView) observe(s sample, stopAfter time.Duration) PartitionStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	w := len(v.samples)
	if s.committed {
		v.lastCommit = s.at
	}
	if v.firstAt.IsZero() {
		v.firstAt = s.at
	}
	v.samples[v.n%w] = s
	v.n++
	k := min(v.n, w)
	first := v.samples[(v.n-k)%w]
	anyZero, moved, growing := false, false, k > 1
	var rewound *[2]int64
	for i := v.n - k; i < v.n; i++ {
		x := v.samples[i%w]
		anyZero = anyZero || x.lag == 0
		if i > v.n-k {
			p := v.samples[(i-1)%w]
			moved = moved || x.offset != p.offset
			growing = growing && x.lag > p.lag
			if x.offset < p.offset {
				rewound = &[2]int64{p.offset, x.offset}
			}
		}
	}
	since := s.at.Sub(v.firstAt) // no commit since the claim started
	if !v.lastCommit.IsZero() {
		since = s.at.Sub(v.lastCommit)
	}
	var st PartitionStatus
	switch {
	case rewound != nil:
		st = PartitionStatus{StatusRewind, fmt.Sprintf("committed offset went back from %d to %d", rewound[0], rewound[1])}
	case s.lag == 0:
		st = PartitionStatus{Code: StatusOK}
	case since > stopAfter:
		st = PartitionStatus{StatusStop, fmt.Sprintf("no commit for %v with lag %d", since.Round(time.Second), s.lag)}
	case anyZero:
		st = PartitionStatus{Code: StatusOK}
	case k == w && !moved:
		st = PartitionStatus{StatusStall, fmt.Sprintf("committed offset stuck at %d with lag %d", s.offset, s.lag)}
	case k == w && growing:
		st = PartitionStatus{StatusWarn, fmt.Sprintf("lag grew from %d to %d over %d intervals", first.lag, s.lag, k)}
	default:
		st = PartitionStatus{Code: StatusOK}
	}
	return st
}

// explain adds why to a bad status: a stuck head, stuck workers, a
// partition paused on its share.
func explain(st PartitionStatus, headOffset int64, headAge, stuckHead time.Duration, stuckWorkers int, paused bool) PartitionStatus {
	if st.Code == StatusOK || st.Code == StatusRewind {
		return st
	}
	var why []string
	if headOffset >= 0 && headAge >= stuckHead {
		why = append(why, fmt.Sprintf("stuck head at offset %d for %v", headOffset, headAge.Round(time.Second)))
	}
	switch {
	case stuckWorkers == 1:
		why = append(why, "1 worker stuck on it")
	case stuckWorkers > 1:
		why = append(why, fmt.Sprintf("%d workers stuck on it", stuckWorkers))
	}
	if paused {
		why = append(why, "paused on its in-flight share")
	}
	for _, w := range why {
		st.Reason += "; " + w
	}
	return st
}

// stats is the claim's PartitionStats now.
func (c *claimState) stats() PartitionStats {
	ps := PartitionStats{
		Topic: c.topic, Partition: c.part, Generation: c.generation,
		Fetched:       c.fetched.Load(),
		Next:          c.received.Load(),
		Frontier:      c.next.Load(),
		HighWatermark: c.highWatermark(),
		InFlight:      c.unfinished.Load(),
		Undispatched:  c.undispatched.Load(),
		Paused:        c.fetchPaused.Load(),
		FinishedAbove: c.finishedAbove.Load(),
		Lag:           c.lag(),
		Outcomes:      c.outcomes.load(),
	}
	v := &c.view
	v.mu.Lock()
	ps.Committed, ps.CommittedAt = v.committed, v.readAt
	ps.Held, ps.MetadataBytes = v.held, v.metaBytes
	if v.headOffset >= 0 {
		ps.OldestUnfinished = time.Since(v.headSince)
	}
	ps.Status = v.status
	v.mu.Unlock()
	if ps.Status.Code == StatusNotFound {
		ps.Status.Code = StatusOK // no interval evaluated yet
	}
	return ps
}
