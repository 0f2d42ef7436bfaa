package group

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
)

// ErrConfig is wrapped by every error New returns for a bad Config or
// Handler; the message names the field.
var ErrConfig = errors.New("group: invalid config")

// Defaults applied by New to zero fields.
const (
	DefaultSize             = 1024
	DefaultNum              = 32
	DefaultTicker           = 100 * time.Millisecond
	DefaultMaxInFlight      = 64 << 10
	DefaultMaxInFlightBytes = 64 << 20
	DefaultRetryBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff       = 10 * time.Second
	DefaultCommitMetadata   = 4000
	DefaultJitter           = 0.2
	DefaultMsgTimeout       = 5 * time.Minute
	// DefaultChanSize1 is the default Chan when Size is 1: sarama's own
	// default ChannelBufferSize.
	DefaultChanSize1 = 256
)

// DefaultDrainTimeout is the DrainTimeout New uses when it is 0, given
// Sarama.Consumer.Group.Rebalance.Timeout and the MsgTimeout in effect (0
// for none): the longer of 30s and msgTimeout plus drainPastMsgTimeout,
// so that a call in flight at a revoke can run until its deadline, but at
// most half of rebalanceTimeout. The other half is the member's after the
// drain: the final commit and its read-back (see Config.DrainTimeout),
// within the time Kafka gives a member to rejoin before it evicts it.
func DefaultDrainTimeout(rebalanceTimeout, msgTimeout time.Duration) time.Duration {
	return min(rebalanceTimeout/2, max(30*time.Second, msgTimeout+drainPastMsgTimeout))
}

// readBackBudget is the most a claim's read-back of its final commit
// takes: a quarter of sc's Consumer.Group.Rebalance.Timeout (and no more
// than releaseWindow leaves it: readBack, joinWait, warnReadBack).
func readBackBudget(sc *sarama.Config) time.Duration {
	return sc.Consumer.Group.Rebalance.Timeout / 4
}

// releaseWindow is how long a claim that starts letting go has for its
// drain, its final commit and the read-back that confirms it. An eager
// rebalance waits for every claim to return before the member joins
// again, and the coordinator drops a member that has not joined within
// sc's Consumer.Group.Rebalance.Timeout of the rebalance's start, which
// the member learns of up to a Heartbeat.Interval later. So: seven eighths
// of the rebalance timeout, less a heartbeat interval; the eighth left is
// for sarama's own final commit and the join. validate refuses a config
// where it is not positive: no read-back could ever confirm a final
// commit.
func releaseWindow(sc *sarama.Config) time.Duration {
	g := sc.Consumer.Group
	return g.Rebalance.Timeout - g.Rebalance.Timeout/8 - g.Heartbeat.Interval
}

// readBackTime is what a claim whose drain runs its whole DrainTimeout has
// left of releaseWindow for its final commit and the read-back, which
// takes at most a quarter of Rebalance.Timeout of it: the quarter is kept
// while Heartbeat.Interval is at most five eighths of the timeout less
// DrainTimeout. The default DrainTimeout is half the timeout when
// that is the shorter (DefaultDrainTimeout), and then the quarter is kept
// only while Heartbeat.Interval is at most an eighth of the timeout (a
// 10s timeout with sarama's 3s heartbeat leaves 0.75s); a default drain
// below half allows more (a 120s timeout with a 10s MsgTimeout drains
// 30s, and keeps the quarter up to a 45s heartbeat).
func (c Config) readBackTime() time.Duration {
	return releaseWindow(c.Sarama) - c.DrainTimeout
}

// minReadBack is the least readBackTime New does not warn of
// (warnReadBack), or the read-back's quarter of Rebalance.Timeout when
// that is shorter: a healthy coordinator answers a commit and a read in
// milliseconds, but a read refused once is tried again only after
// Metadata.Retry.Backoff (250ms by default).
const minReadBack = time.Second

// warnReadBack logs a DrainTimeout, derived or set, that leaves a claim
// whose drain runs it all less than minReadBack to confirm its final
// commit: such a partition is OnLost, even when its commit went through,
// whenever the coordinator does not answer at once, and every time when
// no time is left at all.
func (c Config) warnReadBack(log *zap.Logger) {
	left := c.readBackTime()
	if left >= min(minReadBack, readBackBudget(c.Sarama)) {
		return
	}
	log.Warn("DrainTimeout leaves too little time to read back a final commit: a partition whose drain runs its whole DrainTimeout is OnLost unless the coordinator answers at once (or always, with no time left); lower DrainTimeout or Sarama.Consumer.Group.Heartbeat.Interval, or raise Sarama.Consumer.Group.Rebalance.Timeout",
		zap.Duration("read_back_time", left), zap.Duration("drain_timeout", c.DrainTimeout),
		zap.Duration("rebalance_timeout", c.Sarama.Consumer.Group.Rebalance.Timeout),
		zap.Duration("heartbeat_interval", c.Sarama.Consumer.Group.Heartbeat.Interval))
}

// warnSettings logs, once, what New chose for c that the Config as given
// (set) may not expect.
func (c Config) warnSettings(set Config, log *zap.Logger) {
	c.warnShortDrain(set, log)
	c.warnReadBack(log)
	c.warnRaise(set, log)
}

// warnShortDrain logs a DrainTimeout that New derived (set, the Config as
// given, left it 0) below the MsgTimeout set plus drainPastMsgTimeout:
// half of Rebalance.Timeout capped it, so a call in flight at a revoke is
// cancelled before its deadline. MsgTimeout left at its default is not
// warned of: Config.DrainTimeout documents that sarama's default
// rebalance timeout covers a MsgTimeout up to 29s.
func (c Config) warnShortDrain(set Config, log *zap.Logger) {
	if set.DrainTimeout != 0 || set.MsgTimeout <= 0 || c.DrainTimeout >= c.MsgTimeout+drainPastMsgTimeout {
		return
	}
	log.Warn("DrainTimeout is capped at half of Sarama.Consumer.Group.Rebalance.Timeout, below MsgTimeout: a call in flight at a revoke is cancelled before its deadline; set Rebalance.Timeout to at least twice MsgTimeout plus 2s, or set DrainTimeout",
		zap.Duration("drain_timeout", c.DrainTimeout), zap.Duration("msg_timeout", c.MsgTimeout),
		zap.Duration("rebalance_timeout", c.Sarama.Consumer.Group.Rebalance.Timeout))
}

// drainPastMsgTimeout is how long the default drain waits past a call's
// MsgTimeout: the time Do has to return once its ctx is cancelled (orderly
// consume's exec sink kills the command's process group then).
const drainPastMsgTimeout = time.Second

// Upper bounds of the sizes New accepts: beyond them the preallocated
// per-worker batches (Num x Size entries), the per-partition channel
// (Chan) and the goroutines (Num) would not fit a machine, and Go would
// panic or the process would be killed instead of a clear error.
const (
	MaxSize        = 1 << 20
	MaxNum         = 1 << 16
	MaxChan        = 1 << 20
	MaxBatchSlots  = 1 << 24 // Num * Size
	MaxMaxInFlight = 1 << 30
)

// Config configures a Group. Zero fields take the documented defaults; New
// validates the result in one place (Config.validate) and names the field
// of the first problem it finds.
type Config struct {
	// Brokers are the bootstrap addresses, host:port. Required.
	Brokers []string
	// Topics to consume. Required, no empty names.
	Topics []string
	// GroupID is the Kafka consumer group (sarama.NewConsumerGroup's
	// groupID). Required.
	GroupID string
	// Sarama is an optional base client config (TLS, SASL, version,
	// rebalance strategy, ...). It is copied, never modified, and Groups
	// built from one base share none of its mutable state: sarama's
	// built-in balance strategies are made anew by name and each Group
	// has its own metrics registry (a balance strategy of your own type
	// is used as given: it must be safe for concurrent use, or given to
	// one Group only). nil means DefaultSarama(). Orderly always sets
	// Consumer.Return.Errors (errors are logged and counted),
	// ChannelBufferSize = Chan, Consumer.Group.ResetInvalidOffsets from
	// OnOffsetReset, Consumer.Group.InstanceId from InstanceID (when
	// set), and turns sarama's auto-commit off
	// (Consumer.Offsets.AutoCommit.Enable): Orderly commits every
	// partition itself, every Consumer.Offsets.AutoCommit.Interval
	// (default 1s), each commit carrying the partition's finished offsets
	// as metadata. Under an eager rebalance protocol (a strategy offered
	// that is not cooperative) a JoinGroup is answered only once every
	// member has drained and joined again, and sarama waits for any
	// answer only Net.ReadTimeout, so New raises Net.ReadTimeout to what a
	// member with these timeouts can take to do so, plus 5s: a
	// Heartbeat.Interval to learn of the rebalance, then its drain
	// (DrainTimeout), final commit and the read-back of that commit (up to
	// a quarter of Rebalance.Timeout, and ending by seven eighths of it
	// after the rebalance began unless the drain ran past). With sarama's defaults and the default
	// DrainTimeout that is 53s. sarama has that one read timeout for every
	// request, so the cost is that a broker or coordinator that stops
	// answering is noticed only after the raised timeout: New logs the
	// raise, as a warning when Net.ReadTimeout was not sarama's default.
	// A cooperative strategy (the default) keeps it as given, and a
	// shorter DrainTimeout lowers the raise.
	//
	// A config of your own is otherwise used as given; start from
	// DefaultSarama() rather than sarama.NewConfig(), or set what it sets
	// yourself: above all Consumer.IsolationLevel = sarama.ReadCommitted
	// (sarama's zero value reads uncommitted, so records of aborted
	// transactions reach Do), Metadata.RefreshFrequency (sarama's 10
	// minutes delays new partitions by up to 20), and
	// Consumer.MaxWaitTime (with sarama's 500 ms a partition resumed
	// after a pause can wait up to that long while the others are caught
	// up; see DefaultFetchMaxWait).
	Sarama *sarama.Config
	// InstanceID makes this Group a static member of its consumer group
	// (KIP-345, sarama's Consumer.Group.InstanceId): give each instance a
	// stable ID of its own (a pod name, a host name), the same across its
	// restarts. An instance that comes back within the session timeout
	// (Sarama.Consumer.Group.Session.Timeout) with the same subscription
	// gets its partitions back without a rebalance, and no other member
	// stops; the coordinator also never mistakes a killed process for a
	// live one. The price: a static member sends no LeaveGroup when Run
	// returns, so the partitions of an instance that stops for good
	// (graceful or not) are consumed by no one until the session timeout
	// passes and the group rebalances. Orderly's graceful handoff (drain,
	// final commit, no repeats) still happens when Run returns; the next
	// owner just starts later. "": a dynamic member (the default), which
	// leaves the group when Run returns. Letters, digits, '.', '_', '-',
	// at most 249 characters. Two live instances must not share an ID:
	// the one that joins last takes the other's place, and the other's
	// Run ends with ErrInstanceFenced once the newer one has held the ID
	// for twice Sarama.Consumer.Group.Session.Timeout (on brokers from
	// 2.4); if the newer one is gone by then, the other takes the ID back.
	InstanceID string
	// OnOffsetReset is what happens when a partition's committed offset is
	// out of range (records deleted by retention or DeleteRecords before
	// the group handled them, or the topic recreated), at a claim's start
	// or while it runs: ResetFollow (the default: go on from
	// Sarama.Consumer.Offsets.Initial, with a warning and Stats counters)
	// or ResetRefuse (Run ends with ErrOffsetReset naming the partition).
	OnOffsetReset ResetPolicy

	// Size is the most messages per Do call. Default 1024.
	Size int
	// Num is the number of worker goroutines calling Do. Default 32.
	Num int
	// Ticker is how long a partial batch waits for more messages before Do
	// is called with it. Default 100ms; a negative value means never wait
	// (call Do with whatever is ready).
	Ticker time.Duration
	// Chan is how many fetched messages each claimed partition buffers
	// ahead of dispatch (sarama's ChannelBufferSize) and the most a
	// partition hands to the workers in one step. Default Size; with Size
	// 1, DefaultChanSize1 (256, sarama's own default): a channel of one
	// message made the claim loop take one message per step: 4.5-6.7 µs
	// of CPU per message in the in-memory pipeline against 1.1-1.9 µs
	// with 256 (BenchmarkPipeline, Size 1, Num 1 to 64). (With larger
	// batches a larger Chan also changes what a batch holds: more of one
	// lane's messages at once, which a named item hands out again.)
	// Unlike the databus seed there is no per-worker channel to fill up:
	// a busy worker never blocks dispatch.
	Chan int
	// MaxInFlight bounds the messages fetched and not yet finished. It
	// is divided evenly among the partitions this member has claimed: each
	// may have MaxInFlight/P unfinished messages (at least one), so one
	// partition, stuck or slow, can never take the budget the others need.
	// A partition whose share is spent dispatches nothing more until its
	// own messages finish; what sarama had fetched already waits,
	// undispatched, in the claim loop, and past Chan messages that
	// partition's fetching pauses (sarama's PartitionConsumer.Pause). The
	// other partitions go on. While the workers already have a backlog
	// ready (the largest of two batches, one item per worker, and Chan), a
	// claim loop dispatches nothing more either: it holds what it reads,
	// undispatched, as far as its share has room (in count and bytes)
	// before fetching pauses, so that items are made shortly before a
	// worker can take them. A finished message costs nothing, even above
	// a stuck frontier: it is recycled at once and remembered only as part
	// of a run of finished offsets. Shares are not lent to busier
	// partitions: a partition that borrowed and then got stuck would keep
	// what it borrowed. Default 65536, at most 2^30.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes (keys, values and headers) of the
	// messages fetched and not yet finished, shared among the claimed
	// partitions like MaxInFlight; a partition with nothing in flight may
	// always take one message, whatever its size. sarama's own fetch
	// buffers (Consumer.Fetch.Default per partition and request) come on
	// top. Default 64 MiB (librdkafka's queued.max.messages.kbytes).
	MaxInFlightBytes int64
	// DrainTimeout is how long a revoked partition (rebalance or shutdown)
	// waits for its started batches to finish before it commits what is
	// done and lets go. It must be below
	// Sarama.Consumer.Group.Rebalance.Timeout (the rebalance timeout of
	// JoinGroup, max.poll.interval.ms in the Java client), or Kafka would
	// evict the member. Default DefaultDrainTimeout: the longer of 30s and
	// MsgTimeout plus a second, so that a call in flight at the revoke can
	// run until it returns or MsgTimeout cancels it, but at most half of
	// Rebalance.Timeout. sarama's default Rebalance.Timeout of 60s thus
	// covers a MsgTimeout up to 29s; for a longer one, set Rebalance.Timeout
	// to at least twice MsgTimeout plus 2s (orderly consume does); with a
	// MsgTimeout set and the drain capped below it, New logs a warning.
	// After the drain, the read-back that confirms the final commit
	// (OnRevoked or OnLost) takes at most a quarter of that timeout, and
	// ends by seven eighths of it, less Heartbeat.Interval, after the
	// revoke began: a drain that runs past five eighths of the timeout
	// less Heartbeat.Interval shortens the read-back (a read that cannot
	// be done in time makes the partition OnLost). The default drain does
	// so when Heartbeat.Interval is above five eighths of the timeout less
	// that drain: when the drain is half the timeout, above an eighth of
	// it (a 10s Rebalance.Timeout with sarama's 3s heartbeat leaves the
	// read-back 0.75s, not 2.5s); a default drain shorter than half (the
	// longer of 30s and MsgTimeout plus a second) allows more (a 120s
	// timeout with a 10s MsgTimeout drains 30s, and keeps the quarter up
	// to a 45s heartbeat). New logs a warning when a drain that
	// runs its whole DrainTimeout would leave the read-back less than a
	// second (or than its quarter, when that is shorter), and refuses a
	// Rebalance.Timeout whose seven eighths are not above
	// Heartbeat.Interval: no read-back would ever fit.
	DrainTimeout time.Duration
	// Retry is how a failed item is retried, and after how many attempts
	// it is dead-lettered.
	Retry Retry
	// MsgTimeout is the deadline of the ctx given to Do, counted from the
	// call's start (ctx.Deadline reports it). Past it the ctx is cancelled
	// (context.Cause: ErrTimeout) and, when the call returns, it counts as
	// a failed attempt whose error wraps ErrTimeout and what Do returned
	// ("group: Do ran past MsgTimeout (context canceled)"; a batch is then
	// split to find the slow item). A Do
	// that ignores its ctx for MsgTimeout plus a grace of a tenth of it (at
	// least 1s, at most 30s) marks its worker stuck: logged, counted in
	// Stats.Stuck. With OrderLanes and OrderPartition its lanes stay
	// blocked until the call returns: order over liveness. With Unordered
	// its messages are handed to other workers, as nsqd does, and the late
	// completion is ignored: it never counts as done and never moves a
	// frontier (the hung call's side effects may still land:
	// at-least-once). Run still returns only once every Do has returned.
	// Default 5m (Kafka's max.poll.interval.ms); -1: no deadline.
	MsgTimeout time.Duration
	// Ordering is what Orderly keeps in order: OrderLanes (the default),
	// OrderPartition or Unordered.
	Ordering Ordering
	// DataPath is a directory for the failure path's files, messages
	// parked by Unordered (see ParkAfter) and the local dead-letter store
	// (when DeadLetterTopic is ""), and for the committed offsets the
	// read-back saw (committed-offsets.json, so that a rewind across a
	// restart shows REWIND). It must outlive the process and be one
	// per instance: parked messages are redelivered by the process that
	// parked them, also after a restart, and stay with it when their
	// partition moves to another member (at-least-once). "": nothing on
	// disk, no parking, and dead letters only to DeadLetterTopic.
	DataPath string
	// DeadLetterTopic receives dead letters (after Retry.MaxAttempts, on a
	// BatchError.DeadLetter, or when New fails); it is not one of Topics.
	// They are produced with acks from all in-sync replicas before the
	// source offset may be committed. "":
	// a local dead-letter store under DataPath (synced to disk before the
	// source offset may be committed); with no DataPath either, a message
	// New cannot decode is skipped and counted (Stats.DecodeErrors), and
	// Retry.MaxAttempts must be 0. The topic must exist when Run starts
	// (ErrDeadLetterTopic otherwise).
	DeadLetterTopic string
	// ParkAfter applies to Unordered with a DataPath (New refuses it
	// otherwise): a failed or deferred message due more than ParkAfter
	// from now is parked, written durably to the queue under DataPath
	// before the frontier may pass it, and redelivered when due; one due
	// sooner waits in memory and holds the frontier. Default 0: every one
	// is parked.
	ParkAfter time.Duration
	// CommitMetadata is the most bytes of commit metadata used to record
	// which messages above the committed offset are already finished, so
	// that the partition's next owner (after a handoff or a crash) skips
	// them. Default 4000, below Kafka's offset.metadata.max.bytes (4096);
	// -1 disables it (a new owner then handles those messages again).
	//
	// When the finished set of a partition no longer fits in three
	// quarters of it (unfinished messages scattered among finished ones;
	// a single stuck message with everything after it finished takes a
	// few bytes), the partition stops taking new messages until its
	// frontier moves and the set fits in half (Stats.MetadataFull), as
	// Confluent's Parallel Consumer does: a crash then repeats at most
	// what finished in the last commit interval, never an unbounded tail.
	// A broker that rejects the metadata (OFFSET_METADATA_TOO_LARGE: its
	// offset.metadata.max.bytes is smaller) gets the partition's commits
	// without metadata from then on (Stats.MetadataRejected).
	CommitMetadata int

	// Status sets how partition statuses (Stats.PartitionStats, the
	// group's Stats.Status) are evaluated.
	Status StatusConfig

	// OnAssigned, OnRevoked and OnLost, if set, are told of partitions
	// this member got, gave up gracefully (their final commit went out),
	// and lost (the session ended under them, e.g. the member was evicted:
	// nothing could be committed), with their generation; as franz-go's
	// OnPartitionsAssigned, Revoked and Lost, except that each call names
	// one partition, as its claim starts or ends (a cooperative rebalance
	// starts and ends claims within one session). They run on the claims'
	// goroutines, so calls for different partitions can run at once: make
	// them safe for that, and keep them short.
	OnAssigned func(topic string, partitions []int32, generation int32)
	OnRevoked  func(topic string, partitions []int32, generation int32)
	OnLost     func(topic string, partitions []int32, generation int32)

	// Trace, if set, is called around every Do call with the call's ctx
	// and messages: it returns the ctx to give Do (e.g. one carrying a
	// span linked to the messages' trace contexts, from their traceparent
	// headers) and a func called with Do's result. The otel package
	// provides one for OpenTelemetry, so that group itself imports none.
	Trace func(ctx context.Context, msgs []*Message) (context.Context, func(error))

	// Logger receives errors and lifecycle events with topic, partition,
	// offset, lane, attempt, member and generation fields (see the README's
	// "Logs"). Default zap.NewNop().
	Logger *zap.Logger
}

// Retry is the policy for an item that failed (it failed alone, or Do named
// it in a BatchError): it is handed out again after a capped exponential
// backoff, for as long as Run runs. The later messages of its lane wait
// behind it; other lanes keep flowing. A batch that fails as a whole is
// first split to find its failing items, at once and without backoff.
type Retry struct {
	// Backoff before an item's first retry; doubled each attempt.
	// Default 100ms.
	Backoff time.Duration
	// MaxBackoff caps the backoff. Default 10s, or Backoff when that is
	// longer.
	MaxBackoff time.Duration
	// Jitter spreads each backoff at random by up to this fraction of it,
	// either way, so that items failing together do not retry together.
	// Default 0.2 (0 means the default); a negative value: no jitter. At
	// most 1.
	Jitter float64
	// MaxAttempts is the most attempts an item gets: once it has failed
	// MaxAttempts times it is dead-lettered (reason max_attempts, or
	// timeout when its last attempt ran past MsgTimeout). 0 (the default)
	// means unlimited. Above 0 it needs DeadLetterTopic or DataPath: a
	// dead-letter queue in memory would lose what it holds. The count
	// travels in the commit metadata, so a new owner continues it.
	MaxAttempts int
}

// exhausted reports whether an item whose next attempt is attempt has used
// up its attempts: MaxAttempts is set and attempt is past it. Such an item
// is dead-lettered, never run again.
func (r Retry) exhausted(attempt int) bool {
	return r.MaxAttempts > 0 && attempt > r.MaxAttempts
}

// Ordering is what Orderly keeps in order.
type Ordering int

const (
	// OrderLanes (the default): messages of a partition with equal Split
	// (by default, equal keys) reach Do in offset order and never
	// concurrently; a failing message holds back its lane only.
	OrderLanes Ordering = iota
	// OrderPartition: one lane per partition (Split is not called), as a
	// plain Kafka consumer; a failing message holds back its partition.
	OrderPartition
	// Unordered: no message waits for another; a failing one holds back
	// nothing but the commit frontier, and with a DataPath not even that
	// (see ParkAfter).
	Unordered
)

func (o Ordering) String() string {
	switch o {
	case OrderLanes:
		return "OrderLanes"
	case OrderPartition:
		return "OrderPartition"
	case Unordered:
		return "Unordered"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// DefaultSarama returns the client config Orderly uses when Config.Sarama
// is nil: Kafka version 3.0.0 (accepted by Kafka 3.x and kfake),
// Consumer.Offsets.Initial = OffsetOldest, Consumer.IsolationLevel =
// ReadCommitted (records of aborted transactions never reach Do, and
// records of open transactions wait until they commit), the
// cooperative-sticky rebalance strategy, Metadata.RefreshFrequency =
// DefaultMetadataRefresh (30s: partitions added to a topic are consumed
// within a minute), Metadata.AllowAutoTopicCreation off (a misspelt topic
// is an error, ErrUnknownTopic, not a new topic), Consumer.MaxWaitTime =
// DefaultFetchMaxWait (100ms: a partition whose fetching was paused is
// fetched again soon after it resumes), and sarama's defaults otherwise.
// Start from it to change a few settings.
func DefaultSarama() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	sc.Metadata.RefreshFrequency = DefaultMetadataRefresh
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Consumer.MaxWaitTime = DefaultFetchMaxWait
	return sc
}

// withDefaults returns a copy of c with zero fields set and the sarama
// config built.
func (c Config) withDefaults() Config {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Num == 0 {
		c.Num = DefaultNum
	}
	if c.Ticker == 0 {
		c.Ticker = DefaultTicker
	}
	if c.Chan == 0 {
		c.Chan = c.Size
		if c.Size == 1 {
			c.Chan = DefaultChanSize1
		}
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlightBytes == 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.CommitMetadata == 0 {
		c.CommitMetadata = DefaultCommitMetadata
	}
	if c.Retry.Backoff == 0 {
		c.Retry.Backoff = DefaultRetryBackoff
	}
	if c.Retry.MaxBackoff == 0 {
		// A Backoff above the default cap raises the cap with it, rather
		// than failing on a MaxBackoff the user never set.
		c.Retry.MaxBackoff = max(DefaultMaxBackoff, c.Retry.Backoff)
	}
	switch {
	case c.Retry.Jitter == 0:
		c.Retry.Jitter = DefaultJitter
	case c.Retry.Jitter < 0:
		c.Retry.Jitter = 0
	}
	switch {
	case c.MsgTimeout == 0:
		c.MsgTimeout = DefaultMsgTimeout
	case c.MsgTimeout < 0:
		c.MsgTimeout = 0
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Status.Window == 0 {
		c.Status.Window = 10
	}
	if c.Status.StuckHead == 0 {
		c.Status.StuckHead = 30 * time.Second
	}
	if c.Status.ReadBack == 0 {
		c.Status.ReadBack = 5 * time.Second
	}
	var sc *sarama.Config
	if c.Sarama == nil {
		sc = DefaultSarama()
	} else {
		sc = saramaFor(c.Sarama) // shares nothing mutable with the base
	}
	applyResetPolicy(sc, c.OnOffsetReset)
	if c.InstanceID != "" && sc.Consumer.Group.InstanceId == "" {
		sc.Consumer.Group.InstanceId = c.InstanceID
	}
	if sc.ClientID == "" || sc.ClientID == "sarama" {
		sc.ClientID = "orderly"
	}
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.AutoCommit.Enable = false // Orderly commits (see Config.Sarama)
	if c.DeadLetterTopic != "" {
		// Dead letters: a SyncProducer on the group's client, acked by
		// all in-sync replicas before the source offset is committed.
		sc.Producer.Return.Successes = true
		sc.Producer.RequiredAcks = sarama.WaitForAll
	}
	if c.Chan > 0 && c.Chan <= MaxChan {
		sc.ChannelBufferSize = c.Chan
	}
	c.Sarama = sc
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout(sc.Consumer.Group.Rebalance.Timeout, c.MsgTimeout)
	}
	raiseJoinReadTimeout(c)
	if c.Status.StopAfter == 0 && c.Status.Window > 0 {
		c.Status.StopAfter = time.Duration(c.Status.Window) * sc.Consumer.Offsets.AutoCommit.Interval
	}
	if c.Status.LostAfter == 0 {
		c.Status.LostAfter = 2 * sc.Consumer.Group.Session.Timeout
	}
	return c
}

// validate reports the first invalid field of a defaulted config.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case len(c.Brokers) == 0:
		return bad("Brokers", "is empty: give at least one host:port")
	case len(c.Topics) == 0:
		return bad("Topics", "is empty: give at least one topic")
	case c.GroupID == "":
		return bad("GroupID", "is empty")
	case c.Size < 0 || c.Size > MaxSize:
		return bad("Size", "is %d: must be between 1 and %d (0 means %d)", c.Size, MaxSize, DefaultSize)
	case c.Num < 0 || c.Num > MaxNum:
		return bad("Num", "is %d: must be between 1 and %d (0 means %d)", c.Num, MaxNum, DefaultNum)
	case c.Num*c.Size > MaxBatchSlots:
		return bad("Num", "is %d with Size %d: Num*Size must be at most %d (each worker holds a batch of Size)", c.Num, c.Size, MaxBatchSlots)
	case c.Chan < 0 || c.Chan > MaxChan:
		return bad("Chan", "is %d: must be between 1 and %d (0 means Size; with Size 1, %d)", c.Chan, MaxChan, DefaultChanSize1)
	case c.MaxInFlight < 0 || c.MaxInFlight > MaxMaxInFlight:
		return bad("MaxInFlight", "is %d: must be between 1 and %d (0 means %d)", c.MaxInFlight, MaxMaxInFlight, DefaultMaxInFlight)
	case c.MaxInFlightBytes < 0:
		return bad("MaxInFlightBytes", "is %d: must be positive (0 means %d)", c.MaxInFlightBytes, int64(DefaultMaxInFlightBytes))
	case c.Retry.Backoff < 0:
		return bad("Retry.Backoff", "is %v: must be positive", c.Retry.Backoff)
	case c.Retry.MaxBackoff < c.Retry.Backoff:
		return bad("Retry.MaxBackoff", "is %v: must be at least Retry.Backoff (%v)", c.Retry.MaxBackoff, c.Retry.Backoff)
	case c.Retry.Jitter > 1 || math.IsNaN(c.Retry.Jitter):
		return bad("Retry.Jitter", "is %v: must be at most 1 (a fraction of the backoff)", c.Retry.Jitter)
	case c.Retry.MaxAttempts < 0:
		return bad("Retry.MaxAttempts", "is %d: must be positive, or 0 for unlimited", c.Retry.MaxAttempts)
	case c.Retry.MaxAttempts > 0 && c.DeadLetterTopic == "" && c.DataPath == "":
		return bad("Retry.MaxAttempts", "is %d but neither DeadLetterTopic nor DataPath is set: dead letters would have nowhere to go (a memory-only dead-letter queue would lose them)", c.Retry.MaxAttempts)
	case c.Ordering < OrderLanes || c.Ordering > Unordered:
		return bad("Ordering", "is %d: must be OrderLanes, OrderPartition or Unordered", int(c.Ordering))
	case c.Status.Window < 2 || c.Status.Window > 1000:
		return bad("Status.Window", "is %d: must be between 2 and 1000 commit intervals", c.Status.Window)
	case c.Status.StopAfter < 0 || c.Status.StuckHead < 0 || c.Status.LostAfter < 0:
		return bad("Status", "has a negative duration: StopAfter %v, StuckHead %v, LostAfter %v", c.Status.StopAfter, c.Status.StuckHead, c.Status.LostAfter)
	case c.Status.ReadBack > 0 && c.Status.ReadBack < 10*time.Millisecond:
		return bad("Status.ReadBack", "is %v: at least 10ms (or negative: never)", c.Status.ReadBack)
	case c.ParkAfter < 0:
		return bad("ParkAfter", "is %v: must not be negative", c.ParkAfter)
	case c.ParkAfter > 0 && (c.Ordering != Unordered || c.DataPath == ""):
		return bad("ParkAfter", "is %v: it applies only to Ordering Unordered with a DataPath (messages are parked on disk only then)", c.ParkAfter)
	case c.DeadLetterTopic != "" && slices.Contains(c.Topics, c.DeadLetterTopic):
		return bad("DeadLetterTopic", "%q is one of Topics: the group would consume its own dead letters", c.DeadLetterTopic)
	case c.Sarama.Consumer.Group.Rebalance.Timeout <= 0:
		return bad("Sarama.Consumer.Group.Rebalance.Timeout", "is %v: must be positive (DrainTimeout stays below it)", c.Sarama.Consumer.Group.Rebalance.Timeout)
	case c.CommitMetadata < -1:
		return bad("CommitMetadata", "is %d: must be positive, or -1 to disable", c.CommitMetadata)
	case c.DrainTimeout < 0:
		return bad("DrainTimeout", "is %v: must be positive", c.DrainTimeout)
	case c.OnOffsetReset < ResetFollow || c.OnOffsetReset > ResetRefuse:
		return bad("OnOffsetReset", "is %d: must be ResetFollow or ResetRefuse", int(c.OnOffsetReset))
	case c.InstanceID != "" && c.Sarama.Consumer.Group.InstanceId != c.InstanceID:
		return bad("InstanceID", "is %q but Sarama.Consumer.Group.InstanceId is %q: set one of them", c.InstanceID, c.Sarama.Consumer.Group.InstanceId)
	case !ValidInstanceID(c.Sarama.Consumer.Group.InstanceId):
		return bad("InstanceID", "is %q: use at most 249 letters, digits, '.', '_' and '-'", c.Sarama.Consumer.Group.InstanceId)
	case c.DrainTimeout >= c.Sarama.Consumer.Group.Rebalance.Timeout:
		return bad("DrainTimeout", "is %v: must be below Sarama.Consumer.Group.Rebalance.Timeout (%v)",
			c.DrainTimeout, c.Sarama.Consumer.Group.Rebalance.Timeout)
	case releaseWindow(c.Sarama) <= 0:
		return bad("Sarama.Consumer.Group.Rebalance.Timeout", "is %v: seven eighths of it must exceed Sarama.Consumer.Group.Heartbeat.Interval (%v), or no partition let go could read back its final commit in time: each would be OnLost",
			c.Sarama.Consumer.Group.Rebalance.Timeout, c.Sarama.Consumer.Group.Heartbeat.Interval)
	}
	for i, b := range c.Brokers {
		if b == "" {
			return bad(fmt.Sprintf("Brokers[%d]", i), "is empty")
		}
	}
	for i, t := range c.Topics {
		if t == "" {
			return bad(fmt.Sprintf("Topics[%d]", i), "is empty")
		}
	}
	if iv := c.Sarama.Consumer.Offsets.AutoCommit.Interval; iv <= 0 {
		return bad("Sarama.Consumer.Offsets.AutoCommit.Interval", "is %v: must be positive (Orderly commits at this interval)", iv)
	}
	if err := c.Sarama.Validate(); err != nil {
		return fmt.Errorf("%w: Sarama: %w", ErrConfig, err)
	}
	return nil
}
